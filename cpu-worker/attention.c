// attention.c - softmax attention over an fp16 KV cache, plain and AVX2.
#include "attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fp16.h"
#include "numeric.h"

size_t
attn_scratch_floats(const struct attn_shape *sh, int rows)
{
	size_t hd = (size_t)sh->head_dim, hdv = (size_t)sh->head_dim_v;
	return (size_t)sh->n_head * (size_t)(rows > 0 ? rows : 1) + 8 * hdv + hd + hdv + 16;
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

// --- AVX2 / FMA / F16C ------------------------------------------------------------

#ifdef AD_FP16_X86
#define SIMD __attribute__((target("avx2,fma,f16c")))

int
attn_have_simd(void)
{
	return ad_cpu_simd();
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

// the scaled q·k scores of one KV head's group of query heads (qg) over
// rows first..last (below split from kg0, the others from kg):
// scores[t * rows + j - first], the same bits as attn_ref's (same lanes,
// same fold). Heads of up to 16 dimensions take eight rows at a time with
// the rows in the lanes, so lane l of ad_dot is one register and the fold
// is seven adds for eight rows; larger heads take four heads by two rows,
// a fold per score
SIMD static void
group_scores(const struct attn_shape *sh, const float *qg, const uint16_t *kg0, const uint16_t *kg, int split,
             int first, int last, float *scores)
{
	const int hd = sh->head_dim, group = sh->n_head / sh->n_head_kv, rows = last - first + 1, hd8 = hd & ~7;
	if (hd == hd8 && hd <= 16 && attn_path != 1) {
		float kt[16 * 8];
		const __m256 scale = _mm256_set1_ps(sh->scale);
		for (int j = first; j <= last; j += 8) {
			const int nr = last - j + 1 < 8 ? last - j + 1 : 8;
			const uint16_t *kj[8];
			for (int r = 0; r < 8; r++) { // past the last row: the last again, dropped
				const int jr = j + (r < nr ? r : nr - 1);
				kj[r] = (jr < split ? kg0 : kg) + (size_t)jr * sh->k_stride;
			}
			keys_t8(kj, hd, kt);
			for (int t = 0; t < group; t++) {
				const float *qh = qg + (size_t)t * hd;
				__m256 a[8];
				for (int l = 0; l < 8; l++)
					a[l] = _mm256_fmadd_ps(_mm256_set1_ps(qh[l]), _mm256_loadu_ps(kt + l * 8),
					                       _mm256_setzero_ps());
				for (int i = 8; i < hd; i += 8)
					for (int l = 0; l < 8; l++)
						a[l] = _mm256_fmadd_ps(_mm256_set1_ps(qh[i + l]),
						                       _mm256_loadu_ps(kt + (i + l) * 8), a[l]);
				// ad_fold8: (a4 + a0 + (a6 + a2)) + (a5 + a1 + (a7 + a3))
				__m256 x = _mm256_add_ps(
					_mm256_add_ps(_mm256_add_ps(a[4], a[0]), _mm256_add_ps(a[6], a[2])),
					_mm256_add_ps(_mm256_add_ps(a[5], a[1]), _mm256_add_ps(a[7], a[3])));
				x = _mm256_mul_ps(x, scale);
				float *dst = scores + (size_t)t * rows + (j - first);
				if (nr == 8) {
					_mm256_storeu_ps(dst, x);
				} else {
					float tmp[8];
					_mm256_storeu_ps(tmp, x);
					memcpy(dst, tmp, (size_t)nr * sizeof(float));
				}
			}
		}
		return;
	}
	// four heads by two rows at a time, the spare ones computed on a copy
	// of the last and dropped
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
					scores[(size_t)(h0 + t) * rows + (j + r - first)] = x * sh->scale;
				}
		}
	}
}

SIMD static void
attn_simd(const struct attn_shape *sh, const float *q, const uint16_t *k0, const uint16_t *v0, const uint16_t *k,
          const uint16_t *v, int split, int first, int last, float *out, float *scratch)
{
	const int hd = sh->head_dim, hdv = sh->head_dim_v, group = sh->n_head / sh->n_head_kv;
	const int rows = last - first + 1, hdv8 = hdv & ~7;
	const float cap = sh->softcap;
	float *scores = scratch; // [group][rows]
	float *vf = scores + (size_t)group * rows;
	for (int g = 0; g < sh->n_head_kv; g++) {
		const float *qg = q + (size_t)g * group * hd;
		const uint16_t *kg = k + (size_t)g * hd, *vg = v + (size_t)g * hdv;
		const uint16_t *kg0 = k0 + (size_t)g * hd, *vg0 = v0 + (size_t)g * hdv;
		group_scores(sh, qg, kg0, kg, split, first, last, scores);
		for (int t = 0; t < group; t++) {
			float *sc = scores + (size_t)t * rows;
			if (cap > 0)
				for (int r = 0; r < rows; r++)
					sc[r] = tanhf(sc[r] * (1.0f / cap)) * cap;
			// the largest score, four registers at a time (max_ps(s, m)
			// keeps m when s is NaN, as the plain loop does; which zero
			// wins a tie of +0 and -0 may differ, and e^(s - m) does not)
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
			float inv = 1.0f / sum;
			for (r = 0; r < rows; r++)
				sc[r] *= inv;
			memset(out + (size_t)(g * group + t) * hdv, 0, (size_t)hdv * sizeof(float));
		}
		// P·V: blocks of 8 value rows converted once into vf, then added
		// into each head of the group, 64 dimensions (8 registers) at a time
		for (int j0 = first; j0 <= last; j0 += 8) {
			const int nr = last - j0 + 1 < 8 ? last - j0 + 1 : 8;
			for (int r = 0; r < nr; r++) {
				const uint16_t *vj = (j0 + r < split ? vg0 : vg) + (size_t)(j0 + r) * sh->v_stride;
				float *dst = vf + (size_t)r * hdv;
				for (int d = 0; d < hdv8; d += 8)
					_mm256_storeu_ps(dst + d, load_h8(vj + d));
				for (int d = hdv8; d < hdv; d++)
					dst[d] = ad_fp16_to_f32(vj[d]);
			}
			for (int t = 0; t < group; t++) {
				float *o = out + (size_t)(g * group + t) * hdv;
				const float *p = scores + (size_t)t * rows + (j0 - first);
				int d0 = 0;
				for (; d0 + 64 <= hdv8; d0 += 64) {
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
				// the rest in four chains, so that a head of 8 does not
				// wait on one FMA after another
				for (; d0 < hdv8; d0 += 8) {
					__m256 a0 = _mm256_loadu_ps(o + d0), a1 = _mm256_setzero_ps(), a2 = a1, a3 = a1;
					int r = 0;
					for (; r + 4 <= nr; r += 4) {
						const float *x = vf + (size_t)r * hdv + d0;
						a0 = _mm256_fmadd_ps(_mm256_set1_ps(p[r]), _mm256_loadu_ps(x), a0);
						a1 = _mm256_fmadd_ps(_mm256_set1_ps(p[r + 1]), _mm256_loadu_ps(x + hdv),
						                     a1);
						a2 = _mm256_fmadd_ps(_mm256_set1_ps(p[r + 2]),
						                     _mm256_loadu_ps(x + 2 * hdv), a2);
						a3 = _mm256_fmadd_ps(_mm256_set1_ps(p[r + 3]),
						                     _mm256_loadu_ps(x + 3 * hdv), a3);
					}
					for (; r < nr; r++)
						a0 = _mm256_fmadd_ps(_mm256_set1_ps(p[r]),
						                     _mm256_loadu_ps(vf + (size_t)r * hdv + d0), a0);
					_mm256_storeu_ps(o + d0,
					                 _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
				}
				for (int d = hdv8; d < hdv; d++)
					for (int r = 0; r < nr; r++)
						o[d] = fmaf(p[r], vf[(size_t)r * hdv + d], o[d]);
			}
		}
	}
}
#else
int
attn_have_simd(void)
{
	return 0;
}
#endif

void
attn_fast_split(const struct attn_shape *sh, const float *q, const uint16_t *k0, const uint16_t *v0, const uint16_t *k,
                const uint16_t *v, int split, int first, int last, float *out, float *scratch)
{
#ifdef AD_FP16_X86
	if (attn_have_simd()) {
		attn_simd(sh, q, k0, v0, k, v, split, first, last, out, scratch);
		return;
	}
#endif
	attn_ref_split(sh, q, k0, v0, k, v, split, first, last, out, scratch);
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
	if (fast && attn_have_simd()) {
		for (int g = 0; g < sh->n_head_kv; g++)
			group_scores(sh, q + (size_t)g * group * hd, k + (size_t)g * hd, k + (size_t)g * hd, 0, first,
			             last, scores + (size_t)g * group * rows);
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
