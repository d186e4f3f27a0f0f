// attention.c - softmax attention over an fp16 KV cache, plain and AVX2.
#include "attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fp16.h"
#include "numeric.h"

// the value rows the AVX2 path converts to fp32 at a time for P·V (their
// fp32 copy stays in L1 while every column's heads of a KV head go over it)
#define ATTN_PV_ROWS 32

size_t
attn_scratch_floats(const struct attn_shape *sh, int rows)
{
	size_t hd = (size_t)sh->head_dim, hdv = (size_t)sh->head_dim_v, r = (size_t)(rows > 0 ? rows : 1);
	// the sixteen-row path: scores in rows of whole blocks, and the keys
	// and values of one KV head transposed
	const size_t r16 = (r + 15) & ~(size_t)15, small = hd <= 16 && hdv <= 16 ? (hd + hdv) * r16 : 0;
	return (size_t)sh->n_head * r16 + ATTN_PV_ROWS * hdv + hd + hdv + 16 + small;
}

// --- the reference ----------------------------------------------------------------

// rows of fp16 (f32 = 0) or fp32 (f32 = 1) to fp32
static inline void
row(const void *base, size_t off, int f32, float *dst, int n)
{
	if (f32)
		memcpy(dst, (const float *)base + off, (size_t)n * sizeof(float));
	else
		ad_fp16_to_f32_row_ref((const uint16_t *)base + off, dst, (size_t)n);
}

// rows below split at (k0, v0), the others at (k, v)
static void
attn_plain(const struct attn_shape *sh, const float *q, const void *k0, const void *v0, const void *k, const void *v,
           int split, int f32, int first, int last, float *out, float *scratch)
{
	const int hd = sh->head_dim, hdv = sh->head_dim_v, group = sh->n_head / sh->n_head_kv;
	const int rows = last - first + 1;
	float *scores = scratch, *part = scores + rows, *kf = part + 8 * hdv, *vf = kf + hd;
	const float cap = sh->softcap;
	for (int h = 0; h < sh->n_head; h++) {
		const float *qh = q + (size_t)h * hd;
		const int g = h / group;
		float mx = -INFINITY;
		for (int j = first; j <= last; j++) {
			row(j < split ? k0 : k, (size_t)j * sh->k_stride + (size_t)g * hd, f32, kf, hd);
			float s = ad_dot(qh, kf, hd) * sh->scale;
			if (cap > 0)
				s = tanhf(s * (1.0f / cap)) * cap;
			scores[j - first] = s;
			if (s > mx)
				mx = s;
		}
		double sum = 0;
		for (int r = 0; r < rows; r++) {
			scores[r] = expf(scores[r] - mx);
			sum += scores[r];
		}
		float inv = (float)(1.0 / sum);
		for (int r = 0; r < rows; r++)
			scores[r] *= inv;
		// position j accumulates in lane j mod 8, as ref.c does
		memset(part, 0, 8 * (size_t)hdv * sizeof(float));
		for (int j = first; j <= last; j++) {
			row(j < split ? v0 : v, (size_t)j * sh->v_stride + (size_t)g * hdv, f32, vf, hdv);
			float *pl = part + (size_t)(j & 7) * hdv, pj = scores[j - first];
			for (int d = 0; d < hdv; d++)
				pl[d] = fmaf(pj, vf[d], pl[d]);
		}
		float *o = out + (size_t)h * hdv;
		for (int d = 0; d < hdv; d++) {
			ad_v8f acc;
			for (int l = 0; l < 8; l++)
				acc[l] = part[(size_t)l * hdv + d];
			o[d] = ad_fold8(acc);
		}
	}
}

void
attn_ref(const struct attn_shape *sh, const float *q, const uint16_t *k, const uint16_t *v, int first, int last,
         float *out, float *scratch)
{
	attn_plain(sh, q, k, v, k, v, 0, 0, first, last, out, scratch);
}

void
attn_ref_split(const struct attn_shape *sh, const float *q, const uint16_t *k0, const uint16_t *v0, const uint16_t *k,
               const uint16_t *v, int split, int first, int last, float *out, float *scratch)
{
	attn_plain(sh, q, k0, v0, k, v, split, 0, first, last, out, scratch);
}

void
attn_ref_f32(const struct attn_shape *sh, const float *q, const float *k, const float *v, int first, int last,
             float *out, float *scratch)
{
	attn_plain(sh, q, k, v, k, v, 0, 1, first, last, out, scratch);
}

void
attn_ref_f32_split(const struct attn_shape *sh, const float *q, const float *k0, const float *v0, const float *k,
                   const float *v, int split, int first, int last, float *out, float *scratch)
{
	attn_plain(sh, q, k0, v0, k, v, split, 1, first, last, out, scratch);
}

int attn_path;

// the last row any of nc columns reads (at least first)
static inline int
last_row(int first, const int *last, int nc)
{
	int lmax = first;
	for (int c = 0; c < nc; c++)
		lmax = last[c] > lmax ? last[c] : lmax;
	return lmax;
}

// One prefetch per 4 KiB page of rows first..last of a cache (two
// stretches: below split from c0), before any row is read. A decode step
// reads its layer's keys and values cold (the weights stream through the
// caches between two layers), and on 4 KiB pages each page's walk waited
// on memory as its rows came up, one after another; these start them
// together. The SmolLM2-135M shape (9/3 heads of 64; a 64-token prompt, 64
// tokens; 18 pages a layer): the decode's attention 0.41 -> 0.32 ms a
// token, as much as with the cache on 2 MiB pages (which would hold all of
// its rows from the first token on). An asm prefetch on x86: gcc 12 takes
// a function of __builtin_prefetch alone for one without effects, and
// drops the calls.
//
// The rows read ahead of their use go towards L2 only (prefetcht2, l1 0):
// read ahead into L1, the rows the loads waited on sat behind them in the
// line-fill buffers, and 1024 rows from memory took 90 us instead of 55-60
// (bench-attention, 9/3 heads of 64, one column).
static inline void
prefetch_line(const char *p, const int l1)
{
#if defined(__x86_64__) || defined(__i386__)
	if (l1)
		__asm__ volatile("prefetcht0 %0" : : "m"(*p));
	else
		__asm__ volatile("prefetcht2 %0" : : "m"(*p));
#else
	__builtin_prefetch(p, 0, l1 ? 3 : 1);
#endif
}

// every line of bytes at p, towards L2
static void
prefetch_lines(const char *p, size_t bytes)
{
	const uintptr_t end = (uintptr_t)p + bytes;
	for (uintptr_t a = (uintptr_t)p & ~(uintptr_t)63; a < end; a += 64)
		prefetch_line((const char *)a, 0);
}

static void
prefetch_span(const void *p, size_t bytes)
{
	const char *a = p;
	for (size_t o = 0; o < bytes; o += 4096)
		prefetch_line(a + o, 1);
	if (bytes)
		prefetch_line(a + bytes - 1, 1);
}

static void
prefetch_pages(const uint16_t *c0, const uint16_t *c, size_t stride, int split, int first, int last)
{
	const int mid = split < first ? first : split > last + 1 ? last + 1 : split; // rows below mid from c0
	if (mid > first)
		prefetch_span(c0 + (size_t)first * stride, (size_t)(mid - first) * stride * sizeof *c);
	if (last >= mid)
		prefetch_span(c + (size_t)mid * stride, (size_t)(last + 1 - mid) * stride * sizeof *c);
}

// --- AVX2 / FMA / F16C ------------------------------------------------------------

#ifdef AD_FP16_X86
#define SIMD __attribute__((target("avx2,fma,f16c")))

// the best level the CPU has, capped by ANEDVD_SIMD as the emu's kernels
// are, so that every path runs on one machine (read once)
static int
attn_level(void)
{
	static int level = -1;
	int l = __atomic_load_n(&level, __ATOMIC_RELAXED);
	if (l < 0) {
		l = ad_simd_level();
		__atomic_store_n(&level, l, __ATOMIC_RELAXED);
	}
	return l;
}

int
attn_have_simd(void)
{
	return attn_level() >= AD_SIMD_AVX2;
}

SIMD static inline __m256
load_h8(const uint16_t *p)
{
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

// the fold of ad_fold8 (numeric.h), on a register
SIMD static inline float
fold_v(__m256 a)
{
	__m128 s = _mm_add_ps(_mm256_extractf128_ps(a, 1), _mm256_castps256_ps128(a)); // s0..s3
	__m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));                                 // s0+s2, s1+s3
	return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

SIMD static inline float
hsum_v(__m256 a)
{
	return fold_v(a);
}

// e^x for x <= 0 (larger x works up to 88): x = n ln2 + r, |r| <= ln2/2,
// e^r by its degree-7 Taylor polynomial, 2^n through the exponent field.
// Below -87 the result is about 1e-38 instead of a denormal or zero; NaN
// stays NaN.
SIMD static inline __m256
exp_v(__m256 x)
{
	x = _mm256_max_ps(_mm256_set1_ps(-87.0f), x);
	__m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
	                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
	r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
	__m256 p = _mm256_set1_ps(1.0f / 5040);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
	__m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
	return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// q·k for heads h..h+3 (pointers q0..q3) and rows j, j2 of the keys, in
// the lanes and fold of ad_dot: 8 independent accumulators keep the FMA
// units busy
SIMD static inline void
scores_4x2(const float *q0, const float *q1, const float *q2, const float *q3, const uint16_t *k0, const uint16_t *k1,
           int hd8, float *s)
{
	__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
	for (int i = 0; i < hd8; i += 8) {
		__m256 x = load_h8(k0 + i), y = load_h8(k1 + i);
		__m256 w0 = _mm256_loadu_ps(q0 + i), w1 = _mm256_loadu_ps(q1 + i);
		__m256 w2 = _mm256_loadu_ps(q2 + i), w3 = _mm256_loadu_ps(q3 + i);
		a0 = _mm256_fmadd_ps(w0, x, a0);
		a1 = _mm256_fmadd_ps(w1, x, a1);
		a2 = _mm256_fmadd_ps(w2, x, a2);
		a3 = _mm256_fmadd_ps(w3, x, a3);
		b0 = _mm256_fmadd_ps(w0, y, b0);
		b1 = _mm256_fmadd_ps(w1, y, b1);
		b2 = _mm256_fmadd_ps(w2, y, b2);
		b3 = _mm256_fmadd_ps(w3, y, b3);
	}
	s[0] = fold_v(a0), s[1] = fold_v(a1), s[2] = fold_v(a2), s[3] = fold_v(a3);
	s[4] = fold_v(b0), s[5] = fold_v(b1), s[6] = fold_v(b2), s[7] = fold_v(b3);
}

// rows j..j+7's keys (kj[r], hd a multiple of 8) transposed to fp32:
// kt[i * 8 + r] is dimension i of row r
SIMD static inline void
keys_t8(const uint16_t *const kj[8], int hd, float *kt)
{
	for (int c = 0; c < hd; c += 8) {
		__m128i a0 = _mm_loadu_si128((const __m128i *)(kj[0] + c)),
			a1 = _mm_loadu_si128((const __m128i *)(kj[1] + c));
		__m128i a2 = _mm_loadu_si128((const __m128i *)(kj[2] + c)),
			a3 = _mm_loadu_si128((const __m128i *)(kj[3] + c));
		__m128i a4 = _mm_loadu_si128((const __m128i *)(kj[4] + c)),
			a5 = _mm_loadu_si128((const __m128i *)(kj[5] + c));
		__m128i a6 = _mm_loadu_si128((const __m128i *)(kj[6] + c)),
			a7 = _mm_loadu_si128((const __m128i *)(kj[7] + c));
		// pairs of rows, then quads: b0 = r0[0] r1[0] r0[1] r1[1] ..., c0 = r0..3 [0], r0..3 [1]
		__m128i b0 = _mm_unpacklo_epi16(a0, a1), b1 = _mm_unpackhi_epi16(a0, a1);
		__m128i b2 = _mm_unpacklo_epi16(a2, a3), b3 = _mm_unpackhi_epi16(a2, a3);
		__m128i b4 = _mm_unpacklo_epi16(a4, a5), b5 = _mm_unpackhi_epi16(a4, a5);
		__m128i b6 = _mm_unpacklo_epi16(a6, a7), b7 = _mm_unpackhi_epi16(a6, a7);
		__m128i c0 = _mm_unpacklo_epi32(b0, b2), c1 = _mm_unpackhi_epi32(b0, b2);
		__m128i c2 = _mm_unpacklo_epi32(b4, b6), c3 = _mm_unpackhi_epi32(b4, b6);
		__m128i c4 = _mm_unpacklo_epi32(b1, b3), c5 = _mm_unpackhi_epi32(b1, b3);
		__m128i c6 = _mm_unpacklo_epi32(b5, b7), c7 = _mm_unpackhi_epi32(b5, b7);
		float *o = kt + (size_t)c * 8;
		_mm256_storeu_ps(o + 0, _mm256_cvtph_ps(_mm_unpacklo_epi64(c0, c2)));
		_mm256_storeu_ps(o + 8, _mm256_cvtph_ps(_mm_unpackhi_epi64(c0, c2)));
		_mm256_storeu_ps(o + 16, _mm256_cvtph_ps(_mm_unpacklo_epi64(c1, c3)));
		_mm256_storeu_ps(o + 24, _mm256_cvtph_ps(_mm_unpackhi_epi64(c1, c3)));
		_mm256_storeu_ps(o + 32, _mm256_cvtph_ps(_mm_unpacklo_epi64(c4, c6)));
		_mm256_storeu_ps(o + 40, _mm256_cvtph_ps(_mm_unpackhi_epi64(c4, c6)));
		_mm256_storeu_ps(o + 48, _mm256_cvtph_ps(_mm_unpacklo_epi64(c5, c7)));
		_mm256_storeu_ps(o + 56, _mm256_cvtph_ps(_mm_unpackhi_epi64(c5, c7)));
	}
}

// q·k of one query head (qh) and eight keys transposed by keys_t8 (kt),
// scaled: lane r is row r's score, in the lanes and fold of ad_dot (the
// rows are in the lanes, so lane l of ad_dot is one register and the fold
// is seven adds for eight rows)
SIMD static inline __m256
dot_t8(const float *kt, const float *qh, int hd, __m256 scale)
{
	__m256 a[8];
	for (int l = 0; l < 8; l++)
		a[l] = _mm256_fmadd_ps(_mm256_set1_ps(qh[l]), _mm256_loadu_ps(kt + l * 8), _mm256_setzero_ps());
	for (int i = 8; i < hd; i += 8)
		for (int l = 0; l < 8; l++)
			a[l] = _mm256_fmadd_ps(_mm256_set1_ps(qh[i + l]), _mm256_loadu_ps(kt + (i + l) * 8), a[l]);
	// ad_fold8: (a4 + a0 + (a6 + a2)) + (a5 + a1 + (a7 + a3))
	__m256 x = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a[4], a[0]), _mm256_add_ps(a[6], a[2])),
	                         _mm256_add_ps(_mm256_add_ps(a[5], a[1]), _mm256_add_ps(a[7], a[3])));
	return _mm256_mul_ps(x, scale);
}

SIMD static inline void
store_n(float *dst, __m256 x, int n)
{
	if (n == 8) {
		_mm256_storeu_ps(dst, x);
	} else {
		float tmp[8];
		_mm256_storeu_ps(tmp, x);
		memcpy(dst, tmp, (size_t)n * sizeof(float));
	}
}

// n fp16 to fp32 (n a multiple of 8); the common head sizes as constants,
// so that the loop unrolls
SIMD static inline __attribute__((always_inline)) void
row_f32_n(const uint16_t *src, float *dst, int n)
{
	for (int i = 0; i < n; i += 8)
		_mm256_storeu_ps(dst + i, load_h8(src + i));
}

SIMD static inline __attribute__((always_inline)) void
row_f32(const uint16_t *src, float *dst, int n)
{
	if (n == 8)
		row_f32_n(src, dst, 8);
	else if (n == 64)
		row_f32_n(src, dst, 64);
	else if (n == 128)
		row_f32_n(src, dst, 128);
	else
		row_f32_n(src, dst, n);
}

// ad_fold8 of eight registers at once: lane r of the result is fold_v(a[r]),
// the same adds in the same order, taken across registers (21 ops for eight
// folds instead of 48). Halves first: rows r and r + 4 share a register
SIMD static inline __m256
fold8_t(const __m256 a[8])
{
	__m256 s[4];
	for (int r = 0; r < 4; r++)
		s[r] = _mm256_add_ps(_mm256_permute2f128_ps(a[r], a[r + 4], 0x31),
		                     _mm256_permute2f128_ps(a[r], a[r + 4], 0x20));
	// s[r] = [row r: l + l+4 for l < 4 | row r + 4: the same]; then lanes
	// (0 + 2, 1 + 3) of rows r, r + 1, then their sum
	__m256 t0 = _mm256_add_ps(_mm256_shuffle_ps(s[0], s[1], _MM_SHUFFLE(1, 0, 1, 0)),
	                          _mm256_shuffle_ps(s[0], s[1], _MM_SHUFFLE(3, 2, 3, 2)));
	__m256 t1 = _mm256_add_ps(_mm256_shuffle_ps(s[2], s[3], _MM_SHUFFLE(1, 0, 1, 0)),
	                          _mm256_shuffle_ps(s[2], s[3], _MM_SHUFFLE(3, 2, 3, 2)));
	return _mm256_add_ps(_mm256_shuffle_ps(t0, t1, _MM_SHUFFLE(2, 0, 2, 0)),
	                     _mm256_shuffle_ps(t0, t1, _MM_SHUFFLE(3, 1, 3, 1)));
}

// q·k of one query head (qh) and eight rows of keys in fp32 (row r at
// kf + r * hd, hd a multiple of 8): lane r is row r's ad_dot
SIMD static inline __attribute__((always_inline)) __m256
dot_rows8(const float *kf, const float *qh, int hd)
{
	__m256 a[8];
	for (int r = 0; r < 8; r++)
		a[r] = _mm256_setzero_ps();
	for (int i = 0; i < hd; i += 8) {
		const __m256 x = _mm256_loadu_ps(qh + i);
		for (int r = 0; r < 8; r++)
			a[r] = _mm256_fmadd_ps(x, _mm256_loadu_ps(kf + (size_t)r * hd + i), a[r]);
	}
	return fold8_t(a);
}

// the heads of up to 16 dimensions take eight rows at a time through
// keys_t8 and dot_t8 (those whose value heads are 8 or 16 wide go through
// attn8_cols instead); larger heads through dot_rows8 (all_scores)
static inline int
small_heads(const struct attn_shape *sh)
{
	return (sh->head_dim & 7) == 0 && sh->head_dim <= 16 && attn_path != 1;
}

// the scaled q·k scores of one KV head's group of query heads (qg) over
// rows first..last (below split from kg0, the others from kg):
// scores[t * ld + j - first], the same bits as attn_ref's (same lanes,
// same fold). Four heads by two rows at a time, the spare ones computed
// on a copy of the last and dropped
SIMD static void
group_scores_4x2(const struct attn_shape *sh, const float *qg, const uint16_t *kg0, const uint16_t *kg, int split,
                 int first, int last, float *scores, size_t ld)
{
	const int hd = sh->head_dim, group = sh->n_head / sh->n_head_kv, hd8 = hd & ~7;
	for (int h0 = 0; h0 < group; h0 += 4) {
		const int nh = group - h0 < 4 ? group - h0 : 4;
		const float *qp[4];
		for (int t = 0; t < 4; t++)
			qp[t] = qg + (size_t)(h0 + (t < nh ? t : nh - 1)) * hd;
		for (int j = first; j <= last; j += 2) {
			const int j2 = j + 1 <= last ? j + 1 : j, nj = j2 > j ? 2 : 1;
			const uint16_t *kj[2] = {(j < split ? kg0 : kg) + (size_t)j * sh->k_stride,
			                         (j2 < split ? kg0 : kg) + (size_t)j2 * sh->k_stride};
			float s[8];
			scores_4x2(qp[0], qp[1], qp[2], qp[3], kj[0], kj[1], hd8, s);
			for (int r = 0; r < nj; r++)
				for (int t = 0; t < nh; t++) {
					float x = s[4 * r + t];
					for (int i = hd8; i < hd; i++)
						x = fmaf(qp[t][i], ad_fp16_to_f32(kj[r][i]), x);
					scores[(size_t)(h0 + t) * ld + (j + r - first)] = x * sh->scale;
				}
		}
	}
}

// pointers to rows j..j+7 (past last: last again) of a cache in two
// stretches
static inline void
rows8(const uint16_t *c0, const uint16_t *c, size_t stride, int split, int j, int last, const uint16_t *p[8])
{
	const int nr = last - j + 1 < 8 ? last - j + 1 : 8;
	for (int r = 0; r < 8; r++) {
		const int jr = j + (r < nr ? r : nr - 1);
		p[r] = (jr < split ? c0 : c) + (size_t)jr * stride;
	}
}

// Rows of the cache are read ahead of their use, ATTN_AHEAD bytes on, into
// L2: a long context's cache outgrows L2 and, over a model's layers, L3,
// and its rows (a few hundred bytes, on 4 KiB pages the hardware
// prefetcher does not cross) then waited on memory one page at a time
// (bench-attention's "cold" column measures it)
#define ATTN_AHEAD 65536
// the narrowest row pitch read ahead: a cache of narrower rows is one
// stream the hardware follows. The pitch, not the bytes a call reads of a
// row: the engine's threads take a KV head each, 128 of SmolLM2's 384
// bytes a row, and those strided reads waited on memory too
#define ATTN_AHEAD_MIN 256
// and, until the first rows read ahead come up, ATTN_NEAR rows on: a
// short context has no far rows (9/3 heads of 64, 300 rows from memory:
// 39 us a layer with the far rows alone, 32 with these too)
#define ATTN_NEAR 16

static inline int
ahead_rows(size_t row_bytes)
{
	size_t n = ATTN_AHEAD / (row_bytes ? row_bytes : 1);
	return n < 8 ? 8 : n > 4096 ? 4096 : (int)n;
}

// rows j .. j + n - 1 (up to last) of a cache in two stretches, bytes of
// each from its start, towards L2
static inline void
prefetch_rows(const uint16_t *c0, const uint16_t *c, size_t stride, int split, int j, int n, int last, size_t bytes)
{
	for (int r = j; r < j + n && r <= last; r++) {
		const char *p = (const char *)((r < split ? c0 : c) + (size_t)r * stride);
		for (size_t b = 0; b < bytes; b += 64)
			__builtin_prefetch(p + b, 0, 2);
	}
}

#define BIG_HD_MAX 256 // the largest head that all_scores converts eight rows of at once

// all_scores a block of eight rows at a time, the block's keys of one KV
// head prepared once for every column and query head: small heads (small,
// a constant where it is called, so that each way compiles alone)
// transposed by keys_t8, larger ones converted to fp32 (row r at kb + r * hd)
SIMD static inline __attribute__((always_inline)) void
block_scores(const struct attn_shape *sh, const float *q, size_t qs, const uint16_t *k0, const uint16_t *k, int split,
             int first, const int *last, int nc, int lmax, float *scores, size_t ld, const int small)
{
	const int hd = sh->head_dim, nh = sh->n_head, group = nh / sh->n_head_kv;
	float kb[small ? 16 * 8 : 8 * BIG_HD_MAX] __attribute__((aligned(32)));
	const __m256 scale = _mm256_set1_ps(sh->scale);
	const size_t kbytes = (size_t)sh->n_head_kv * hd * sizeof(uint16_t), kpitch = sh->k_stride * sizeof(uint16_t);
	const int ka = ahead_rows(kpitch);
	for (int j = first; j <= lmax; j += 8) {
		const uint16_t *kr[8], *kj[8];
		rows8(k0, k, sh->k_stride, split, j, lmax, kr);
		if (!small && kpitch >= ATTN_AHEAD_MIN) {
			if (j - first < ka)
				prefetch_rows(k0, k, sh->k_stride, split, j + ATTN_NEAR, 8, lmax, kbytes);
			prefetch_rows(k0, k, sh->k_stride, split, j + ka, 8, lmax, kbytes);
		}
		for (int g = 0; g < sh->n_head_kv; g++) {
			for (int r = 0; r < 8; r++)
				kj[r] = kr[r] + (size_t)g * hd;
			if (small)
				keys_t8(kj, hd, kb);
			else
				for (int r = 0; r < 8; r++)
					row_f32(kj[r], kb + (size_t)r * hd, hd);
			for (int c = 0; c < nc; c++) {
				if (j > last[c])
					continue;
				const int nr = last[c] - j + 1 < 8 ? last[c] - j + 1 : 8;
				for (int t = 0; t < group; t++) {
					const int h = g * group + t;
					const float *qh = q + (size_t)c * qs + (size_t)h * hd;
					const __m256 d = small       ? dot_t8(kb, qh, hd, scale)
					                 : hd == 64  ? _mm256_mul_ps(dot_rows8(kb, qh, 64), scale)
					                 : hd == 128 ? _mm256_mul_ps(dot_rows8(kb, qh, 128), scale)
					                             : _mm256_mul_ps(dot_rows8(kb, qh, hd), scale);
					store_n(scores + ((size_t)c * nh + h) * ld + (j - first), d, nr);
				}
			}
		}
	}
}

// every column's scores: column c's head h over its rows [first, last[c]]
// at scores + (c * n_head + h) * ld. Heads go a block of eight rows at a
// time, every KV head and every column of the block before the next (a
// block's keys are transposed, or for larger heads converted, once, and
// the rows of all KV heads are read while they are in L1); a column's
// lanes past its last row are computed and dropped, so its scores are
// those it has alone. Heads of other sizes go four by two (scores_4x2)
SIMD static void
all_scores(const struct attn_shape *sh, const float *q, size_t qs, const uint16_t *k0, const uint16_t *k, int split,
           int first, const int *last, int nc, int lmax, float *scores, size_t ld)
{
	const int hd = sh->head_dim, nh = sh->n_head, group = nh / sh->n_head_kv;
	const int small = small_heads(sh);
	if (!small && ((hd & 7) || hd > BIG_HD_MAX || attn_path == 1)) {
		for (int c = 0; c < nc; c++)
			for (int g = 0; g < sh->n_head_kv; g++)
				group_scores_4x2(sh, q + (size_t)c * qs + (size_t)g * group * hd, k0 + (size_t)g * hd,
				                 k + (size_t)g * hd, split, first, last[c],
				                 scores + ((size_t)c * nh + (size_t)g * group) * ld, ld);
		return;
	}
	if (small)
		block_scores(sh, q, qs, k0, k, split, first, last, nc, lmax, scores, ld, 1);
	else
		block_scores(sh, q, qs, k0, k, split, first, last, nc, lmax, scores, ld, 0);
}

// sc[0..rows) = softmax of the (soft-capped) scores, in place; with lse,
// *lse = the log of the row's sum of e^(score) (the largest score plus the
// log of the sum it normalises by: attn_part's)
SIMD static void
softmax_row(float *sc, int rows, float cap, float *lse)
{
	if (cap > 0)
		for (int r = 0; r < rows; r++)
			sc[r] = tanhf(sc[r] * (1.0f / cap)) * cap;
	// the largest score, four registers at a time (max_ps(s, m) keeps m
	// when s is NaN, as the plain loop does; which zero wins a tie of +0
	// and -0 may differ, and e^(s - m) does not)
	__m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
	int r = 0;
	for (; r + 32 <= rows; r += 32) {
		m0 = _mm256_max_ps(_mm256_loadu_ps(sc + r), m0);
		m1 = _mm256_max_ps(_mm256_loadu_ps(sc + r + 8), m1);
		m2 = _mm256_max_ps(_mm256_loadu_ps(sc + r + 16), m2);
		m3 = _mm256_max_ps(_mm256_loadu_ps(sc + r + 24), m3);
	}
	for (; r + 8 <= rows; r += 8)
		m0 = _mm256_max_ps(_mm256_loadu_ps(sc + r), m0);
	float mv[8], mx = -INFINITY;
	_mm256_storeu_ps(mv, _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
	for (int l = 0; l < 8; l++)
		mx = mv[l] > mx ? mv[l] : mx;
	for (; r < rows; r++)
		mx = sc[r] > mx ? sc[r] : mx;
	__m256 vmx = _mm256_set1_ps(mx), vs = _mm256_setzero_ps();
	r = 0;
	for (; r + 8 <= rows; r += 8) {
		__m256 e = exp_v(_mm256_sub_ps(_mm256_loadu_ps(sc + r), vmx));
		_mm256_storeu_ps(sc + r, e);
		vs = _mm256_add_ps(vs, e);
	}
	float sum = hsum_v(vs);
	for (; r < rows; r++) {
		sc[r] = expf(sc[r] - mx);
		sum += sc[r];
	}
	if (lse)
		*lse = mx + logf(sum);
	const float inv = 1.0f / sum;
	const __m256 vinv = _mm256_set1_ps(inv);
	for (r = 0; r + 8 <= rows; r += 8)
		_mm256_storeu_ps(sc + r, _mm256_mul_ps(_mm256_loadu_ps(sc + r), vinv));
	for (; r < rows; r++)
		sc[r] *= inv;
}

// o[from..hdv) += sum over rows r < nr (at most 8) of p[r] * vf[r * hdv ..],
// eight dimensions at a time in four chains, so that a head of 8 does not
// wait on one FMA after another
SIMD static inline __attribute__((always_inline)) void
pv_block(float *o, const float *p, const float *vf, int nr, int hdv, int from)
{
	const int hdv8 = hdv & ~7;
	for (int d0 = from; d0 < hdv8; d0 += 8) {
		__m256 a0 = _mm256_loadu_ps(o + d0), a1 = _mm256_setzero_ps(), a2 = a1, a3 = a1;
		int r = 0;
		for (; r + 4 <= nr; r += 4) {
			const float *x = vf + (size_t)r * hdv + d0;
			a0 = _mm256_fmadd_ps(_mm256_set1_ps(p[r]), _mm256_loadu_ps(x), a0);
			a1 = _mm256_fmadd_ps(_mm256_set1_ps(p[r + 1]), _mm256_loadu_ps(x + hdv), a1);
			a2 = _mm256_fmadd_ps(_mm256_set1_ps(p[r + 2]), _mm256_loadu_ps(x + 2 * hdv), a2);
			a3 = _mm256_fmadd_ps(_mm256_set1_ps(p[r + 3]), _mm256_loadu_ps(x + 3 * hdv), a3);
		}
		for (; r < nr; r++)
			a0 = _mm256_fmadd_ps(_mm256_set1_ps(p[r]), _mm256_loadu_ps(vf + (size_t)r * hdv + d0), a0);
		_mm256_storeu_ps(o + d0, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
	}
	for (int d = from > hdv8 ? from : hdv8; d < hdv; d++)
		for (int r = 0; r < nr; r++)
			o[d] = fmaf(p[r], vf[(size_t)r * hdv + d], o[d]);
}

// o[0..hdv) += sum over rows r < nr of p[r] * vf[r * hdv ..]. Each of the
// first hdv / 64 * 64 dimensions is one chain of FMAs over the rows in
// order, its accumulator in a register (eight at a time) for all nr rows;
// the rest (tails past them) go a block of eight rows at a time through
// pv_block. Rows are blocked from the first, as a column alone takes them
SIMD static void
pv_rows(float *o, const float *p, const float *vf, int nr, int hdv)
{
	const int hdv64 = hdv & ~63;
	for (int d0 = 0; d0 < hdv64; d0 += 64) {
		__m256 o0 = _mm256_loadu_ps(o + d0), o1 = _mm256_loadu_ps(o + d0 + 8);
		__m256 o2 = _mm256_loadu_ps(o + d0 + 16), o3 = _mm256_loadu_ps(o + d0 + 24);
		__m256 o4 = _mm256_loadu_ps(o + d0 + 32), o5 = _mm256_loadu_ps(o + d0 + 40);
		__m256 o6 = _mm256_loadu_ps(o + d0 + 48), o7 = _mm256_loadu_ps(o + d0 + 56);
		for (int r = 0; r < nr; r++) {
			const float *x = vf + (size_t)r * hdv + d0;
			__m256 pr = _mm256_set1_ps(p[r]);
			o0 = _mm256_fmadd_ps(pr, _mm256_loadu_ps(x), o0);
			o1 = _mm256_fmadd_ps(pr, _mm256_loadu_ps(x + 8), o1);
			o2 = _mm256_fmadd_ps(pr, _mm256_loadu_ps(x + 16), o2);
			o3 = _mm256_fmadd_ps(pr, _mm256_loadu_ps(x + 24), o3);
			o4 = _mm256_fmadd_ps(pr, _mm256_loadu_ps(x + 32), o4);
			o5 = _mm256_fmadd_ps(pr, _mm256_loadu_ps(x + 40), o5);
			o6 = _mm256_fmadd_ps(pr, _mm256_loadu_ps(x + 48), o6);
			o7 = _mm256_fmadd_ps(pr, _mm256_loadu_ps(x + 56), o7);
		}
		_mm256_storeu_ps(o + d0, o0);
		_mm256_storeu_ps(o + d0 + 8, o1);
		_mm256_storeu_ps(o + d0 + 16, o2);
		_mm256_storeu_ps(o + d0 + 24, o3);
		_mm256_storeu_ps(o + d0 + 32, o4);
		_mm256_storeu_ps(o + d0 + 40, o5);
		_mm256_storeu_ps(o + d0 + 48, o6);
		_mm256_storeu_ps(o + d0 + 56, o7);
	}
	for (int b = hdv64 < hdv ? 0 : nr; b < nr; b += 8)
		pv_block(o, p + b, vf + (size_t)b * hdv, nr - b < 8 ? nr - b : 8, hdv, hdv64);
}

// the columns of attn_fast_cols: scores, softmax (column c's head h's lse
// into lse[c * n_head + h] when lse is not NULL), then P·V a chunk of
// ATTN_PV_ROWS value rows at a time, converted to fp32 once for every
// column and added into each of its heads (chunk by chunk from first, as a
// column alone takes them, so its bits do not depend on the others)
SIMD static void
attn_simd_cols(const struct attn_shape *sh, const float *q, size_t qs, const uint16_t *k0, const uint16_t *v0,
               const uint16_t *k, const uint16_t *v, int split, int first, const int *last, int nc, float *out,
               size_t os, float *lse, float *scratch)
{
	const int hdv = sh->head_dim_v, nh = sh->n_head, group = nh / sh->n_head_kv;
	const int lmax = last_row(first, last, nc);
	const size_t ld = (size_t)(lmax - first + 1);
	float *scores = scratch, *vf = scores + (size_t)nc * nh * ld;
	all_scores(sh, q, qs, k0, k, split, first, last, nc, lmax, scores, ld);
	for (int c = 0; c < nc; c++)
		for (int h = 0; h < nh; h++) {
			softmax_row(scores + ((size_t)c * nh + h) * ld, last[c] - first + 1, sh->softcap,
			            lse ? lse + (size_t)c * nh + h : NULL);
			memset(out + (size_t)c * os + (size_t)h * hdv, 0, (size_t)hdv * sizeof(float));
		}
	const int hdv8 = hdv & ~7;
	const size_t vbytes = (size_t)sh->n_head_kv * hdv * sizeof(uint16_t), vpitch = sh->v_stride * sizeof(uint16_t);
	const int va = ahead_rows(vpitch);
	// (heads under 64 go eight rows at a time: no accumulators to keep)
	const int chunk = hdv >= 64 ? ATTN_PV_ROWS : 8;
	for (int j0 = first; j0 <= lmax; j0 += chunk) {
		const int nm = lmax - j0 + 1 < chunk ? lmax - j0 + 1 : chunk;
		for (int g = 0; g < sh->n_head_kv; g++) {
			// the chunk va rows on, spread over this one's KV heads (rows
			// of a line or two are one stream the hardware follows)
			const int pn = (chunk + sh->n_head_kv - 1) / sh->n_head_kv, pj = j0 + va + g * pn;
			if (vpitch >= ATTN_AHEAD_MIN && j0 - first < va) // the next chunk
				prefetch_rows(v0, v, sh->v_stride, split, j0 + chunk + g * pn, pn,
				              j0 + 2 * chunk - 1 < lmax ? j0 + 2 * chunk - 1 : lmax, vbytes);
			if (vpitch >= ATTN_AHEAD_MIN)
				prefetch_rows(v0, v, sh->v_stride, split, pj, pn,
				              j0 + va + chunk - 1 < lmax ? j0 + va + chunk - 1 : lmax, vbytes);
			for (int r = 0; r < nm; r++) {
				const int j = j0 + r;
				const uint16_t *vj = (j < split ? v0 : v) + (size_t)j * sh->v_stride + (size_t)g * hdv;
				float *dst = vf + (size_t)r * hdv;
				row_f32(vj, dst, hdv8);
				for (int d = hdv8; d < hdv; d++)
					dst[d] = ad_fp16_to_f32(vj[d]);
			}
			for (int c = 0; c < nc; c++) {
				if (j0 > last[c])
					continue;
				const int nr = last[c] - j0 + 1 < nm ? last[c] - j0 + 1 : nm;
				for (int t = 0; t < group; t++) {
					const int h = g * group + t;
					if (hdv < 64) // eight rows at most: the chunk is eight
						pv_block(out + (size_t)c * os + (size_t)h * hdv,
						         scores + ((size_t)c * nh + h) * ld + (j0 - first), vf, nr, hdv,
						         0);
					else
						pv_rows(out + (size_t)c * os + (size_t)h * hdv,
						        scores + ((size_t)c * nh + h) * ld + (j0 - first), vf, nr, hdv);
				}
			}
		}
	}
}
// --- AVX2: heads of 8 or 16 dimensions, eight rows a register ---------------------
//
// The AVX-512 path's way (below) on eight lanes: one KV head's keys and
// values transposed once into fp32 planes of eight rows (keys_t8) for every
// query head and column that reads them, then each query head's scores,
// softmax and P·V with the rows in the lanes. A row of an 8-wide head was
// one register, so the blocked path above paid a broadcast, a chain of
// FMAs and a fold for every row and head; here eight rows take eight
// multiplies and seven adds for the scores (ad_dot's lanes and fold, so
// attn_ref's bits) and eight FMAs for P·V, in independent chains.

static int
small8(const struct attn_shape *sh)
{
	const int hd = sh->head_dim, hdv = sh->head_dim_v;
	return attn_path == 0 && (hd == 8 || hd == 16) && (hdv == 8 || hdv == 16);
}

// rows first..lmax of one KV head (goff into each row; below split from c0)
// transposed to planes: dst[(b * dims + d) * 8 + r] is dimension d of row
// first + 8 b + r; rows past lmax repeat lmax
SIMD static inline __attribute__((always_inline)) void
planes8_n(const uint16_t *c0, const uint16_t *c, size_t stride, int split, int first, int lmax, size_t goff,
          const int dims, float *dst)
{
	for (int j = first, b = 0; j <= lmax; j += 8, b++) {
		const uint16_t *rp[8];
		if (j + 7 <= lmax && (j + 7 < split || j >= split)) { // eight rows of one stretch
			const uint16_t *p = (j < split ? c0 : c) + (size_t)j * stride + goff;
			for (int r = 0; r < 8; r++)
				rp[r] = p + (size_t)r * stride;
		} else {
			rows8(c0, c, stride, split, j, lmax, rp);
			for (int r = 0; r < 8; r++)
				rp[r] += goff;
		}
		keys_t8(rp, dims, dst + (size_t)b * dims * 8);
	}
}

SIMD static void
planes8(const uint16_t *c0, const uint16_t *c, size_t stride, int split, int first, int lmax, size_t goff, int dims,
        float *dst)
{
	if (dims == 8)
		planes8_n(c0, c, stride, split, first, lmax, goff, 8, dst);
	else
		planes8_n(c0, c, stride, split, first, lmax, goff, 16, dst);
}

// max_ps(s, m) keeps m when s is NaN, as the plain loop does
SIMD static inline __m256
max8(__m256 m)
{
	m = _mm256_max_ps(m, _mm256_permute2f128_ps(m, m, 1));
	m = _mm256_max_ps(m, _mm256_permute_ps(m, _MM_SHUFFLE(1, 0, 3, 2)));
	return _mm256_max_ps(m, _mm256_permute_ps(m, _MM_SHUFFLE(2, 3, 0, 1)));
}

// scale * q·k of the rows of nb blocks of planes (kt), in ad_dot's lanes
// (lane l: dimensions l and l + 8) and fold, into dst; returns the largest
// in every lane (of the last block, the lanes in live only)
SIMD static inline __attribute__((always_inline)) __m256
scores8(const float *kt, const float *qh, int hd, __m256 scale, int nb, __m256 live, float *dst)
{
	__m256 q[16];
	for (int i = 0; i < hd; i++)
		q[i] = _mm256_set1_ps(qh[i]);
	__m256 m = _mm256_set1_ps(-INFINITY);
	for (int b = 0; b < nb; b++) {
		const float *k = kt + (size_t)b * hd * 8;
		__m256 a[8];
		for (int l = 0; l < 8; l++)
			a[l] = _mm256_mul_ps(q[l], _mm256_loadu_ps(k + l * 8));
		if (hd == 16)
			for (int l = 0; l < 8; l++)
				a[l] = _mm256_fmadd_ps(q[8 + l], _mm256_loadu_ps(k + (8 + l) * 8), a[l]);
		__m256 x = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a[4], a[0]), _mm256_add_ps(a[6], a[2])),
		                         _mm256_add_ps(_mm256_add_ps(a[5], a[1]), _mm256_add_ps(a[7], a[3])));
		x = _mm256_mul_ps(x, scale);
		_mm256_storeu_ps(dst + (size_t)b * 8, x);
		m = _mm256_max_ps(b == nb - 1 ? _mm256_blendv_ps(m, x, live) : x, m);
	}
	return max8(m);
}

// one query head over rows [0, rows) of the planes: scores into sc (whole
// blocks), then in one pass e = exp(s - max) (zero in the lanes past
// rows), their sum and the sums of e * v; o = those over the sum
SIMD static inline __attribute__((always_inline)) void
head8(const float *kt, const float *vt, const float *qh, int hd, int hdv, __m256 scale, float cap, int rows, float *sc,
      float *o)
{
	const int nb = (rows + 7) / 8;
	const __m256 live = _mm256_castsi256_ps(
		_mm256_cmpgt_epi32(_mm256_set1_epi32(rows - (nb - 1) * 8), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
	__m256 vmx = scores8(kt, qh, hd, scale, nb, live, sc);
	if (cap > 0) {
		for (int r = 0; r < rows; r++)
			sc[r] = tanhf(sc[r] * (1.0f / cap)) * cap;
		__m256 m = _mm256_set1_ps(-INFINITY);
		for (int b = 0; b < nb - 1; b++)
			m = _mm256_max_ps(_mm256_loadu_ps(sc + (size_t)b * 8), m);
		vmx = max8(_mm256_max_ps(_mm256_blendv_ps(m, _mm256_loadu_ps(sc + (size_t)(nb - 1) * 8), live), m));
	}
	__m256 vs = _mm256_setzero_ps(), acc[16];
	for (int d = 0; d < hdv; d++)
		acc[d] = _mm256_setzero_ps();
	for (int b = 0; b < nb; b++) {
		__m256 e = exp_v(_mm256_sub_ps(_mm256_loadu_ps(sc + (size_t)b * 8), vmx));
		if (b == nb - 1)
			e = _mm256_and_ps(e, live);
		vs = _mm256_add_ps(vs, e);
		const float *v = vt + (size_t)b * hdv * 8;
		for (int d = 0; d < hdv; d++)
			acc[d] = _mm256_fmadd_ps(e, _mm256_loadu_ps(v + d * 8), acc[d]);
	}
	// lane r of fold8_t(acc + 8 i) is dimension 8 i + r's fold
	const __m256 inv = _mm256_set1_ps(1.0f / fold_v(vs));
	for (int d = 0; d < hdv; d += 8)
		_mm256_storeu_ps(o + d, _mm256_mul_ps(fold8_t(acc + d), inv));
}

// attn_fast_cols for small heads: per KV head, its keys and values as
// planes once, then every column's query heads of that group
SIMD static void
attn8_cols(const struct attn_shape *sh, const float *q, size_t qs, const uint16_t *k0, const uint16_t *v0,
           const uint16_t *k, const uint16_t *v, int split, int first, const int *last, int nc, float *out, size_t os,
           float *scratch)
{
	const int hd = sh->head_dim, hdv = sh->head_dim_v, nh = sh->n_head, group = nh / sh->n_head_kv;
	const int lmax = last_row(first, last, nc);
	const size_t nb = (size_t)(lmax - first + 8) / 8;
	float *sc = scratch, *kt = sc + nb * 8, *vt = kt + nb * 8 * hd;
	const __m256 scale = _mm256_set1_ps(sh->scale);
	for (int g = 0; g < sh->n_head_kv; g++) {
		planes8(k0, k, sh->k_stride, split, first, lmax, (size_t)g * hd, hd, kt);
		planes8(v0, v, sh->v_stride, split, first, lmax, (size_t)g * hdv, hdv, vt);
		for (int c = 0; c < nc; c++)
			for (int t = 0; t < group; t++) {
				const int h = g * group + t, rows = last[c] - first + 1;
				const float *qh = q + (size_t)c * qs + (size_t)h * hd;
				float *o = out + (size_t)c * os + (size_t)h * hdv;
				// the sizes as constants, so that the accumulators stay in registers
				if (hd == 8 && hdv == 8)
					head8(kt, vt, qh, 8, 8, scale, sh->softcap, rows, sc, o);
				else if (hd == 16 && hdv == 16)
					head8(kt, vt, qh, 16, 16, scale, sh->softcap, rows, sc, o);
				else
					head8(kt, vt, qh, hd, hdv, scale, sh->softcap, rows, sc, o);
			}
	}
}

// attn_scores' way through scores8, for the tests
SIMD static void
scores8_heads(const struct attn_shape *sh, const float *q, const uint16_t *k, int first, int last, float *scores,
              float *tmp)
{
	const int hd = sh->head_dim, group = sh->n_head / sh->n_head_kv, rows = last - first + 1;
	const int nb = (rows + 7) / 8;
	float *kt = tmp + (size_t)nb * 8;
	const __m256 scale = _mm256_set1_ps(sh->scale), every = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
	for (int g = 0; g < sh->n_head_kv; g++) {
		planes8(k, k, sh->k_stride, 0, first, last, (size_t)g * hd, hd, kt);
		for (int t = 0; t < group; t++) {
			scores8(kt, q + (size_t)(g * group + t) * hd, hd, scale, nb, every, tmp);
			memcpy(scores + (size_t)(g * group + t) * rows, tmp, (size_t)rows * sizeof(float));
		}
	}
}

// --- AVX-512: heads of 8 or 16 dimensions, sixteen rows a register ------------------
//
// Small heads (stories260K's are 8 wide) leave most of a row-per-register
// kernel's work in moving data: every row pays a conversion, a broadcast
// and a fold. Here (and in attn8_cols above) the keys and values of one KV
// head are first transposed, sixteen rows at a time, into fp32 planes
// (dimension d of rows j..j+15 in one register), once for every query head
// and column that reads them; then each query head's scores, softmax and
// P·V run with the rows in the lanes: eight FMAs per sixteen rows for the
// scores (the lanes and fold of ad_dot, so attn_ref's bits) and eight for
// P·V. The softmax sums in sixteen lanes, so the output differs from the
// AVX2 path's in the last bits (both within a few 1e-7 of attn_ref); a
// column's result never depends on the other columns of its call.
#define T512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")))

int attn_isa; // 0: the best the CPU has; 1: AVX2 at most

int
attn_have_avx512(void)
{
	return attn_level() >= AD_SIMD_AVX512;
}

static int
small512(const struct attn_shape *sh)
{
	const int have = attn_have_avx512(), hd = sh->head_dim, hdv = sh->head_dim_v;
	return have && attn_isa == 0 && attn_path == 0 && (hd == 8 || hd == 16) && (hdv == 8 || hdv == 16);
}

// dimensions off..off+7 of sixteen rows (rp[r] + off, fp16) to fp32 planes:
// dst[d * 16 + r]. Four registers of four rows each, then two rounds of
// word permutes: rows 0-7 by dims 0-3 and 4-7, then rows 0-15 by dim pairs
T512 static inline void
t16x8(const uint16_t *const rp[16], int off, float *dst)
{
	__m512i z[4];
	for (int i = 0; i < 4; i++) {
		__m512i a = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(rp[4 * i] + off)));
		a = _mm512_inserti32x4(a, _mm_loadu_si128((const __m128i *)(rp[4 * i + 1] + off)), 1);
		a = _mm512_inserti32x4(a, _mm_loadu_si128((const __m128i *)(rp[4 * i + 2] + off)), 2);
		z[i] = _mm512_inserti32x4(a, _mm_loadu_si128((const __m128i *)(rp[4 * i + 3] + off)), 3);
	}
	// level 1: word d * 8 + r of (z0, z1) is row r (0-7), dim d (0-3;
	// +4 for the second): source word r * 8 + d. Level 2: word e * 16 + r
	// is dim e (0-1; +2 for the second) of row r (0-15), rows 0-7 from the
	// first source, 8-15 from the second (+32)
	static const uint16_t i1a[32] = {0, 8,  16, 24, 32, 40, 48, 56, 1, 9,  17, 25, 33, 41, 49, 57,
	                                 2, 10, 18, 26, 34, 42, 50, 58, 3, 11, 19, 27, 35, 43, 51, 59},
			      i1b[32] = {4, 12, 20, 28, 36, 44, 52, 60, 5, 13, 21, 29, 37, 45, 53, 61,
	                                 6, 14, 22, 30, 38, 46, 54, 62, 7, 15, 23, 31, 39, 47, 55, 63},
			      i2a[32] = {0, 1, 2,  3,  4,  5,  6,  7,  32, 33, 34, 35, 36, 37, 38, 39,
	                                 8, 9, 10, 11, 12, 13, 14, 15, 40, 41, 42, 43, 44, 45, 46, 47},
			      i2b[32] = {16, 17, 18, 19, 20, 21, 22, 23, 48, 49, 50, 51, 52, 53, 54, 55,
	                                 24, 25, 26, 27, 28, 29, 30, 31, 56, 57, 58, 59, 60, 61, 62, 63};
	const __m512i x1a = _mm512_loadu_si512(i1a), x1b = _mm512_loadu_si512(i1b);
	const __m512i x2a = _mm512_loadu_si512(i2a), x2b = _mm512_loadu_si512(i2b);
	const __m512i p0 = _mm512_permutex2var_epi16(z[0], x1a, z[1]), p1 = _mm512_permutex2var_epi16(z[0], x1b, z[1]);
	const __m512i p2 = _mm512_permutex2var_epi16(z[2], x1a, z[3]), p3 = _mm512_permutex2var_epi16(z[2], x1b, z[3]);
	const __m512i o[4] = {_mm512_permutex2var_epi16(p0, x2a, p2), _mm512_permutex2var_epi16(p0, x2b, p2),
	                      _mm512_permutex2var_epi16(p1, x2a, p3), _mm512_permutex2var_epi16(p1, x2b, p3)};
	for (int i = 0; i < 4; i++) {
		_mm512_storeu_ps(dst + (2 * i) * 16, _mm512_cvtph_ps(_mm512_castsi512_si256(o[i])));
		_mm512_storeu_ps(dst + (2 * i + 1) * 16, _mm512_cvtph_ps(_mm512_extracti64x4_epi64(o[i], 1)));
	}
}

// rows first..lmax of one KV head (goff into each row; below split from c0)
// transposed to planes: dst[(b * dims + d) * 16 + r] is dimension d of row
// first + 16 b + r; rows past lmax repeat lmax
T512 static void
planes16(const uint16_t *c0, const uint16_t *c, size_t stride, int split, int first, int lmax, size_t goff, int dims,
         float *dst)
{
	for (int j = first, b = 0; j <= lmax; j += 16, b++) {
		const uint16_t *rp[16];
		for (int r = 0; r < 16; r++) {
			const int jr = j + r <= lmax ? j + r : lmax;
			rp[r] = (jr < split ? c0 : c) + (size_t)jr * stride + goff;
		}
		for (int off = 0; off < dims; off += 8)
			t16x8(rp, off, dst + ((size_t)b * dims + off) * 16);
	}
}

// scale * q·k of rows in nb blocks of planes (kt), in ad_dot's lanes (lane
// l of the dot product: dims l and l + 8) and fold
T512 static inline __attribute__((always_inline)) void
scores16(const float *kt, const float *qh, int hd, float scale, int nb, float *dst)
{
	__m512 q[16];
	for (int i = 0; i < hd; i++)
		q[i] = _mm512_set1_ps(qh[i]);
	const __m512 vs = _mm512_set1_ps(scale);
	for (int b = 0; b < nb; b++) {
		const float *k = kt + (size_t)b * hd * 16;
		__m512 a[8];
		for (int l = 0; l < 8; l++)
			a[l] = _mm512_mul_ps(q[l], _mm512_loadu_ps(k + l * 16));
		if (hd == 16)
			for (int l = 0; l < 8; l++)
				a[l] = _mm512_fmadd_ps(q[8 + l], _mm512_loadu_ps(k + (8 + l) * 16), a[l]);
		__m512 x = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a[4], a[0]), _mm512_add_ps(a[6], a[2])),
		                         _mm512_add_ps(_mm512_add_ps(a[5], a[1]), _mm512_add_ps(a[7], a[3])));
		_mm512_storeu_ps(dst + (size_t)b * 16, _mm512_mul_ps(x, vs));
	}
}

// exp_v's polynomial on sixteen lanes: the same bits lane for lane
T512 static inline __m512
exp16(__m512 x)
{
	x = _mm512_max_ps(_mm512_set1_ps(-87.0f), x);
	__m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
	                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
	r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
	__m512 p = _mm512_set1_ps(1.0f / 5040);
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
	__m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
	return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

// one query head over rows [0, rows) of the planes: scores into sc (whole
// blocks), softmax with the lanes past rows at zero, then o = P·V
T512 static inline __attribute__((always_inline)) void
head16(const float *kt, const float *vt, const float *qh, int hd, int hdv, float scale, float cap, int rows, float *sc,
       float *o)
{
	const int nb = (rows + 15) / 16;
	const __mmask16 tail = (__mmask16)(rows % 16 ? (1u << (rows % 16)) - 1 : 0xffff);
	scores16(kt, qh, hd, scale, nb, sc);
	if (cap > 0)
		for (int r = 0; r < rows; r++)
			sc[r] = tanhf(sc[r] * (1.0f / cap)) * cap;
	__m512 m = _mm512_set1_ps(-INFINITY);
	for (int b = 0; b < nb; b++)
		m = _mm512_mask_max_ps(m, b == nb - 1 ? tail : 0xffff, _mm512_loadu_ps(sc + (size_t)b * 16), m);
	const __m512 vmx = _mm512_set1_ps(_mm512_reduce_max_ps(m));
	__m512 vs = _mm512_setzero_ps();
	for (int b = 0; b < nb; b++) {
		__m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(sc + (size_t)b * 16), vmx));
		if (b == nb - 1)
			e = _mm512_maskz_mov_ps(tail, e);
		_mm512_storeu_ps(sc + (size_t)b * 16, e);
		vs = _mm512_add_ps(vs, e);
	}
	const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(vs));
	__m512 acc[16];
	for (int d = 0; d < hdv; d++)
		acc[d] = _mm512_setzero_ps();
	for (int b = 0; b < nb; b++) {
		const __m512 p = _mm512_mul_ps(_mm512_loadu_ps(sc + (size_t)b * 16), inv);
		const float *v = vt + (size_t)b * hdv * 16;
		for (int d = 0; d < hdv; d++)
			acc[d] = _mm512_fmadd_ps(p, _mm512_loadu_ps(v + d * 16), acc[d]);
	}
	for (int d = 0; d < hdv; d++)
		o[d] = _mm512_reduce_add_ps(acc[d]);
}

// attn_fast_cols for small heads: per KV head, its keys and values as
// planes once, then every column's query heads of that group
T512 static void
attn512_cols(const struct attn_shape *sh, const float *q, size_t qs, const uint16_t *k0, const uint16_t *v0,
             const uint16_t *k, const uint16_t *v, int split, int first, const int *last, int nc, float *out, size_t os,
             float *scratch)
{
	const int hd = sh->head_dim, hdv = sh->head_dim_v, nh = sh->n_head, group = nh / sh->n_head_kv;
	const int lmax = last_row(first, last, nc);
	const size_t nb = (size_t)(lmax - first + 16) / 16;
	float *sc = scratch, *kt = sc + nb * 16, *vt = kt + nb * 16 * hd;
	for (int g = 0; g < sh->n_head_kv; g++) {
		planes16(k0, k, sh->k_stride, split, first, lmax, (size_t)g * hd, hd, kt);
		planes16(v0, v, sh->v_stride, split, first, lmax, (size_t)g * hdv, hdv, vt);
		for (int c = 0; c < nc; c++)
			for (int t = 0; t < group; t++) {
				const int h = g * group + t, rows = last[c] - first + 1;
				const float *qh = q + (size_t)c * qs + (size_t)h * hd;
				float *o = out + (size_t)c * os + (size_t)h * hdv;
				// the sizes as constants, so that the accumulators stay in registers
				if (hd == 8 && hdv == 8)
					head16(kt, vt, qh, 8, 8, sh->scale, sh->softcap, rows, sc, o);
				else if (hd == 16 && hdv == 16)
					head16(kt, vt, qh, 16, 16, sh->scale, sh->softcap, rows, sc, o);
				else
					head16(kt, vt, qh, hd, hdv, sh->scale, sh->softcap, rows, sc, o);
			}
	}
}

// --- AVX-512: one column over heads of 24 to 256 dimensions -------------------
//
// A decode step's attention: one column. The scores keep ad_dot's eight
// lanes and fold (attn_ref's bits, as all_scores does): a zmm register
// holds the eight lanes of two rows, so a step of eight dimensions is one
// FMA per pair of rows and query head, the keys converted once for up to
// four query heads of a group. P·V reads the value rows straight from the
// cache, four zmm of 64 dimensions at a time for up to four heads, one FMA
// chain per output over the rows in order. The softmax is softmax_row's.
// So every step is the AVX2 path's (attn_simd_cols) with the same
// operations in the same order: the same bits, 1.5 to 1.8 times as fast
// (that path takes its keys and values through fp32 copies in scratch,
// with a transposed fold per head and eight rows).

// Up to ATTN_WIDE_COLS columns (a verify step's) go through it one at a
// time, faster than attn_simd_cols over all of them, which converts each
// block of keys and values once for every column (1024 rows, warm, per
// column: 8 columns 40 against 41 us on 9/3 heads of 64, 56 against 70 on
// 14/2, 256 against 269 on 32/8 heads of 128); at sixteen (a prefill
// chunk's) it was no longer faster (a 2048-token prompt's attention 1.54
// against 1.48 s on 9/3 heads): more columns go through attn512w_cols

// the heads the AVX-512 paths below take (attn512w_col, attn512w_cols)
static int
wide512(const struct attn_shape *sh)
{
	const int hd = sh->head_dim, hdv = sh->head_dim_v;
	return attn_have_avx512() && attn_isa == 0 && attn_path == 0 && hd % 8 == 0 && hd > 16 && hd <= BIG_HD_MAX &&
	       hdv % 64 == 0 && hdv > 0;
}

// the eight-lane chains of rows 2p, 2p + 1 (zmm p, lanes 0-7 and 8-15) to
// their ad_fold8 sums, rows 0-7 of one query head in one register
T512 static inline __m256
fold512(__m512 a0, __m512 a1, __m512 a2, __m512 a3)
{
	// l + (l + 4) of each row: 128-bit lane k of s01 is row k's four sums
	const __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(a0, a1, _MM_SHUFFLE(3, 1, 3, 1)),
	                                 _mm512_shuffle_f32x4(a0, a1, _MM_SHUFFLE(2, 0, 2, 0)));
	const __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(a2, a3, _MM_SHUFFLE(3, 1, 3, 1)),
	                                 _mm512_shuffle_f32x4(a2, a3, _MM_SHUFFLE(2, 0, 2, 0)));
	// (s0 + s2), (s1 + s3), then their sum, in element 0 of each lane
	const __m512 t01 = _mm512_add_ps(s01, _mm512_permute_ps(s01, _MM_SHUFFLE(1, 0, 3, 2)));
	const __m512 t23 = _mm512_add_ps(s23, _mm512_permute_ps(s23, _MM_SHUFFLE(1, 0, 3, 2)));
	const __m512 u01 = _mm512_add_ps(t01, _mm512_permute_ps(t01, _MM_SHUFFLE(2, 3, 0, 1)));
	const __m512 u23 = _mm512_add_ps(t23, _mm512_permute_ps(t23, _MM_SHUFFLE(2, 3, 0, 1)));
	const __m512i pick = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 0, 0, 0, 0, 0, 0, 0);
	return _mm512_castps512_ps256(_mm512_permutex2var_ps(u01, pick, u23));
}

// the head count a constant in each call, the accumulators in registers
#define BY_NT(nt, call1, call2, call3, call4)                                                                          \
	do {                                                                                                           \
		if ((nt) == 1)                                                                                         \
			call1;                                                                                         \
		else if ((nt) == 2)                                                                                    \
			call2;                                                                                         \
		else if ((nt) == 3)                                                                                    \
			call3;                                                                                         \
		else                                                                                                   \
			call4;                                                                                         \
	} while (0)

// eight dimensions of two key rows, a and b, in fp32: a's in lanes 0-7,
// b's in 8-15 (the zmm of a row pair of keys512)
T512 static inline __m512
pair512(const uint16_t *a, const uint16_t *b)
{
	return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)a)),
	                                               _mm_loadu_si128((const __m128i *)b), 1));
}

// scale * q·k of nt (1 to 4) query heads (qh, hd apart) and the eight rows
// kr of one KV head: dst[t * ld + r]
T512 static inline __attribute__((always_inline)) void
keys512(const uint16_t *const kr[8], const float *qh, int hd, const int nt, float scale, float *dst, size_t ld)
{
	__m512 acc[4][4];
	for (int t = 0; t < nt; t++)
		for (int p = 0; p < 4; p++)
			acc[t][p] = _mm512_setzero_ps();
	for (int i = 0; i < hd; i += 8) {
		__m512 kk[4];
		for (int p = 0; p < 4; p++)
			kk[p] = pair512(kr[2 * p] + i, kr[2 * p + 1] + i);
		for (int t = 0; t < nt; t++) {
			const __m512 qq = _mm512_broadcast_f32x8(_mm256_loadu_ps(qh + (size_t)t * hd + i));
			for (int p = 0; p < 4; p++)
				acc[t][p] = _mm512_fmadd_ps(qq, kk[p], acc[t][p]);
		}
	}
	const __m256 vs = _mm256_set1_ps(scale);
	for (int t = 0; t < nt; t++)
		_mm256_storeu_ps(dst + (size_t)t * ld,
		                 _mm256_mul_ps(fold512(acc[t][0], acc[t][1], acc[t][2], acc[t][3]), vs));
}

// o[t * hdv ..] (+)= sum over rows first..last of p[t * ld + j - first]
// times value dimensions off .. off + 63 of row j, for nt (1 to 4) heads:
// from zero (add 0) or on from o's sums. (The AVX2 path sums the
// dimensions past a multiple of 64 in another order: pv_block)
T512 static inline __attribute__((always_inline)) void
values512(const uint16_t *v0, const uint16_t *v, size_t stride, int split, int first, int last, size_t off,
          const float *p, size_t ld, const int nt, int hdv, float *o, int add)
{
	__m512 acc[4][4];
	for (int t = 0; t < nt; t++)
		for (int z = 0; z < 4; z++)
			acc[t][z] = add ? _mm512_loadu_ps(o + (size_t)t * hdv + 16 * z) : _mm512_setzero_ps();
	for (int j = first; j <= last; j++) {
		const uint16_t *vj = (j < split ? v0 : v) + (size_t)j * stride + off;
		__m512 vz[4];
		for (int z = 0; z < 4; z++)
			vz[z] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vj + 16 * z)));
		for (int t = 0; t < nt; t++) {
			const __m512 pb = _mm512_set1_ps(p[(size_t)t * ld]);
			for (int z = 0; z < 4; z++)
				acc[t][z] = _mm512_fmadd_ps(pb, vz[z], acc[t][z]);
		}
		p++;
	}
	for (int t = 0; t < nt; t++)
		for (int z = 0; z < 4; z++)
			_mm512_storeu_ps(o + (size_t)t * hdv + 16 * z, acc[t][z]);
}

// value rows a P·V pass takes at a time, every KV head over them while
// they are in L1: ATTN_PV_BYTES of rows (8 to 256)
#define ATTN_PV_BYTES 16384
// value rows are read ahead during the scores up to this many bytes of
// them (L2 holds them until P·V), the rest as P·V goes
#define ATTN_V_EARLY 262144

// the value rows from first on that the scores read ahead (ATTN_V_EARLY)
static inline int
v_early_rows(const struct attn_shape *sh)
{
	const size_t vpitch = sh->v_stride * sizeof(uint16_t);
	return vpitch >= ATTN_AHEAD_MIN ? (int)(ATTN_V_EARLY / vpitch) : 0;
}

// scale * q·k of every head of one column over rows first..last, eight
// rows at a time (every KV head of a row while it is in L1, as all_scores
// does): sc[h * ld + j - first], ld a multiple of 8 (the rows of the last
// block past last computed on copies of it). With v0 and v, the value
// rows are read ahead meanwhile (the first ATTN_V_EARLY bytes of them)
T512 static void
scores512w(const struct attn_shape *sh, const float *q, const uint16_t *k0, const uint16_t *k, const uint16_t *v0,
           const uint16_t *v, int split, int first, int last, float *sc, size_t ld)
{
	const int hd = sh->head_dim, nkv = sh->n_head_kv, group = sh->n_head / nkv;
	const size_t kpitch = sh->k_stride * sizeof(uint16_t), kbytes = (size_t)nkv * hd * sizeof(uint16_t);
	const int ka = kpitch >= ATTN_AHEAD_MIN ? ahead_rows(kpitch) : 0;
	const size_t vbytes = (size_t)nkv * sh->head_dim_v * sizeof(uint16_t);
	const int vearly = v ? v_early_rows(sh) : 0;
	for (int j = first; j <= last; j += 8) {
		const uint16_t *kr[8], *kg[8];
		rows8(k0, k, sh->k_stride, split, j, last, kr);
		if (ka && j - first < ka) // until the first rows read ahead come up
			for (int r = j + ATTN_NEAR; r < j + ATTN_NEAR + 8 && r <= last; r++)
				prefetch_lines((const char *)((r < split ? k0 : k) + (size_t)r * sh->k_stride), kbytes);
		for (int r = j + ka; ka && r < j + ka + 8 && r <= last; r++)
			prefetch_lines((const char *)((r < split ? k0 : k) + (size_t)r * sh->k_stride), kbytes);
		for (int r = j; j - first < vearly && r < j + 8 && r <= last; r++)
			prefetch_lines((const char *)((r < split ? v0 : v) + (size_t)r * sh->v_stride), vbytes);
		for (int g = 0; g < nkv; g++) {
			for (int r = 0; r < 8; r++)
				kg[r] = kr[r] + (size_t)g * hd;
			for (int t0 = 0; t0 < group; t0 += 4) {
				const int nt = group - t0 < 4 ? group - t0 : 4, h = g * group + t0;
				const float *qh = q + (size_t)h * hd;
				float *d = sc + (size_t)h * ld + (size_t)(j - first);
				BY_NT(nt, keys512(kg, qh, hd, 1, sh->scale, d, ld),
				      keys512(kg, qh, hd, 2, sh->scale, d, ld),
				      keys512(kg, qh, hd, 3, sh->scale, d, ld),
				      keys512(kg, qh, hd, 4, sh->scale, d, ld));
			}
		}
	}
}

// One column: the scores (scores512w), the softmax (each head's lse into
// lse[h] when lse is not NULL), then P·V a chunk of rows at a time for
// every KV head, each head's sums carried in out from one chunk to the next
T512 static void
attn512w_col(const struct attn_shape *sh, const float *q, const uint16_t *k0, const uint16_t *v0, const uint16_t *k,
             const uint16_t *v, int split, int first, int last, float *out, float *lse, float *scratch)
{
	const int hdv = sh->head_dim_v, nkv = sh->n_head_kv, group = sh->n_head / nkv;
	const int rows = last - first + 1;
	const size_t ld = ((size_t)rows + 7) & ~(size_t)7;
	float *sc = scratch;
	const size_t vpitch = sh->v_stride * sizeof(uint16_t), vbytes = (size_t)nkv * hdv * sizeof(uint16_t);
	const int va = vpitch >= ATTN_AHEAD_MIN ? ahead_rows(vpitch) : 0;
	const int vearly = v_early_rows(sh); // those scores512w read ahead
	scores512w(sh, q, k0, k, v0, v, split, first, last, sc, ld);
	for (int h = 0; h < sh->n_head; h++)
		softmax_row(sc + (size_t)h * ld, rows, sh->softcap, lse ? lse + h : NULL);
	int chunk = (int)(ATTN_PV_BYTES / (vbytes ? vbytes : 1));
	chunk = chunk < 8 ? 8 : chunk > 256 ? 256 : chunk;
	for (int j0 = first; j0 <= last; j0 += chunk) {
		const int j1 = last - j0 + 1 < chunk ? last : j0 + chunk - 1;
		for (int r = j0 + va > first + vearly ? j0 + va : first + vearly; va && r <= j1 + va && r <= last; r++)
			prefetch_lines((const char *)((r < split ? v0 : v) + (size_t)r * sh->v_stride), vbytes);
		for (int g = 0; g < nkv; g++)
			for (int t0 = 0; t0 < group; t0 += 4) {
				const int nt = group - t0 < 4 ? group - t0 : 4, h = g * group + t0;
				for (int d0 = 0; d0 < hdv; d0 += 64) {
					const size_t off = (size_t)g * hdv + (size_t)d0;
					const float *p = sc + (size_t)h * ld + (size_t)(j0 - first);
					float *o = out + (size_t)h * hdv + d0;
					const int add = j0 > first;
					BY_NT(nt,
					      values512(v0, v, sh->v_stride, split, j0, j1, off, p, ld, 1, hdv, o, add),
					      values512(v0, v, sh->v_stride, split, j0, j1, off, p, ld, 2, hdv, o, add),
					      values512(v0, v, sh->v_stride, split, j0, j1, off, p, ld, 3, hdv, o, add),
					      values512(v0, v, sh->v_stride, split, j0, j1, off, p, ld, 4, hdv, o,
					                add));
				}
			}
	}
}

// --- AVX-512: the columns of a prefill chunk together ---------------------------
//
// keys512's and values512's tiles over several columns (more than
// ATTN_WIDE_COLS: a prefill chunk), the keys of a block of eight rows and
// the value rows of a chunk converted to fp32 once for every column and
// query head that reads them (the one-column path converts them again for
// each column). The same chains in the same order, so the same bits.

// keys512 from a block of eight rows already in fp32, rows 2p and 2p + 1
// of dimensions i .. i + 7 at kp + (i / 8) * 64 + 16 * p; nt (1 to 4)
// query heads qh[t], their scores to dst[t]
T512 static inline __attribute__((always_inline)) void
keys512f(const float *kp, const float *const qh[4], int hd, const int nt, float scale, float *const dst[4])
{
	__m512 acc[4][4];
	for (int t = 0; t < nt; t++)
		for (int p = 0; p < 4; p++)
			acc[t][p] = _mm512_setzero_ps();
	for (int i = 0; i < hd; i += 8) {
		__m512 kk[4];
		for (int p = 0; p < 4; p++)
			kk[p] = _mm512_load_ps(kp + (size_t)(i / 8) * 64 + 16 * p);
		for (int t = 0; t < nt; t++) {
			const __m512 qq = _mm512_broadcast_f32x8(_mm256_loadu_ps(qh[t] + i));
			for (int p = 0; p < 4; p++)
				acc[t][p] = _mm512_fmadd_ps(qq, kk[p], acc[t][p]);
		}
	}
	const __m256 vs = _mm256_set1_ps(scale);
	for (int t = 0; t < nt; t++)
		_mm256_storeu_ps(dst[t], _mm256_mul_ps(fold512(acc[t][0], acc[t][1], acc[t][2], acc[t][3]), vs));
}

// values512 from value rows already in fp32 (row r of the chunk at
// vf + r * ldv): o[t * hdv ..] (+)= sum over r < nr of p[t * ld + r] *
// vf[r * ldv .. + 63]
T512 static inline __attribute__((always_inline)) void
values512f(const float *vf, size_t ldv, int nr, const float *p, size_t ld, const int nt, int hdv, float *o, int add)
{
	__m512 acc[4][4];
	for (int t = 0; t < nt; t++)
		for (int z = 0; z < 4; z++)
			acc[t][z] = add ? _mm512_loadu_ps(o + (size_t)t * hdv + 16 * z) : _mm512_setzero_ps();
	for (int r = 0; r < nr; r++) {
		const float *vr = vf + (size_t)r * ldv;
		__m512 vz[4];
		for (int z = 0; z < 4; z++)
			vz[z] = _mm512_load_ps(vr + 16 * z);
		for (int t = 0; t < nt; t++) {
			const __m512 pb = _mm512_set1_ps(p[(size_t)t * ld + r]);
			for (int z = 0; z < 4; z++)
				acc[t][z] = _mm512_fmadd_ps(pb, vz[z], acc[t][z]);
		}
	}
	for (int t = 0; t < nt; t++)
		for (int z = 0; z < 4; z++)
			_mm512_storeu_ps(o + (size_t)t * hdv + 16 * z, acc[t][z]);
}


// value rows of one KV head a P·V pass of attn512w_cols converts at a time
#define WCOLS_PV_ROWS 32

// nc columns (column c over rows first..last[c]): every column's scores,
// a block of eight rows of one KV head at a time; the softmax; then P·V a
// chunk of WCOLS_PV_ROWS value rows of one KV head at a time, each head's
// sums carried in out from one chunk to the next. Scratch: the scores,
// nc * n_head rows of ld (the rows rounded up to 8), then the chunk
T512 static void
attn512w_cols(const struct attn_shape *sh, const float *q, size_t qs, const uint16_t *k0, const uint16_t *v0,
              const uint16_t *k, const uint16_t *v, int split, int first, const int *last, int nc, float *out,
              size_t os, float *scratch)
{
	const int hd = sh->head_dim, hdv = sh->head_dim_v, nh = sh->n_head, nkv = sh->n_head_kv, group = nh / nkv;
	const int lmax = last_row(first, last, nc);
	const size_t ld = ((size_t)(lmax - first + 1) + 7) & ~(size_t)7;
	float *sc = scratch;
	float *vf = (float *)(((uintptr_t)(sc + (size_t)nc * nh * ld) + 63) & ~(uintptr_t)63);
	float kp[8 * BIG_HD_MAX] __attribute__((aligned(64)));
	const size_t kpitch = sh->k_stride * sizeof(uint16_t), kbytes = (size_t)nkv * hd * sizeof(uint16_t);
	const int ka = kpitch >= ATTN_AHEAD_MIN ? ahead_rows(kpitch) : 0;
	for (int j = first; j <= lmax; j += 8) {
		const uint16_t *kr[8];
		rows8(k0, k, sh->k_stride, split, j, lmax, kr);
		if (ka)
			prefetch_rows(k0, k, sh->k_stride, split, j + ka, 8, lmax, kbytes);
		for (int g = 0; g < nkv; g++) {
			const size_t off = (size_t)g * hd;
			for (int i = 0; i < hd; i += 8)
				for (int p = 0; p < 4; p++)
					_mm512_store_ps(kp + (size_t)(i / 8) * 64 + 16 * p,
					                pair512(kr[2 * p] + off + i, kr[2 * p + 1] + off + i));
			for (int c = 0; c < nc; c++) {
				if (j > last[c])
					continue;
				for (int t0 = 0; t0 < group; t0 += 4) {
					const int nt = group - t0 < 4 ? group - t0 : 4, h = g * group + t0;
					const float *qh[4];
					float *d[4];
					for (int t = 0; t < nt; t++) {
						qh[t] = q + (size_t)c * qs + (size_t)(h + t) * hd;
						d[t] = sc + ((size_t)c * nh + (size_t)(h + t)) * ld +
						       (size_t)(j - first);
					}
					BY_NT(nt, keys512f(kp, qh, hd, 1, sh->scale, d),
					      keys512f(kp, qh, hd, 2, sh->scale, d),
					      keys512f(kp, qh, hd, 3, sh->scale, d),
					      keys512f(kp, qh, hd, 4, sh->scale, d));
				}
			}
		}
	}
	for (int c = 0; c < nc; c++)
		for (int h = 0; h < nh; h++)
			softmax_row(sc + ((size_t)c * nh + h) * ld, last[c] - first + 1, sh->softcap, NULL);
	for (int j0 = first; j0 <= lmax; j0 += WCOLS_PV_ROWS) {
		const int nm = lmax - j0 + 1 < WCOLS_PV_ROWS ? lmax - j0 + 1 : WCOLS_PV_ROWS;
		const int add = j0 > first; // o's sums so far, or from zero
		for (int g = 0; g < nkv; g++) {
			for (int r = 0; r < nm; r++) {
				const uint16_t *vj =
					(j0 + r < split ? v0 : v) + (size_t)(j0 + r) * sh->v_stride + (size_t)g * hdv;
				for (int d = 0; d < hdv; d += 16)
					_mm512_store_ps(vf + (size_t)r * hdv + d,
					                _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vj + d))));
			}
			for (int c = 0; c < nc; c++) {
				if (j0 > last[c])
					continue;
				const int nr = last[c] - j0 + 1 < nm ? last[c] - j0 + 1 : nm;
				for (int t0 = 0; t0 < group; t0 += 4) {
					const int nt = group - t0 < 4 ? group - t0 : 4, h = g * group + t0;
					const float *p = sc + ((size_t)c * nh + h) * ld + (size_t)(j0 - first);
					for (int d0 = 0; d0 < hdv; d0 += 64) {
						float *o = out + (size_t)c * os + (size_t)h * hdv + d0;
						const float *x = vf + d0;
						BY_NT(nt, values512f(x, hdv, nr, p, ld, 1, hdv, o, add),
						      values512f(x, hdv, nr, p, ld, 2, hdv, o, add),
						      values512f(x, hdv, nr, p, ld, 3, hdv, o, add),
						      values512f(x, hdv, nr, p, ld, 4, hdv, o, add));
					}
				}
			}
		}
	}
}

// attn_scores' way through scores16, for the tests
T512 static void
scores512(const struct attn_shape *sh, const float *q, const uint16_t *k, int first, int last, float *scores,
          float *tmp)
{
	const int hd = sh->head_dim, group = sh->n_head / sh->n_head_kv, rows = last - first + 1;
	const int nb = (rows + 15) / 16;
	float *kt = tmp + (size_t)nb * 16;
	for (int g = 0; g < sh->n_head_kv; g++) {
		planes16(k, k, sh->k_stride, 0, first, last, (size_t)g * hd, hd, kt);
		for (int t = 0; t < group; t++) {
			const int h = g * group + t;
			scores16(kt, q + (size_t)h * hd, hd, sh->scale, nb, tmp);
			memcpy(scores + (size_t)h * rows, tmp, (size_t)rows * sizeof(float));
		}
	}
}
#else
int attn_isa;

int
attn_have_simd(void)
{
	return 0;
}

int
attn_have_avx512(void)
{
	return 0;
}
#endif

size_t
attn_cols_scratch_floats(const struct attn_shape *sh, int rows, int cols)
{
	const size_t r16 = ((size_t)(rows > 0 ? rows : 1) + 15) & ~(size_t)15;
	return attn_scratch_floats(sh, rows) + (size_t)sh->n_head * r16 * (size_t)(cols > 1 ? cols - 1 : 0);
}

void
attn_ref_cols(const struct attn_shape *sh, const float *q, size_t q_stride, const uint16_t *k0, const uint16_t *v0,
              const uint16_t *k, const uint16_t *v, int split, int first, const int *last, int cols, float *out,
              size_t out_stride, float *scratch)
{
	for (int c = 0; c < cols; c++)
		attn_ref_split(sh, q + (size_t)c * q_stride, k0, v0, k, v, split, first, last[c],
		               out + (size_t)c * out_stride, scratch);
}

void
attn_fast_cols(const struct attn_shape *sh, const float *q, size_t q_stride, const uint16_t *k0, const uint16_t *v0,
               const uint16_t *k, const uint16_t *v, int split, int first, const int *last, int cols, float *out,
               size_t out_stride, float *scratch)
{
	const int lmax = last_row(first, last, cols);
	prefetch_pages(k0, k, sh->k_stride, split, first, lmax);
	prefetch_pages(v0, v, sh->v_stride, split, first, lmax);
#ifdef AD_FP16_X86
	if (small512(sh)) {
		attn512_cols(sh, q, q_stride, k0, v0, k, v, split, first, last, cols, out, out_stride, scratch);
		return;
	}
	if (wide512(sh) && cols <= ATTN_WIDE_COLS) {
		for (int c = 0; c < cols; c++)
			attn512w_col(sh, q + (size_t)c * q_stride, k0, v0, k, v, split, first, last[c],
			             out + (size_t)c * out_stride, NULL, scratch);
		return;
	}
	if (wide512(sh)) {
		attn512w_cols(sh, q, q_stride, k0, v0, k, v, split, first, last, cols, out, out_stride, scratch);
		return;
	}
	if (attn_have_simd() && small8(sh)) {
		attn8_cols(sh, q, q_stride, k0, v0, k, v, split, first, last, cols, out, out_stride, scratch);
		return;
	}
	if (attn_have_simd()) {
		attn_simd_cols(sh, q, q_stride, k0, v0, k, v, split, first, last, cols, out, out_stride, NULL, scratch);
		return;
	}
#endif
	attn_ref_cols(sh, q, q_stride, k0, v0, k, v, split, first, last, cols, out, out_stride, scratch);
}

int
attn_part_ok(const struct attn_shape *sh)
{
#ifdef AD_FP16_X86
	// attn_fast_cols's one-column ways through softmax_row
	return !small512(sh) && (wide512(sh) || (attn_have_simd() && !small8(sh)));
#else
	(void)sh;
	return 0;
#endif
}

void
attn_part(const struct attn_shape *sh, const float *q, const uint16_t *k0, const uint16_t *v0, const uint16_t *k,
          const uint16_t *v, int split, int first, int last, float *out, float *lse, float *scratch)
{
	// attn_fast_cols's way for one column (attn_part_ok: one of these two)
	prefetch_pages(k0, k, sh->k_stride, split, first, last);
	prefetch_pages(v0, v, sh->v_stride, split, first, last);
#ifdef AD_FP16_X86
	if (wide512(sh))
		attn512w_col(sh, q, k0, v0, k, v, split, first, last, out, lse, scratch);
	else
		attn_simd_cols(sh, q, 0, k0, v0, k, v, split, first, &last, 1, out, 0, lse, scratch);
#else
	(void)q, (void)out, (void)lse, (void)scratch;
#endif
}

void
attn_merge(const struct attn_shape *sh, const float *po, const float *lse, int parts, float *out)
{
	const int hdv = sh->head_dim_v;
	for (int h = 0; h < sh->n_head; h++) {
		float m = -INFINITY, w[ATTN_PARTS_MAX], sum = 0;
		for (int i = 0; i < parts; i++)
			m = lse[(size_t)i * sh->n_head + h] > m ? lse[(size_t)i * sh->n_head + h] : m;
		for (int i = 0; i < parts; i++)
			sum += w[i] = expf(lse[(size_t)i * sh->n_head + h] - m);
		float *o = out + (size_t)h * hdv;
		for (int d = 0; d < hdv; d++) {
			float a = 0;
			for (int i = 0; i < parts; i++)
				a += w[i] * po[((size_t)i * sh->n_head + h) * hdv + d];
			o[d] = a / sum;
		}
	}
}

const char *
attn_fast_path(const struct attn_shape *sh, int cols)
{
#ifdef AD_FP16_X86
	if (small512(sh))
		return "AVX-512, heads of 8 or 16";
	if (wide512(sh))
		return cols <= ATTN_WIDE_COLS ? "AVX-512, a column at a time" : "AVX-512, the columns together";
	if (attn_have_simd())
		return small8(sh) ? "AVX2, heads of 8 or 16" : "AVX2";
#endif
	(void)sh, (void)cols;
	return "plain C";
}

void
attn_fast_split(const struct attn_shape *sh, const float *q, const uint16_t *k0, const uint16_t *v0, const uint16_t *k,
                const uint16_t *v, int split, int first, int last, float *out, float *scratch)
{
	attn_fast_cols(sh, q, 0, k0, v0, k, v, split, first, &last, 1, out, 0, scratch);
}

void
attn_fast(const struct attn_shape *sh, const float *q, const uint16_t *k, const uint16_t *v, int first, int last,
          float *out, float *scratch)
{
	attn_fast_split(sh, q, k, v, k, v, 0, first, last, out, scratch);
}

void
attn_scores(const struct attn_shape *sh, const float *q, const uint16_t *k, int first, int last, int fast,
            float *scores)
{
	const int hd = sh->head_dim, group = sh->n_head / sh->n_head_kv, rows = last - first + 1;
#ifdef AD_FP16_X86
	if (fast && small512(sh)) {
		float *tmp = malloc(sizeof(float) * ((size_t)(rows + 15) / 16 * 16 * (size_t)(hd + 1)));
		if (tmp)
			scores512(sh, q, k, first, last, scores, tmp);
		free(tmp);
		if (tmp)
			return;
	}
	if (fast && wide512(sh)) {
		const size_t ld = ((size_t)rows + 7) & ~(size_t)7;
		float *tmp = malloc(sizeof(float) * (size_t)sh->n_head * ld);
		if (tmp) {
			scores512w(sh, q, k, k, NULL, NULL, 0, first, last, tmp, ld);
			for (int h = 0; h < sh->n_head; h++)
				memcpy(scores + (size_t)h * rows, tmp + (size_t)h * ld, (size_t)rows * sizeof(float));
			free(tmp);
			return;
		}
	}
	if (fast && attn_have_simd() && small8(sh)) {
		float *tmp = malloc(sizeof(float) * ((size_t)(rows + 7) / 8 * 8 * (size_t)(hd + 1)));
		if (tmp)
			scores8_heads(sh, q, k, first, last, scores, tmp);
		free(tmp);
		if (tmp)
			return;
	}
	if (fast && attn_have_simd()) {
		all_scores(sh, q, 0, k, k, 0, first, &last, 1, last, scores, (size_t)rows);
		return;
	}
#endif
	float *kf = malloc(sizeof(float) * (size_t)hd);
	for (int h = 0; h < sh->n_head && kf; h++)
		for (int j = first; j <= last; j++) {
			row(k, (size_t)j * sh->k_stride + (size_t)(h / group) * hd, 0, kf, hd);
			scores[(size_t)h * rows + j - first] = ad_dot(q + (size_t)h * hd, kf, hd) * sh->scale;
		}
	free(kf);
}
