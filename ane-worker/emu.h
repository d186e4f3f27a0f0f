// emu.h - the emu backend: ANE programs executed on the CPU.
//
// emu_compile takes the same MIL text (mil.h) and weight-blob files
// (blob.h) the ANE compiler would get, parses them, and refuses what the
// ANE refuses or silently gets wrong:
//   - ops outside const / conv (1x1, groups 1) / add / mul / sigmoid, with
//     a reason for the known-bad ones (matmul fails at eval, rsqrt, concat,
//     gelu, reduce_mean, softmax, constexpr_affine_dequantize, ...);
//   - conv with bias=, or conv parameters given inline instead of as named
//     consts, or parameters other than valid / strides 1 / dilations 1;
//   - more than 16 BLOBFILE consts (15 once any op takes an inline scalar);
//   - a BLOBFILE offset that is not the header of a chunk in its file, a
//     chunk whose size is not its tensor's, a file that is truncated or
//     carries a wrong data offset;
//   - inconsistent shapes, undefined or redefined names, outputs that are
//     not the result of an op.
// Every error names the line, the op and the tensor.
//
// Execution follows the ANE's numerics: every tensor is stored as fp16
// between ops, conv accumulates in fp32. Weights are repacked at compile
// time into 16-row panels ([cout/16][cin][16] fp16) that an AVX2/FMA/F16C
// kernel (picked at run time, no -march flag needed) or its plain-C `_ref`
// twin streams; large convs are split over the context's threads.
//
// I/O goes through surfaces in the planar layout of layout.h (fp16, one
// plane per channel). emu_eval computes the first ncols columns only:
// every op works column by column, so those columns are exactly what the
// device would produce for the whole width; the others are left alone.
//
// A context is used by one thread at a time; kernels compiled in it share
// its threads.
#ifndef ANE_EMU_H
#define ANE_EMU_H

#include <stddef.h>
#include <stdint.h>

#include "layout.h"

struct emu;
struct emu_kernel;

struct emu_opts {
	int threads;   // worker threads for large convs (0: 2)
	int force_ref; // use the plain-C kernels even on AVX2 hardware
};

// a weight file the program names as @model_path/weights/<name>: read from
// path, or, if data is set, from memory (len bytes). Either is read only
// during emu_compile; the kernel keeps its own repacked copy.
struct emu_file {
	const char *name;
	const char *path;
	const void *data;
	size_t len;
};

struct emu *emu_open(const struct emu_opts *opts, char *err);
void emu_close(struct emu *e);

struct emu_kernel *emu_compile(struct emu *e, const char *mil, const struct emu_file *files,
                               int nfiles, char *err);
void emu_kernel_free(struct emu_kernel *k);

int emu_ninputs(const struct emu_kernel *k);
int emu_noutputs(const struct emu_kernel *k);
// name and fp16 planar layout of input / output i (declaration order)
const char *emu_input_name(const struct emu_kernel *k, int i);
const char *emu_output_name(const struct emu_kernel *k, int i);
const struct ane_layout *emu_input_layout(const struct emu_kernel *k, int i);
const struct ane_layout *emu_output_layout(const struct emu_kernel *k, int i);
// width of the program (columns), and the one allocation size per direction
size_t emu_width(const struct emu_kernel *k);
size_t emu_input_capacity(const struct emu_kernel *k);
size_t emu_output_capacity(const struct emu_kernel *k);
// weight bytes the program reads per eval, and how many BLOBFILE consts
uint64_t emu_weight_bytes(const struct emu_kernel *k);
int emu_nblobfiles(const struct emu_kernel *k);

// The compiled program's constant buffers, for an on-disk cache of
// compiled kernels (kcache.h): what emu_compile made from the blobs (the
// repacked weights), listed as raw bytes with their kind. A kernel
// compiled again from the same MIL text with emu_compile_packed and those
// bytes computes exactly what the original did, without reading or
// repacking a blob. A new kind of buffer (another weight format) gets a
// new kind value here and is listed by the weight it belongs to; a cache
// stores it without knowing what it is.
enum emu_const_kind {
	EMU_CONST_F16_PANELS = 1, // fp16 16-row panels (emu_pack's layout), emu_panel_bytes(cout, cin)
};
#define EMU_MAX_CONSTS_PER_WEIGHT 4

struct emu_const {
	int weight;       // the BLOBFILE const it belongs to (the program's declaration order)
	int kind;         // enum emu_const_kind
	size_t bytes;
	const void *data; // 64-byte aligned
};

int emu_kernel_nconsts(const struct emu_kernel *k);
// the i-th buffer (0 .. nconsts-1, by weight); -1 past the end
int emu_kernel_const(const struct emu_kernel *k, int i, struct emu_const *out);
// mil as emu_compile would take it, with the constants taken from consts
// (borrowed: they must stay mapped and unchanged while the kernel lives)
// instead of blob files; each must have the size the program needs and be
// 64-byte aligned. The program text is checked as by emu_compile; the
// blob files it names are not opened.
struct emu_kernel *emu_compile_packed(struct emu *e, const char *mil, const struct emu_const *consts,
                                      int nconsts, char *err);

// in[i] / out[i]: surfaces laid out as emu_input_layout / emu_output_layout;
// ncols in 1..width (0: the whole width)
int emu_eval(struct emu_kernel *k, const void *const *in, void *const *out, size_t ncols,
             char *err);

// the conv kernels, exposed for tests and benchmarks. Panels: weight (o, i)
// of a [cout][cin] fp16 matrix at panel o/16, offset (i * 16 + o % 16);
// rows past cout are zero. x is [ncols][cin] fp32, y is [ncols][cout]; rows
// of panels [p0, p1) are computed and rounded to fp16.
size_t emu_panel_bytes(size_t cout, size_t cin);
void emu_pack(const uint16_t *w, size_t cout, size_t cin, uint16_t *panels);
void emu_conv_ref(const uint16_t *panels, size_t cout, size_t cin, const float *x, size_t ncols,
                  float *y, size_t p0, size_t p1);
// the fast kernel, or the reference one when the CPU lacks AVX2/FMA/F16C
void emu_conv_fast(const uint16_t *panels, size_t cout, size_t cin, const float *x, size_t ncols,
                   float *y, size_t p0, size_t p1);
int emu_have_simd(void);

#endif
