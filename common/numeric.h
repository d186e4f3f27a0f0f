// numeric.h - the CPU arithmetic the reference engine (cpu-worker/ref.c)
// and the pipeline's engine (engine.c, attention.c, moe.c, deltanet.c,
// kb-exact.c) share, so that with kb_exact the two give the same bits.
// One copy of each: a change here changes both, which is the point.
//
// Dot products. The summation order of every dot product is fixed: eight
// lanes, lane j accumulating elements i ≡ j (mod 8) with one fused
// multiply-add each, then the lanes folded as
//   (l0+l4 + l2+l6) + (l1+l5 + l3+l7)                          (ad_fold8)
// and a tail of n % 8 elements added one by one with fmaf. That is the
// order of ggml's F32 matmul on 8-wide SIMD, so most dot products come out
// bit-identical to llama.cpp's; this matters where a later step rounds to
// fp16 (the GELU table), which turns last-bit differences into 1e-3 jumps.
// The lanes are a GNU vector (ad_v8f), so the loop is one SIMD multiply-add
// per 8 values on any target; the AVX2 kernels of attention.c keep the same
// lanes and fold in registers.
//
// RMSNorm: the squares summed in double in order, the mean rounded to
// float, the scale applied before the weight. GELU: ggml's CPU table (tanh
// form evaluated in fp32, indexed by the fp16 bits of x, holding fp16
// results). RoPE: the rotation of the pairs given the angles of
// model_rope_angles (common/model.h: theta as ggml's float running
// product). None of these allocate or fail.
#ifndef AD_NUMERIC_H
#define AD_NUMERIC_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "fp16.h"

typedef float ad_v8f __attribute__((vector_size(32)));

static inline ad_v8f
ad_load8(const float *p)
{
	ad_v8f v;
	memcpy(&v, p, sizeof v);
	return v;
}

// c + a·b per lane with one rounding (the compiler's contraction of a*b+c
// is not reliable enough to build the bit pattern on)
static inline ad_v8f
ad_madd8(ad_v8f a, ad_v8f b, ad_v8f c)
{
#if defined(__AVX__) && defined(__FMA__)
	return (ad_v8f)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#else
	ad_v8f r;
	for (int j = 0; j < 8; j++)
		r[j] = fmaf(a[j], b[j], c[j]);
	return r;
#endif
}

// the fold of the eight lanes: (l0+l4 + l2+l6) + (l1+l5 + l3+l7)
static inline float
ad_fold8(ad_v8f acc)
{
	float s0 = acc[4] + acc[0], s1 = acc[5] + acc[1], s2 = acc[6] + acc[2], s3 = acc[7] + acc[3];
	return (s0 + s2) + (s1 + s3);
}

// a·b over n floats in the 8-lane order
static inline float
ad_dot(const float *a, const float *b, int64_t n)
{
	ad_v8f acc = {0};
	int64_t i = 0;
	for (; i + 8 <= n; i += 8)
		acc = ad_madd8(ad_load8(a + i), ad_load8(b + i), acc);
	float s = ad_fold8(acc);
	for (; i < n; i++)
		s = fmaf(a[i], b[i], s);
	return s;
}

// y[n_out] = W[n_out][n_in] · x, every row ad_dot's sum (four rows at a
// time, so that four independent accumulators hide the multiply-add latency)
void ad_matvec(float *y, const float *w, const float *x, int64_t n_in, int64_t n_out);

// y = (x * (1 / sqrt(mean(x^2) + eps))) * w, the mean summed in double in
// eight lanes (ggml sums in one chain: the doubles may differ in their last
// bits, the float mean they round to had not once in 200,000 random rows
// of 576); y may be x
void ad_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps);

static inline float
ad_silu(float x)
{
	return x / (1.0f + expf(-x));
}

// GELU (tanh form) through ggml's fp16 table. ad_gelu_init fills the table
// (once per process, thread-safe; 256 KiB); call it before the first ad_gelu.
extern float ad_gelu_table[1 << 16];
void ad_gelu_init(void);

static inline float
ad_gelu(float x)
{
	if (x <= -10.0f)
		return 0.0f;
	if (x >= 10.0f)
		return x;
	return ad_gelu_table[ad_f32_to_fp16(x)];
}

// the gated linear unit of an FFN, in place: g[i] = act(g[i]) * u[i], act
// GELU (gelu != 0) or SiLU
static inline void
ad_glu(float *g, const float *u, int64_t n, int gelu)
{
	if (gelu)
		for (int64_t i = 0; i < n; i++)
			g[i] = ad_gelu(g[i]) * u[i];
	else
		for (int64_t i = 0; i < n; i++)
			g[i] = ad_silu(g[i]) * u[i];
}

// rotate the first n_rot values of each of n_heads heads of hd floats at
// v by the angles cs (cos, sin of pair i at cs[2i], cs[2i+1]); the pairs
// are (i, i + n_rot/2) when neox, else (2i, 2i+1)
static inline void
ad_rope(float *v, int64_t n_heads, int64_t hd, int64_t n_rot, int neox, const float *cs)
{
	const int64_t half = n_rot / 2;
	for (int64_t h = 0; h < n_heads; h++) {
		float *p = v + h * hd;
		for (int64_t i = 0; i < half; i++) {
			int64_t i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
			float c = cs[2 * i], s = cs[2 * i + 1];
			float x0 = p[i0], x1 = p[i1];
			p[i0] = x0 * c - x1 * s;
			p[i1] = x0 * s + x1 * c;
		}
	}
}

#endif
