// mil.h - generator of the MIL text the ANE compiler accepts.
//
// Emits exactly one dialect: the one of the seed project (fp16 I/O, named
// conv constants, one weight const right before each 1x1 conv, add / mul /
// sigmoid tensor x tensor, every op named after its result). Programs have
// the form
//
//   program(1.3) / buildInfo line / { / func main<ios18>(inputs) { /
//   constant block / body / } -> (outputs); / }
//
// Tensors are [1, C, 1, W] fp16: C channels, W token columns. Weights are
// [COUT, CIN, 1, 1] fp16 constants read from a blob file (blob.h) at the
// offset of their chunk header. The text is built in memory; ane_mil_text
// hands it over (caller frees). A builder that hits an error (bad sizes,
// out of memory) remembers the first one and every later call is a no-op,
// so callers check once at the end.
//
// Kernels (the ones the engine uses), all one input i0 and one output o0,
// all reading "@model_path/weights/w.bin":
//   ane_mil_proj  one conv cin -> cout, chunk at 64. Serves a single
//                 projection, the fused QKV (rows [Wq; Wk; Wv]), o, the split
//                 FFN (up: rows [Wgate; Wup], then down) and every LM-head
//                 chunk (width 1).
//   ane_mil_ffn   fused FFN: gate conv, up conv, sigmoid, mul, mul, down
//                 conv, chunks gate / up / down.
//
// int8 weights (ane_mil_conv_i8, and the _w kernel forms with
// ANE_W_INT8): the conv's weight is not a const but a
// constexpr_affine_dequantize of int8 data with one fp16 scale per output
// channel, in the form with every operand an attribute inside [...] and
// the data named quantized_data (the one reported to compile on the
// private path; the form with call arguments and input = is the one that
// was refused there):
//
//   tensor<fp16, [COUT, CIN, 1, 1]> w0 = constexpr_affine_dequantize()[axis = int32(0),
//     name = string("w0"), quantized_data = tensor<int8, [COUT, CIN, 1, 1]>(BLOBFILE(path =
//     string("@model_path/weights/w.bin"), offset = uint64(Q))), scale = tensor<fp16,
//     [COUT]>(BLOBFILE(path = string("@model_path/weights/w.bin"), offset = uint64(S))),
//     zero_point = int8(0)];
//
// (one line). axis 0 is the output channel; the weights are symmetric, so
// the zero point is the scalar 0. Each such weight costs two BLOBFILE
// slots. Its blob chunks: the int8 [COUT][CIN] data (element type int8,
// blob.h), then the COUT fp16 scales; the fused FFN has gate q, gate
// scales, up q, up scales, down q, down scales (6 of the 16 slots).
// 4-bit palettised weights (ane_mil_conv_l4, ANE_W_LUT4): the iOS18 form
// of a table lookup, then one scale per output row (three BLOBFILE slots):
//
//   tensor<fp16, [COUT, CIN, 1, 1]> w0_p = constexpr_lut_to_dense(indices =
//     tensor<uint4, [COUT, CIN, 1, 1]>(BLOBFILE(path = string("@model_path/
//     weights/w.bin"), offset = uint64(Q))), lut = tensor<fp16, [G, 1, 1, 1,
//     16, 1]>(BLOBFILE(..., offset = uint64(T))))[name = string("w0_p")];
//   tensor<fp16, [COUT, CIN, 1, 1]> w0 = constexpr_blockwise_shift_scale(
//     data = w0_p, scale = tensor<fp16, [COUT, 1, 1, 1]>(BLOBFILE(...,
//     offset = uint64(S))))[name = string("w0")];
//
// (two lines): G tables of 16 values, one for each group of COUT / G rows
// (G = COUT / 64, or 1 when COUT is not a multiple of 64). Its chunks: the
// indices (uint4, blob.h), the tables, the scales; the fused FFN takes 9
// of the 16 slots. Whether the device's compiler takes this form is
// unknown: the emu runs it.
#ifndef ANE_MIL_H
#define ANE_MIL_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "plan.h" // enum ane_wfmt

#define ANE_MIL_WEIGHT_FILE "w.bin"
#define ANE_MIL_WEIGHT_PATH "@model_path/weights/" ANE_MIL_WEIGHT_FILE

// line 2 of every program (no newline)
extern const char ane_mil_build_info[];

// the ANE rejects programs with more weight constants than this
#define ANE_MIL_MAX_BLOBFILES 16

struct ane_mil {
	char *buf;
	size_t len, cap;
	int nweights; // weights emitted so far (w0, w1, ...)
	int nblob;    // BLOBFILE consts emitted so far (two per int8 weight)
	int body;     // inputs closed, constant block emitted
	int failed;
	char err[AD_ERRLEN];
};

void ane_mil_init(struct ane_mil *m);
void ane_mil_free(struct ane_mil *m);

// declare an input tensor<fp16, [1, c, 1, w]> name; all inputs come first
void ane_mil_input(struct ane_mil *m, const char *name, int c, int w);

// y = conv(x, weight [cout, cin, 1, 1] at blob offset off); the weight
// const is named "w<k>" for the k-th conv of the program
void ane_mil_conv(struct ane_mil *m, const char *y, const char *x, int cout, int cin, int w, uint64_t off);
// the same conv with int8 weights: data chunk at off_q, scales at off_s
void ane_mil_conv_i8(struct ane_mil *m, const char *y, const char *x, int cout, int cin, int w, uint64_t off_q,
                     uint64_t off_s);
// the same conv with 4-bit palettised weights: indices at off_q, tables at
// off_t, scales at off_s
void ane_mil_conv_l4(struct ane_mil *m, const char *y, const char *x, int cout, int cin, int w, uint64_t off_q,
                     uint64_t off_t, uint64_t off_s);
// the tables of a 4-bit weight of cout rows: one a group of 64 rows, or
// one for all when cout is not a multiple of 64
int ane_mil_l4_tables(int cout);
void ane_mil_add(struct ane_mil *m, const char *y, const char *a, const char *b, int c, int w);
void ane_mil_mul(struct ane_mil *m, const char *y, const char *a, const char *b, int c, int w);
void ane_mil_sigmoid(struct ane_mil *m, const char *y, const char *x, int c, int w);

// close the function returning the nout names; returns the malloc'd text
// (the builder is emptied) or NULL with the first error in err
char *ane_mil_finish(struct ane_mil *m, const char *const *outs, int nout, char *err);

// the kernels above; NULL and err on bad sizes
char *ane_mil_proj(int cin, int cout, int width, char *err);
char *ane_mil_ffn(int hidden, int inter, int width, char *err);

char *ane_mil_proj_w(int cin, int cout, int width, enum ane_wfmt f, char *err);
char *ane_mil_ffn_w(int hidden, int inter, int width, enum ane_wfmt f, char *err);
#endif
