// emu.h - the emu backend: ANE programs executed on the CPU.
//
// emu_compile takes the same MIL text (mil.h) and weight-blob files
// (blob.h) the ANE compiler would get, parses them, and refuses what the
// ANE refuses or silently gets wrong:
//   - ops outside const / conv (1x1, groups 1) / add / mul / sigmoid, with
//     a reason for the known-bad ones (matmul fails at eval, rsqrt, concat,
//     gelu, reduce_mean, softmax, ...);
//   - a constexpr_affine_dequantize in any form but the generator's (mil.h:
//     attributes only, int8 quantized_data [COUT, CIN, 1, 1] and fp16
//     scale [COUT] from BLOBFILEs, axis = int32(0), zero_point = int8(0)),
//     or whose result is used by anything but a conv's weight;
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
// time into 16-row panels, in pairs ([cout/32][cin][32] fp16; large ones on huge
// pages) that the conv kernels stream. Three paths, bit for bit the same
// (each output is one fp32 FMA chain over the inputs in order, rounded to
// fp16 once): the plain-C `_ref` kernel, an AVX2/FMA/F16C one and an
// AVX-512 (F/BW/DQ/VL) one. A context picks the best its CPU has at run
// time (cpuid; no -march flag needed), or the one emu_opts.simd or the
// environment's ANEDVD_SIMD=ref|avx2|avx512 names, capped at what the CPU
// has; force_ref is the same as simd = EMU_SIMD_REF. Large convs are split
// over the context's threads (the calling thread works too). A one-column
// conv streams one panel at a time when the context's weights exceed half
// the last-level cache (they then come from DRAM at every eval), several
// at once when they stay cached; the bits are the same. A fused FFN's
// sigmoid, mul, mul run as one pass over the gate and up outputs, split
// over the threads (the same roundings as op by op).
//
// int8 weights (constexpr_affine_dequantize): the emu does NOT dequantise
// them. They stay one byte per weight, in int8 panels interleaved four at
// a time ([cout/64][cin][64], emu_i8_pack) with one scale per output row,
// and the conv computes
//   y[o] = fp16( fp32(scale[o] * acc[o]) ),
//   acc[o] = fp32 FMA chain over i = 0 .. cin-1 of (float)q[o][i] * x[i]
// (emu-i8.c: a plain `_ref`, an AVX2 and an AVX-512 kernel, picked by
// cpuid, bit-identical). The ANE instead dequantises at compile time to
// fp16 weights w[o][i] = fp16(scale[o] * q[o][i]) and runs its fp16 conv.
// The difference is that rounding of each weight: |w - scale q| <= 2^-11
// |scale q| (round to nearest; plus 2^-25 absolute where the product is an
// fp16 subnormal), so for one output, before the final fp16 rounding,
//   |y_emu - y_ane| <= 2^-11 * sum_i |scale[o] q[o][i] x[i]| + 2^-25 sum_i |x[i]|
// on top of whatever the two accumulations differ by (the ANE's own
// accumulation order and precision are not known; the emu's fp16 path has
// the same unknown). That bound is the worst case (every weight's rounding
// in the same direction); with signs at random, |y| ~ sum |w x| / sqrt(cin),
// it is ~sqrt(cin) 2^-11 |y| (0.03 |y| at cin 4864). The roundings being
// independent, the expected difference is ~2^-11 / sqrt(3) ||(w_i x_i)_i||_2,
// about 2^-11 |y|: an fp16 ulp of y, below the fp16 rounding of y itself.
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

// conv kernel paths, in order (emu_opts.simd, emu_conv_simd)
enum emu_simd { EMU_SIMD_AUTO = 0, EMU_SIMD_REF, EMU_SIMD_AVX2, EMU_SIMD_AVX512 };

struct emu_opts {
	int threads;   // threads for large convs, the caller included (0: 2)
	int force_ref; // use the plain-C kernels even on AVX2 hardware
	// EMU_SIMD_*: the best path to use, capped at the CPU's; AUTO: the
	// CPU's best, or what ANEDVD_SIMD=ref|avx2|avx512 in the environment says
	int simd;
	int no_fuse; // run a fused FFN's elementwise steps op by op (tests, benchmarks)
	// convs of fewer columns run on the calling thread alone (0: the
	// default, or ANEDVD_EMU_PAR_COLS): memory-bound ones gain little from
	// a second thread and pay its wake-up
	int par_cols;
	// take every kernel's weights as read from DRAM, whatever the size of
	// the last-level cache (tests): one column then reads one range a
	// thread
	int cold;
	// those ranges shared by stealing (a thread done with its own takes
	// the back half of what another has left): 1 yes, -1 no, 0 the CPU's
	// default (yes but on AMD Zen 4, where it was measured not to pay)
	int steal;
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

// the path ANEDVD_SIMD names (EMU_SIMD_AUTO when unset); -1 with err for
// any other value (emu_open refuses it too; a process checks it at start)
int emu_simd_env(int *level, char *err);
// One column streams a conv's weights from memory, one stream per thread,
// and the kernels prefetch each stream's 64-byte lines into L2 this many
// steps (lines) ahead: ANEDVD_PREFETCH_AHEAD bytes when set (0: none), else the
// distance measured best on the CPU's kind for fp16 weights, or for narrow
// ones (a byte or less a weight: int8, lut4) when narrow is set (emu.c). The
// same bits whatever the distance.
size_t emu_prefetch_steps(int narrow);
// ANEDVD_PREFETCH_AHEAD as read: bytes, -1 unset or empty, -2 not a whole number
// of bytes from 0 to EMU_PREFETCH_MAX (emu_simd_env refuses it)
long emu_prefetch_env(void);
#define EMU_PREFETCH_MAX 65536
// Whether those prefetches are non-temporal (prefetchnta: the line comes
// in for this pass over the weights and leaves the outer caches to what
// the processes use again, the client's keys and values among them) rather
// than into L2: ANEDVD_PREFETCH_NTA=0|1 when set, else on for narrow
// weights on AMD Zen 4, where it was measured (emu.c), off otherwise.
int emu_prefetch_nta(int narrow);
// ANEDVD_PREFETCH_NTA as read: 0 or 1, -1 unset or empty, -2 anything else
// (emu_simd_env refuses it)
int emu_prefetch_nta_env(void);
// one line of a one-column stream prefetched, non-temporally when nta
static inline void
emu_prefetch_line(const void *p, int nta)
{
	if (nta)
		__builtin_prefetch(p, 0, 0);
	else
		__builtin_prefetch(p, 0, 2);
}
struct emu *emu_open(const struct emu_opts *opts, char *err);
void emu_close(struct emu *e);

struct emu_kernel *emu_compile(struct emu *e, const char *mil, const struct emu_file *files, int nfiles, char *err);
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
// bytes of the context's activations the program's buffers take at its
// full width (buffers whose lives do not meet share them)
size_t emu_act_bytes(const struct emu_kernel *k);

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
	EMU_CONST_I8_PANELS = 2,  // int8 panels (emu_i8_pack's layout), emu_i8_panel_bytes(cout, cin)
	EMU_CONST_L4_PANELS = 4,  // 4-bit indices (emu_l4_pack's layout), emu_l4_panel_bytes(cout, cin)
	EMU_CONST_F16_SCALES = 6, // an int8 or 4-bit weight's per-row fp16 scales, 16 * npanels halves
	EMU_CONST_F16_LUT = 7,    // a 4-bit weight's fp16 tables, 16 a quad of 64 rows
				  // (3 and 5 were the scales and tables widened to fp32, 4 bytes each:
				  // kernel cache format 2 and before)
};
#define EMU_MAX_CONSTS_PER_WEIGHT 4

// the alignment of a constant's data, which emu_compile_packed requires
#define EMU_CONST_ALIGN 64
struct emu_const {
	int weight; // the BLOBFILE const it belongs to (the program's declaration order)
	int kind;   // enum emu_const_kind
	size_t bytes;
	const void *data; // EMU_CONST_ALIGN-byte aligned
};

int emu_kernel_nconsts(const struct emu_kernel *k);
// the i-th buffer (0 .. nconsts-1, by weight); -1 past the end
int emu_kernel_const(const struct emu_kernel *k, int i, struct emu_const *out);
// mil as emu_compile would take it, with the constants taken from consts
// (borrowed: they must stay mapped and unchanged while the kernel lives)
// instead of blob files; each must have the size the program needs and be
// aligned on EMU_CONST_ALIGN bytes. The program text is checked as by
// emu_compile; the blob files it names are not opened.
struct emu_kernel *emu_compile_packed(struct emu *e, const char *mil, const struct emu_const *consts, int nconsts,
                                      char *err);

// A kernel's borrowed constants (emu_compile_packed's, from a mapped cache
// file) moved into memory of the context's own, on huge pages, in two
// steps. emu_kernel_copy copies them; the kernel may run meanwhile (the
// copy only reads them). It calls pace(arg) before each piece of
// EMU_COPY_PIECE bytes (a caller may wait there); nonzero stops it: NULL,
// err says why. emu_kernel_adopt points the kernel at the copies, which it
// then owns, and frees the handle; not while the kernel runs.
// emu_copy_free drops a copy not adopted. Why: on some VMs the page cache's
// memory streams slower than fresh anonymous memory (docs/RESULTS.md).
#define EMU_COPY_PIECE ((size_t)2 << 20)
struct emu_copy;
struct emu_copy *emu_kernel_copy(const struct emu_kernel *k, int (*pace)(void *arg), void *arg, char *err);
void emu_kernel_adopt(struct emu_kernel *k, struct emu_copy *c);
void emu_copy_free(struct emu_copy *c);
// bytes of constants the kernel borrows (0 once adopted, or if compiled
// from blob files)
size_t emu_kernel_borrowed(const struct emu_kernel *k);

// in[i] / out[i]: surfaces laid out as emu_input_layout / emu_output_layout;
// ncols in 1..width (0: the whole width)
int emu_eval(struct emu_kernel *k, const void *const *in, void *const *out, size_t ncols, char *err);
// emu_eval of a kernel with one input and one output, with host rows in
// place of a surface: the input read from x_in ([ncols][in_ld] fp32, each
// value rounded to fp16 as the surface would hold it) when x_in is not
// NULL, the output written to y_out ([ncols][out_ld], the fp16 values a
// gather of the surface would read) when y_out is not NULL, that surface
// then left as it was. The same bits as through the surfaces.
int emu_eval_host(struct emu_kernel *k, const void *in, void *out, const float *x_in, size_t in_ld, float *y_out,
                  size_t out_ld, size_t ncols, char *err);

// the conv kernels, exposed for tests and benchmarks. Panels of 16 rows,
// interleaved in pairs: weight (o, i) of a [cout][cin] fp16 matrix at pair
// o/32, offset (i * 32 + o % 32) (a pair's step is one 64-byte line); rows
// past cout are zero (emu_panel_bytes rounds cout up to 32). x is
// [ncols][cin] fp32, y is [ncols][cout]; rows of panels [p0, p1) (16-row
// panels) are computed and rounded to fp16.
size_t emu_panel_bytes(size_t cout, size_t cin);
void emu_pack(const uint16_t *w, size_t cout, size_t cin, uint16_t *panels);
// emu_pack's pairs [q0, q1) only (32 rows each), in blocks of steps that
// stay in L1 (a compile's repacking, in parts on the pool); w's rows are
// [cin] fp16 at any even address. emu_pack is its plain twin
void emu_pack_pairs(const void *w, size_t cout, size_t cin, uint16_t *panels, size_t q0, size_t q1);
void emu_conv_ref(const uint16_t *panels, size_t cout, size_t cin, const float *x, size_t ncols, float *y, size_t p0,
                  size_t p1);
// the kernel of a given path (EMU_SIMD_*, capped at what the CPU has;
// AUTO: the best), and the best one (the reference one when the CPU lacks
// AVX2/FMA/F16C)
void emu_conv_simd(int level, const uint16_t *panels, size_t cout, size_t cin, const float *x, size_t ncols, float *y,
                   size_t p0, size_t p1);
void emu_conv_fast(const uint16_t *panels, size_t cout, size_t cin, const float *x, size_t ncols, float *y, size_t p0,
                   size_t p1);
int emu_have_simd(void);              // AVX2/FMA/F16C or better
int emu_cpu_simd(void);               // the best EMU_SIMD_* path of this CPU
const char *emu_simd_name(int level); // "ref", "avx2", "avx512" ("auto" for others)
int emu_simd(const struct emu *e);    // the path a context runs

// the context's thread pool, for other kernels: fn(arg, t) for t in
// [0, ntasks), claimed by the calling thread and the workers as they come;
// returns when all are done. Not reentrant (one job at a time per context).
void emu_parallel(struct emu *e, void (*fn)(void *arg, size_t task), void *arg, size_t ntasks);
int emu_nthreads(const struct emu *e); // threads that run a job, the caller included
// the pool's workers poll without yielding while on: a call's kernels
// follow each other (ad_pool_hot)
void emu_hot(struct emu *e, int on);
// ranges of one-column convs taken over by another thread so far (a
// thread done with its own takes the back half of what another has left)
uint64_t emu_steals(const struct emu *e);

// the emu's sigmoid, y = 1 / (1 + exp(-a)) (emu-act.c: its own exp, the
// same bits on every path), and the fused FFN gate h = r(r(sigmoid(g)) * g)
// * u, rounding each op's result to fp16 (r) as op by op; level as for
// emu_conv_simd
void emu_sigmoid(int level, const float *a, float *y, size_t n);
void emu_gate(int level, const float *g, const float *u, float *h, size_t n);

// int8 panels, four interleaved: weight (o, i) of a [cout][cin] int8
// matrix at quad o/64, offset (i * 64 + o % 64): a quad's step is one line,
// rows past cout zero (emu_i8_panel_bytes rounds cout up to 64); scale
// has one fp16 value per panel row (npanels * 16, zero past cout), as the
// program gives it, widened as the kernels read it. Same x / y /
// p0, p1 (16-row panels) as above.
size_t emu_i8_panel_bytes(size_t cout, size_t cin);
// panel p's step i: its 16 weights
static inline const int8_t *
emu_i8_step(const void *panels, size_t cin, size_t p, size_t i)
{
	return (const int8_t *)panels + (p / 4) * cin * 64 + i * 64 + (p % 4) * 16;
}
void emu_i8_pack(const int8_t *q, size_t cout, size_t cin, int8_t *panels);
// emu_i8_pack's quads [g0, g1) only (64 rows each), in blocks of steps
// that stay in L1 (a compile's repacking); emu_i8_pack is its plain twin
#define EMU_I8_QUAD_ROWS 64
void emu_i8_pack_quads(const int8_t *q, size_t cout, size_t cin, int8_t *panels, size_t g0, size_t g1);
void emu_conv_i8_ref(const int8_t *panels, const uint16_t *scale, size_t cout, size_t cin, const float *x, size_t ncols,
                     float *y, size_t p0, size_t p1);
// the SIMD kernels; call only when emu_i8_isa() is at least 1 / 2
void emu_conv_i8_avx2(const int8_t *panels, const uint16_t *scale, size_t cout, size_t cin, const float *x,
                      size_t ncols, float *y, size_t p0, size_t p1);
void emu_conv_i8_avx512(const int8_t *panels, const uint16_t *scale, size_t cout, size_t cin, const float *x,
                        size_t ncols, float *y, size_t p0, size_t p1);
// emu_conv_i8_avx2 from EMU_I8_WIDE_COLS columns on: two panels at a
// time widened to fp16 (exact) in scratch (32 * cin values; NULL: its
// own, 0 or -1 when out of memory), then the fp16 panels' AVX2 tiles
// with the rows' scales (emu.c): the same bits. The widening pays from
// about 16 columns on (Qwen2.5's 9728x896 on one thread: 8 columns 53
// against the int8 tile's 67 GFLOP/s, 16 even, 32 77 against 68).
// emu_i8_panel_fp16: panel p's steps as fp16, dst[i * ld + r]. Both
// AVX2 + F16C only.
#define EMU_I8_WIDE_COLS 16
int emu_conv_i8_wide(const int8_t *panels, const uint16_t *scale, size_t cout, size_t cin, const float *x, size_t ncols,
                     float *y, size_t p0, size_t p1, uint16_t *scratch);
void emu_i8_panel_fp16(const int8_t *panels, size_t cin, size_t p, uint16_t *dst, size_t ld);
// AVX-512 (call only when emu_i8_isa() is 2), from EMU_I8_X512_COLS
// columns on: tiles of two panels by up to 12 columns over x packed per
// column block (the fp16 panels' AVX-512 layout), where the int8 tiles
// above take four panels by up to 6 columns of x as it is. emu_x512_pack
// writes the packed x (ncols * cin floats): emu_x512_blocks(ncols) blocks
// of at most EMU_X512_COLS columns, as even as possible (block b has
// base + (b < extra) columns: emu_x512_split), each [cin][its columns].
// emu_conv_i8_x512 computes column blocks [b0, b1) of panels [p0, p1), y
// as above, the same bits: from five blocks on (emu.c's wide tiles) the
// first block widens each pair of panels to fp32 into scratch (2 * 16 *
// min(cin, 1024) floats; NULL: its own, -1 when out of memory) and the
// others read it there; with fewer, emu_conv_i8_x512_narrow, whose tiles
// widen every step for each block.
#define EMU_I8_X512_COLS 8
#define EMU_X512_COLS 12
size_t emu_x512_blocks(size_t ncols);
void emu_x512_split(size_t ncols, size_t *nb, size_t *base, size_t *extra);
void emu_x512_pack(const float *x, size_t cin, size_t ncols, float *xp);
int emu_conv_i8_x512(const int8_t *panels, const uint16_t *scale, size_t cout, size_t cin, const float *xp,
                     size_t ncols, float *y, size_t p0, size_t p1, size_t b0, size_t b1, float *scratch);
void emu_conv_i8_x512_narrow(const int8_t *panels, const uint16_t *scale, size_t cout, size_t cin, const float *xp,
                             size_t ncols, float *y, size_t p0, size_t p1, size_t b0, size_t b1);
// the kernel of instruction set isa (as emu_i8_isa: at most this CPU's),
// one column on AVX2 rather than AVX-512 where emu_i8_one_col_avx2 says so
void emu_conv_i8_at(int isa, const int8_t *panels, const uint16_t *scale, size_t cout, size_t cin, const float *x,
                    size_t ncols, float *y, size_t p0, size_t p1);
// the best of the three this CPU runs: emu_conv_i8_at(emu_i8_isa(), ...)
void emu_conv_i8_fast(const int8_t *panels, const uint16_t *scale, size_t cout, size_t cin, const float *x,
                      size_t ncols, float *y, size_t p0, size_t p1);
// 0: plain C only, 1: AVX2 + FMA + F16C, 2: AVX-512 F as well
int emu_i8_isa(void);
// one column of int8 weights on the AVX2 kernel though the CPU has
// AVX-512: where it splits 512-bit operations in two (Zen 4), the AVX2
// tile's widening keeps up better (emu-i8.c). ANEDVD_I8_ONE_COL=avx2 or
// avx512 overrides the CPU's verdict (emu_open refuses another value).
// The same bits either way.
int emu_i8_one_col_avx2(void);
// ANEDVD_I8_ONE_COL as read: 1 avx2, 0 avx512, -1 unset or empty, -2 other
int emu_i8_one_col_env(void);

// 4-bit palettised weights (MIL constexpr_lut_to_dense, then a scale per
// row; emu-l4.c): weight (o, i) is scale[o] * lut[o / 64][q[o][i]], its
// index q in 0..15 half a byte. Quads of 64 rows follow one another, each
// ceil(cin / 2) lines of 64 bytes: line l holds steps 2l and 2l + 1 as 16
// little-endian u32 words, word d's nibble j (bits 4j .. 4j+3) the index
// of row 16 (j % 4) + d of the quad at step 2l + j / 4 (emu_l4_pack); rows
// past cout index 0. lut holds 16 fp16 values a quad; scale one fp16 a
// panel row (npanels * 16). Same x / y / p0, p1 (16-row panels) as
// above, and the same bits from all three kernels: output (o, j) is
// fp16(scale[o] * acc), acc the fp32 FMA chain of lut[o / 64][q[o][i]] *
// x[j][i] over i in order.
#define EMU_L4_QUAD_ROWS 64
size_t emu_l4_panel_bytes(size_t cout, size_t cin);
// q: [cout][cin] indices, one a byte (the low nibble is used)
void emu_l4_pack(const uint8_t *q, size_t cout, size_t cin, uint8_t *panels);
// the same layout's quads [g0, g1) from the indices as a uint4 BLOBFILE
// holds them: element (o, i) at o * cin + i, two a byte, the low nibble first
void emu_l4_pack_quads(const uint8_t *packed, size_t cout, size_t cin, uint8_t *panels, size_t g0, size_t g1);
void emu_conv_l4_ref(const uint8_t *panels, const uint16_t *lut, const uint16_t *scale, size_t cout, size_t cin,
                     const float *x, size_t ncols, float *y, size_t p0, size_t p1);
// the SIMD kernels; call only when emu_i8_isa() is at least 1 / 2
void emu_conv_l4_avx2(const uint8_t *panels, const uint16_t *lut, const uint16_t *scale, size_t cout, size_t cin,
                      const float *x, size_t ncols, float *y, size_t p0, size_t p1);
void emu_conv_l4_avx512(const uint8_t *panels, const uint16_t *lut, const uint16_t *scale, size_t cout, size_t cin,
                        const float *x, size_t ncols, float *y, size_t p0, size_t p1);
// the kernel of instruction set isa (as emu_i8_isa: at most this CPU's)
void emu_conv_l4_at(int isa, const uint8_t *panels, const uint16_t *lut, const uint16_t *scale, size_t cout, size_t cin,
                    const float *x, size_t ncols, float *y, size_t p0, size_t p1);
// AVX-512 (call only when emu_i8_isa() is 2), a wide call over x packed
// (emu_x512_pack) of EMU_L4_X512_COLS columns or more (emu_x512_blocks
// at least 5): each pair of panels widened to fp32 into scratch (as
// emu_conv_i8_x512's; NULL: its own) by the first column block, for the
// others to read, in emu.c's wide tiles; the same bits. -1 with fewer
// columns (the tiles above take them) or out of memory.
#define EMU_L4_X512_COLS 49
int emu_conv_l4_x512(const uint8_t *panels, const uint16_t *lut, const uint16_t *scale, size_t cout, size_t cin,
                     const float *xp, size_t ncols, float *y, size_t p0, size_t p1, float *scratch);
// the best of the three this CPU runs
void emu_conv_l4_fast(const uint8_t *panels, const uint16_t *lut, const uint16_t *scale, size_t cout, size_t cin,
                      const float *x, size_t ncols, float *y, size_t p0, size_t p1);

#endif
