// attention.h - one query column against a sequence's fp16 KV cache.
//
// The cache of a layer is [row][k_stride] fp16 keys and [row][v_stride] fp16
// values, a row per position; KV head g's key is at k + row * k_stride +
// g * head_dim. Query head h reads KV head h / (n_head / n_head_kv) (GQA,
// MQA). attn computes, for every query head, softmax over rows
// [first, last] of s_j = scale * (q_h · k_j) (soft-capped to
// cap * tanh(s / cap) when softcap > 0), and writes sum_j p_j v_j to
// out[h * head_dim_v ..]. The caller picks the rows: causal masking and
// sliding windows are just the range.
//
// attn_ref is written to be read and follows the reference engine's order
// of operations exactly (8-lane dot products folded as ref.c folds them,
// libm expf, the softmax sum in double, P·V in 8 position lanes), so the
// only difference from the fp32 engine is the fp16 storage of the cache.
// attn_fast uses AVX2/FMA/F16C when the running CPU has them (no -march
// flag needed) and falls back to attn_ref otherwise: its q·k scores are
// the same bits as attn_ref's, its exp is a polynomial (about 2 ulp) and
// its sums are fp32, so outputs agree to a few 1e-7 relative.
//
// scratch holds attn_scratch_floats(shape, rows) floats; no allocation.
#ifndef AD_ATTENTION_H
#define AD_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

struct attn_shape {
	int n_head, n_head_kv;
	int head_dim, head_dim_v;
	size_t k_stride, v_stride; // fp16 elements between cache rows
	float scale;               // multiplies q·k
	float softcap;             // 0: none
};

size_t attn_scratch_floats(const struct attn_shape *sh, int rows);

void attn_ref(const struct attn_shape *sh, const float *q, const uint16_t *k, const uint16_t *v, int first, int last,
              float *out, float *scratch);
void attn_fast(const struct attn_shape *sh, const float *q, const uint16_t *k, const uint16_t *v, int first, int last,
               float *out, float *scratch);
int attn_have_simd(void);

// attn_ref over an fp32 cache: exactly ref.c's attention (for checking
// that the fp16 cache is the pipeline's only difference from ref.c)
void attn_ref_f32(const struct attn_shape *sh, const float *q, const float *k, const float *v, int first, int last,
                  float *out, float *scratch);

// the same over a cache in two stretches (a sequence forked from another
// reads the rows it shares from its parent's cache): rows below split at
// k0 / v0, the others at k / v, both indexed by the row number as above.
// Each row is read from where it lives and used exactly as above, so the
// bits equal those of one cache holding every row.
void attn_ref_split(const struct attn_shape *sh, const float *q, const uint16_t *k0, const uint16_t *v0,
                    const uint16_t *k, const uint16_t *v, int split, int first, int last, float *out, float *scratch);
void attn_fast_split(const struct attn_shape *sh, const float *q, const uint16_t *k0, const uint16_t *v0,
                     const uint16_t *k, const uint16_t *v, int split, int first, int last, float *out, float *scratch);
void attn_ref_f32_split(const struct attn_shape *sh, const float *q, const float *k0, const float *v0, const float *k,
                        const float *v, int split, int first, int last, float *out, float *scratch);

// Several query columns of one sequence at once (a prefill chunk, a verify
// step's drafts): column c's query heads at q + c * q_stride, its output at
// out + c * out_stride, over rows [first, last[c]]. Each column's result has
// the bits attn_fast_split (attn_ref_split) gives it alone; the fast path
// converts a block of keys and values once for every column and KV head.
// scratch holds attn_cols_scratch_floats(shape, rows, cols) floats, rows at
// least the longest column's.
#define ATTN_COLS_MAX 16 // the most columns the engine gives one call
// where the CPU has AVX-512: up to this many columns (a verify step's) one at
// a time, more (a prefill chunk's) together (attention.c)
#define ATTN_WIDE_COLS 8
size_t attn_cols_scratch_floats(const struct attn_shape *sh, int rows, int cols);
void attn_fast_cols(const struct attn_shape *sh, const float *q, size_t q_stride, const uint16_t *k0,
                    const uint16_t *v0, const uint16_t *k, const uint16_t *v, int split, int first, const int *last,
                    int cols, float *out, size_t out_stride, float *scratch);
void attn_ref_cols(const struct attn_shape *sh, const float *q, size_t q_stride, const uint16_t *k0, const uint16_t *v0,
                   const uint16_t *k, const uint16_t *v, int split, int first, const int *last, int cols, float *out,
                   size_t out_stride, float *scratch);

// The scaled scores scale * (q_h · k_j), before the soft-cap, of every query
// head over rows [first, last] into scores[h * rows + j - first], as attn_ref
// (fast = 0) and attn_fast (fast = 1) compute them: the same bits. For the
// tests, which compare the two; attn_path picks attn_fast's way to them
// (0: by size: heads of up to 16 dimensions transposed, larger ones of a
// multiple of 8 a head by eight rows; 1: four heads by two rows, the way
// of the other sizes) so that both ways are compared.
void attn_scores(const struct attn_shape *sh, const float *q, const uint16_t *k, int first, int last, int fast,
                 float *scores);
extern int attn_path;
// attn_isa: 0 (the default) lets attn_fast use AVX-512 where the CPU has it
// (heads of 8 or 16 dimensions), 1 keeps it to AVX2: for the tests and
// benchmarks, which compare the two. ANEDVD_SIMD=avx2 (or ref: plain C
// only) caps both for a whole process, as it caps the emu's kernels
extern int attn_isa;
int attn_have_avx512(void);
// the way attn_fast_cols takes cols columns of shape sh here, in words
const char *attn_fast_path(const struct attn_shape *sh, int cols);

// One column's attention in parts (a long context's rows shared out over
// threads, each part a range of rows): attn_part is attn_fast_split over
// rows [first, last] alone, its output normalised over them, and lse[h]
// the log of the sum of e^(score) over them for every query head;
// attn_merge weighs the parts' outputs (po: part i's at po + i * n_head *
// head_dim_v, its lse at lse + i * n_head) into the whole range's. The
// result differs from attn_fast_split's over the whole range in the last
// bits. attn_part_ok: whether this CPU's way for sh has the parts (not
// the small heads' ways, nor plain C); attn_part must not be called
// otherwise. At most ATTN_PARTS_MAX parts.
#define ATTN_PARTS_MAX 16
int attn_part_ok(const struct attn_shape *sh);
void attn_part(const struct attn_shape *sh, const float *q, const uint16_t *k0, const uint16_t *v0, const uint16_t *k,
               const uint16_t *v, int split, int first, int last, float *out, float *lse, float *scratch);
void attn_merge(const struct attn_shape *sh, const float *po, const float *lse, int parts, float *out);

#endif
