// attention.c - softmax attention over an fp16 KV cache, plain and AVX2.
#include "attention.h"

#include <math.h>
#include <string.h>

#include "fp16.h"

size_t
attn_scratch_floats(const struct attn_shape *sh, int rows)
{
	size_t hd = (size_t)sh->head_dim, hdv = (size_t)sh->head_dim_v;
	return (size_t)sh->n_head * (size_t)(rows > 0 ? rows : 1) + 8 * hdv + hd + hdv + 16;
}

// --- the reference ----------------------------------------------------------------

// ref.c's fold of eight lanes
static inline float
fold8(const float *acc)
{
	float s0 = acc[4] + acc[0], s1 = acc[5] + acc[1], s2 = acc[6] + acc[2], s3 = acc[7] + acc[3];
	return (s0 + s2) + (s1 + s3);
}

// ref.c's dot: lane j accumulates elements i ≡ j (mod 8), one rounding each
static float
dot_ref(const float *a, const float *b, int n)
{
	float acc[8] = {0};
	int i = 0;
	for (; i + 8 <= n; i += 8)
		for (int l = 0; l < 8; l++)
			acc[l] = fmaf(a[i + l], b[i + l], acc[l]);
	float s = fold8(acc);
	for (; i < n; i++)
		s = fmaf(a[i], b[i], s);
	return s;
}

// rows of fp16 (f32 = 0) or fp32 (f32 = 1) to fp32
static inline void
row(const void *base, size_t off, int f32, float *dst, int n)
{
	if (f32)
		memcpy(dst, (const float *)base + off, (size_t)n * sizeof(float));
	else
		ad_fp16_to_f32_row_ref((const uint16_t *)base + off, dst, (size_t)n);
}

static void
attn_plain(const struct attn_shape *sh, const float *q, const void *k, const void *v, int f32, int first,
           int last, float *out, float *scratch)
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
			row(k, (size_t)j * sh->k_stride + (size_t)g * hd, f32, kf, hd);
			float s = dot_ref(qh, kf, hd) * sh->scale;
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
			row(v, (size_t)j * sh->v_stride + (size_t)g * hdv, f32, vf, hdv);
			float *pl = part + (size_t)(j & 7) * hdv, pj = scores[j - first];
			for (int d = 0; d < hdv; d++)
				pl[d] = fmaf(pj, vf[d], pl[d]);
		}
		float *o = out + (size_t)h * hdv;
		for (int d = 0; d < hdv; d++) {
			float acc[8];
			for (int l = 0; l < 8; l++)
				acc[l] = part[(size_t)l * hdv + d];
			o[d] = fold8(acc);
		}
	}
}

void
attn_ref(const struct attn_shape *sh, const float *q, const uint16_t *k, const uint16_t *v, int first,
         int last, float *out, float *scratch)
{
	attn_plain(sh, q, k, v, 0, first, last, out, scratch);
}

void
attn_ref_f32(const struct attn_shape *sh, const float *q, const float *k, const float *v, int first, int last,
             float *out, float *scratch)
{
	attn_plain(sh, q, k, v, 1, first, last, out, scratch);
}

// --- AVX2 / FMA / F16C ------------------------------------------------------------

#ifdef AD_FP16_X86
#define SIMD __attribute__((target("avx2,fma,f16c")))

int
attn_have_simd(void)
{
	static int have = -1;
	if (have < 0) // benign race: every thread computes the same answer
		have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
		       __builtin_cpu_supports("f16c");
	return have;
}

SIMD static inline __m256
load_h8(const uint16_t *p)
{
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

// the fold of fold8, on a register
SIMD static inline float
fold_v(__m256 a)
{
	__m128 s = _mm_add_ps(_mm256_extractf128_ps(a, 1), _mm256_castps256_ps128(a)); // s0..s3
	__m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));                                // s0+s2, s1+s3
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

// heads per pass over the keys: their accumulators stay in registers
#define HB 4

SIMD static void
attn_simd(const struct attn_shape *sh, const float *q, const uint16_t *k, const uint16_t *v, int first,
          int last, float *out, float *scratch)
{
	const int hd = sh->head_dim, hdv = sh->head_dim_v, group = sh->n_head / sh->n_head_kv;
	const int rows = last - first + 1, hd8 = hd & ~7, hdv8 = hdv & ~7;
	const float cap = sh->softcap;
	float *scores = scratch; // [group][rows]
	float *vf = scores + (size_t)group * rows;
	for (int g = 0; g < sh->n_head_kv; g++) {
		const float *qg = q + (size_t)g * group * hd;
		const uint16_t *kg = k + (size_t)g * hd, *vg = v + (size_t)g * hdv;
		// scores: the same bits as attn_ref's (same lanes, same fold)
		for (int h0 = 0; h0 < group; h0 += HB) {
			const int nh = group - h0 < HB ? group - h0 : HB;
			for (int j = first; j <= last; j++) {
				const uint16_t *kj = kg + (size_t)j * sh->k_stride;
				__m256 acc[HB];
				for (int t = 0; t < HB; t++)
					acc[t] = _mm256_setzero_ps();
				for (int i = 0; i < hd8; i += 8) {
					__m256 kv = load_h8(kj + i);
					for (int t = 0; t < nh; t++)
						acc[t] = _mm256_fmadd_ps(_mm256_loadu_ps(qg + (size_t)(h0 + t) * hd + i), kv,
						                         acc[t]);
				}
				for (int t = 0; t < nh; t++) {
					const float *qh = qg + (size_t)(h0 + t) * hd;
					float s = fold_v(acc[t]);
					for (int i = hd8; i < hd; i++)
						s = fmaf(qh[i], ad_fp16_to_f32(kj[i]), s);
					scores[(size_t)(h0 + t) * rows + (j - first)] = s * sh->scale;
				}
			}
		}
		for (int t = 0; t < group; t++) {
			float *sc = scores + (size_t)t * rows;
			if (cap > 0)
				for (int r = 0; r < rows; r++)
					sc[r] = tanhf(sc[r] * (1.0f / cap)) * cap;
			float mx = -INFINITY;
			for (int r = 0; r < rows; r++)
				mx = sc[r] > mx ? sc[r] : mx;
			__m256 vmx = _mm256_set1_ps(mx), vs = _mm256_setzero_ps();
			int r = 0;
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
		// P·V: each value row converted once, added into every head of the group
		for (int j = first; j <= last; j++) {
			const uint16_t *vj = vg + (size_t)j * sh->v_stride;
			for (int d = 0; d < hdv8; d += 8)
				_mm256_storeu_ps(vf + d, load_h8(vj + d));
			for (int d = hdv8; d < hdv; d++)
				vf[d] = ad_fp16_to_f32(vj[d]);
			for (int t = 0; t < group; t++) {
				float *o = out + (size_t)(g * group + t) * hdv;
				const float p = scores[(size_t)t * rows + (j - first)];
				__m256 vp = _mm256_set1_ps(p);
				for (int d = 0; d < hdv8; d += 8)
					_mm256_storeu_ps(o + d, _mm256_fmadd_ps(vp, _mm256_loadu_ps(vf + d),
					                                        _mm256_loadu_ps(o + d)));
				for (int d = hdv8; d < hdv; d++)
					o[d] = fmaf(p, vf[d], o[d]);
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
attn_fast(const struct attn_shape *sh, const float *q, const uint16_t *k, const uint16_t *v, int first,
          int last, float *out, float *scratch)
{
#ifdef AD_FP16_X86
	if (attn_have_simd()) {
		attn_simd(sh, q, k, v, first, last, out, scratch);
		return;
	}
#endif
	attn_ref(sh, q, k, v, first, last, out, scratch);
}
