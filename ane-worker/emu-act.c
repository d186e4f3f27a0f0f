// emu-act.c - the emu's sigmoid and the fused FFN gate (emu.h).
//
// The sigmoid is 1 / (1 + exp(-a)) with an exp of our own: the argument
// clamped to [-88, 88] (NaN kept), n = rint(t log2 e), r = t - n ln 2 in two
// FMAs (Cody-Waite), Cephes' degree-6 polynomial for exp(r) in FMAs, and
// 2^n from its exponent bits. It is within 2 ulp of the true exp over the
// range; past the clamp the sigmoid is 0 or 1 to far below an fp16 step
// (the emu rounds every op's result to fp16). The plain-C twin performs the
// very same float operations in the same order (fmaf for each FMA, the same
// min/max on NaN), so the AVX2 and AVX-512 paths give its bits exactly;
// test-emu compares them on every fp16 value and special cases.
//
// libm's expf was here before: one call per value, scalar, 3-5 ns each,
// which made the gate of a 64-column FFN (98,304 values on SmolLM2) a
// visible share of a prefill.
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "emu.h"
#include "fp16.h"

#define EXP_HI 88.0f
#define LOG2E 1.44269504088896341f
#define LN2_HI 0.693359375f
#define LN2_LO -2.12194440e-4f
#define P0 1.9875691500E-4f
#define P1 1.3981999507E-3f
#define P2 8.3334519073E-3f
#define P3 4.1665795894E-2f
#define P4 1.6666665459E-1f
#define P5 5.0000001201E-1f

// what _mm_min_ps(a, b) / _mm_max_ps(a, b) return: b when either is NaN
static inline float
min_ps1(float a, float b)
{
	return a < b ? a : b;
}

static inline float
max_ps1(float a, float b)
{
	return a > b ? a : b;
}

static inline float
exp_ref(float t)
{
	t = min_ps1(EXP_HI, t); // NaN in t stays (the second operand)
	t = max_ps1(-EXP_HI, t);
	float n = rintf(t * LOG2E);
	float r = fmaf(n, -LN2_HI, t);
	r = fmaf(n, -LN2_LO, r);
	float p = fmaf(P0, r, P1);
	p = fmaf(p, r, P2);
	p = fmaf(p, r, P3);
	p = fmaf(p, r, P4);
	p = fmaf(p, r, P5);
	float r2 = r * r;
	float e = fmaf(p, r2, r) + 1.0f;
	// 2^n from its bits; n outside int32 (NaN) as cvtps2dq has it
	int32_t ni = isnan(n) ? INT32_MIN : (int32_t)n;
	uint32_t bits = ((uint32_t)ni + 127u) << 23;
	float s;
	memcpy(&s, &bits, 4);
	return e * s;
}

static inline float
round16(float v)
{
	return ad_fp16_to_f32(ad_f32_to_fp16(v));
}

static void
sigmoid_ref(const float *a, float *y, size_t n)
{
	for (size_t i = 0; i < n; i++)
		y[i] = 1.0f / (1.0f + exp_ref(0.0f - a[i]));
}

static void
gate_ref(const float *g, const float *u, float *h, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		float s = round16(1.0f / (1.0f + exp_ref(0.0f - g[i])));
		s = round16(g[i] * s);
		h[i] = round16(s * u[i]);
	}
}

#ifdef AD_FP16_X86
#include <immintrin.h>

#define T2 __attribute__((target("avx2,fma,f16c")))
#define T5 __attribute__((target("avx512f,avx2,fma,f16c")))

T2 static inline __m256
exp8(__m256 t)
{
	t = _mm256_min_ps(_mm256_set1_ps(EXP_HI), t);
	t = _mm256_max_ps(_mm256_set1_ps(-EXP_HI), t);
	__m256 n =
		_mm256_round_ps(_mm256_mul_ps(t, _mm256_set1_ps(LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_HI), t);
	r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_LO), r);
	__m256 p = _mm256_fmadd_ps(_mm256_set1_ps(P0), r, _mm256_set1_ps(P1));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P2));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P3));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P4));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(P5));
	__m256 r2 = _mm256_mul_ps(r, r);
	__m256 e = _mm256_add_ps(_mm256_fmadd_ps(p, r2, r), _mm256_set1_ps(1.0f));
	__m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
	return _mm256_mul_ps(e, _mm256_castsi256_ps(bits));
}

T2 static inline __m256
sig8(__m256 a)
{
	__m256 one = _mm256_set1_ps(1.0f);
	return _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), a))));
}

T2 static inline __m256
r16_8(__m256 v)
{
	return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

T2 static void
sigmoid_avx2(const float *a, float *y, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(y + i, sig8(_mm256_loadu_ps(a + i)));
	sigmoid_ref(a + i, y + i, n - i);
}

T2 static void
gate_avx2(const float *g, const float *u, float *h, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 gv = _mm256_loadu_ps(g + i);
		__m256 s = r16_8(sig8(gv));
		s = r16_8(_mm256_mul_ps(gv, s));
		_mm256_storeu_ps(h + i, r16_8(_mm256_mul_ps(s, _mm256_loadu_ps(u + i))));
	}
	gate_ref(g + i, u + i, h + i, n - i);
}

T5 static inline __m512
exp16(__m512 t)
{
	t = _mm512_min_ps(_mm512_set1_ps(EXP_HI), t);
	t = _mm512_max_ps(_mm512_set1_ps(-EXP_HI), t);
	__m512 n = _mm512_roundscale_ps(_mm512_mul_ps(t, _mm512_set1_ps(LOG2E)),
	                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LN2_HI), t);
	r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LN2_LO), r);
	__m512 p = _mm512_fmadd_ps(_mm512_set1_ps(P0), r, _mm512_set1_ps(P1));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(P2));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(P3));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(P4));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(P5));
	__m512 r2 = _mm512_mul_ps(r, r);
	__m512 e = _mm512_add_ps(_mm512_fmadd_ps(p, r2, r), _mm512_set1_ps(1.0f));
	__m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
	return _mm512_mul_ps(e, _mm512_castsi512_ps(bits));
}

T5 static inline __m512
sig16(__m512 a)
{
	__m512 one = _mm512_set1_ps(1.0f);
	return _mm512_div_ps(one, _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), a))));
}

T5 static inline __m512
r16_16(__m512 v)
{
	return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

T5 static void
sigmoid_avx512(const float *a, float *y, size_t n)
{
	size_t i = 0;
	for (; i + 16 <= n; i += 16)
		_mm512_storeu_ps(y + i, sig16(_mm512_loadu_ps(a + i)));
	sigmoid_ref(a + i, y + i, n - i);
}

T5 static void
gate_avx512(const float *g, const float *u, float *h, size_t n)
{
	size_t i = 0;
	for (; i + 16 <= n; i += 16) {
		__m512 gv = _mm512_loadu_ps(g + i);
		__m512 s = r16_16(sig16(gv));
		s = r16_16(_mm512_mul_ps(gv, s));
		_mm512_storeu_ps(h + i, r16_16(_mm512_mul_ps(s, _mm512_loadu_ps(u + i))));
	}
	gate_ref(g + i, u + i, h + i, n - i);
}
#endif

// the path to run: level capped at what the CPU has
static int
act_level(int level)
{
	int cpu = emu_cpu_simd();
	if (level == EMU_SIMD_AUTO || level > cpu)
		level = cpu;
	return level;
}

void
emu_sigmoid(int level, const float *a, float *y, size_t n)
{
#ifdef AD_FP16_X86
	switch (act_level(level)) {
	case EMU_SIMD_AVX512:
		sigmoid_avx512(a, y, n);
		return;
	case EMU_SIMD_AVX2:
		sigmoid_avx2(a, y, n);
		return;
	default:
		break;
	}
#else
	(void)act_level;
#endif
	sigmoid_ref(a, y, n);
}

void
emu_gate(int level, const float *g, const float *u, float *h, size_t n)
{
#ifdef AD_FP16_X86
	switch (act_level(level)) {
	case EMU_SIMD_AVX512:
		gate_avx512(g, u, h, n);
		return;
	case EMU_SIMD_AVX2:
		gate_avx2(g, u, h, n);
		return;
	default:
		break;
	}
#endif
	gate_ref(g, u, h, n);
}
