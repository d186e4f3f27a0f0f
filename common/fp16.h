// fp16.h - exact conversions between float32 and IEEE half / bfloat16.
//
// Scalar functions are plain C and exact: fp16 -> f32 is lossless
// (subnormals, infinities, NaN payloads); f32 -> fp16 rounds to nearest,
// ties to even, overflowing to infinity. NaNs come out quiet with their
// payload kept, which is what the x86 F16C instructions do, so the row
// converters below give the same bits on either path. bf16 follows ggml:
// decode is a shift, encode rounds to nearest-even and forces NaN quiet.
//
// The row converters use F16C when the running CPU has it (checked at run
// time; no -march flag is needed to build) and have plain `_ref` twins.
#ifndef AD_FP16_H
#define AD_FP16_H

#include <stddef.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define AD_FP16_X86 1
#endif

static inline uint32_t
ad_f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static inline float
ad_bits_f32(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static inline float
ad_fp16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f;
	uint32_t man = h & 0x3ff;

	if (exp == 0x1f) // inf, or NaN made quiet
		return ad_bits_f32(sign | 0x7f800000 | (man ? 0x400000 | man << 13 : 0));
	if (exp == 0) {
		if (man == 0)
			return ad_bits_f32(sign);
		// subnormal: normalise the mantissa into an f32 exponent
		exp = 113;
		while (!(man & 0x400)) {
			man <<= 1;
			exp--;
		}
		return ad_bits_f32(sign | exp << 23 | (man & 0x3ff) << 13);
	}
	return ad_bits_f32(sign | (exp + 112) << 23 | man << 13);
}

static inline uint16_t
ad_f32_to_fp16(float f)
{
	uint32_t x = ad_f32_bits(f);
	uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
	x &= 0x7fffffff;

	if (x > 0x7f800000) // NaN: quiet, keep the top payload bits
		return sign | 0x7e00 | (uint16_t)((x >> 13) & 0x3ff);
	if (x >= 0x477ff000) // 65520 and up round to infinity
		return sign | 0x7c00;
	if (x >= 0x38800000) { // normal half
		uint32_t h = (x >> 13) - (112u << 10);
		uint32_t rem = x & 0x1fff;
		if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
			h++; // a carry into the exponent is still correct
		return sign | (uint16_t)h;
	}
	if (x <= 0x33000000) // at most 2^-25: rounds to zero (the tie is even)
		return sign;
	// subnormal half: value / 2^-24, rounded to nearest even
	uint32_t e = x >> 23;
	uint32_t m = (x & 0x7fffff) | 0x800000;
	uint32_t shift = 126 - e; // 14..24
	uint32_t h = m >> shift;
	uint32_t rem = m & ((1u << shift) - 1);
	uint32_t half = 1u << (shift - 1);
	if (rem > half || (rem == half && (h & 1)))
		h++;
	return sign | (uint16_t)h;
}

// SIMD levels of the project's fast kernels, in order: each includes the
// one before. AVX2 is AVX2 + FMA + F16C with the ymm state saved by the OS;
// AVX512 adds AVX-512 F, BW, DQ and VL with the zmm and mask state saved.
enum { AD_SIMD_REF = 0, AD_SIMD_AVX2 = 1, AD_SIMD_AVX512 = 2 };

static inline float
ad_bf16_to_f32(uint16_t h)
{
	return ad_bits_f32((uint32_t)h << 16);
}

static inline uint16_t
ad_f32_to_bf16(float f)
{
	uint32_t u = ad_f32_bits(f);
	if ((u & 0x7fffffff) > 0x7f800000)
		return (uint16_t)((u >> 16) | 64); // quiet NaN
	return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

static inline void
ad_fp16_to_f32_row_ref(const uint16_t *src, float *dst, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = ad_fp16_to_f32(src[i]);
}

static inline void
ad_f32_to_fp16_row_ref(const float *src, uint16_t *dst, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = ad_f32_to_fp16(src[i]);
}

#ifdef AD_FP16_X86
__attribute__((target("f16c,avx2"))) static inline void
ad_fp16_to_f32_row_f16c(const uint16_t *src, float *dst, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m128i h = _mm_loadu_si128((const __m128i *)(src + i));
		_mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
	}
	for (; i < n; i++)
		dst[i] = ad_fp16_to_f32(src[i]);
}

__attribute__((target("f16c,avx2"))) static inline void
ad_f32_to_fp16_row_f16c(const float *src, uint16_t *dst, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
		_mm_storeu_si128((__m128i *)(dst + i), h);
	}
	for (; i < n; i++)
		dst[i] = ad_f32_to_fp16(src[i]);
}

// ad_cpu_level: the best AD_SIMD_* level this CPU and OS support. CPUID
// directly: clang 14 does not know __builtin_cpu_supports("f16c").
static inline int
ad_cpu_level(void)
{
	static int have = -1;
	int h = __atomic_load_n(&have, __ATOMIC_RELAXED);
	if (h < 0) {
		unsigned a, b, c, d, c1;
		__asm__ __volatile__("cpuid" : "=a"(a), "=b"(b), "=c"(c1), "=d"(d) : "a"(0), "c"(0));
		unsigned max = a;
		__asm__ __volatile__("cpuid" : "=a"(a), "=b"(b), "=c"(c1), "=d"(d) : "a"(1), "c"(0));
		b = 0;
		if (max >= 7)
			__asm__ __volatile__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
		int f16c = (c1 >> 29) & 1, avx = (c1 >> 28) & 1, osxsave = (c1 >> 27) & 1, fma = (c1 >> 12) & 1;
		int avx2 = (b >> 5) & 1;
		// AVX-512 F (16), DQ (17), BW (30), VL (31)
		int avx512 = (b & 0xc0030000u) == 0xc0030000u;
		unsigned xcr0 = 0;
		if (osxsave) {
			unsigned hi;
			__asm__ __volatile__("xgetbv" : "=a"(xcr0), "=d"(hi) : "c"(0));
		}
		h = AD_SIMD_REF;
		if (f16c && fma && avx && avx2 && (xcr0 & 6) == 6) // the OS saves the ymm registers
			h = AD_SIMD_AVX2;
		if (h == AD_SIMD_AVX2 && avx512 && (xcr0 & 0xe0) == 0xe0) // opmask, zmm0-15 hi, zmm16-31
			h = AD_SIMD_AVX512;
		__atomic_store_n(&have, h, __ATOMIC_RELAXED);
	}
	return h;
}

// ad_cpu_amd_family: the CPU's family (19h: Zen 3 and 4, 1Ah: Zen 5) when
// it is AMD's, else 0
static inline unsigned
ad_cpu_amd_family(void)
{
	unsigned a, b, c, d;
	__asm__ __volatile__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0), "c"(0));
	if (!(b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u)) // "AuthenticAMD"
		return 0;
	__asm__ __volatile__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
	unsigned family = (a >> 8) & 0xf;
	if (family == 0xf)
		family += (a >> 20) & 0xff;
	return family;
}

// ad_cpu_avx512_halved: 1 when the CPU runs AVX-512 but executes a 512-bit
// operation as two 256-bit halves: AMD family 19h (Zen 4; its Zen 3 has no
// AVX-512). A kernel bound by its widening ops may then do better on AVX2
// (emu-i8.c). Zen 5 (family 1Ah) and Intel's run them whole.
static inline int
ad_cpu_avx512_halved(void)
{
	return ad_cpu_level() >= AD_SIMD_AVX512 && ad_cpu_amd_family() == 0x19;
}

// ad_cpu_simd: the CPU has at least AVX2, FMA and F16C (the set every fast
// kernel of the project is written for)
static inline int
ad_cpu_simd(void)
{
	return ad_cpu_level() >= AD_SIMD_AVX2;
}

static inline int
ad_have_f16c(void)
{
	return ad_cpu_simd();
}
#else
static inline int
ad_cpu_level(void)
{
	return AD_SIMD_REF;
}

static inline int
ad_cpu_avx512_halved(void)
{
	return 0;
}

static inline unsigned
ad_cpu_amd_family(void)
{
	return 0;
}
#endif

// ANEDVD_SIMD, the cap on every fast path's level (ref, avx2, avx512): the
// AD_SIMD_* it names, -1 when it is unset or empty, -2 when it names none
static inline int
ad_simd_env(void)
{
	const char *e = getenv("ANEDVD_SIMD");
	if (!e || !*e)
		return -1;
	return !strcmp(e, "ref")      ? AD_SIMD_REF
	       : !strcmp(e, "avx2")   ? AD_SIMD_AVX2
	       : !strcmp(e, "avx512") ? AD_SIMD_AVX512
	                              : -2;
}

// the best level this CPU has, capped by ANEDVD_SIMD (a value that names no
// level caps nothing here: the programs that take it refuse it at start)
static inline int
ad_simd_level(void)
{
	const int l = ad_cpu_level(), cap = ad_simd_env();
	return cap >= 0 && cap < l ? cap : l;
}

static inline void
ad_fp16_to_f32_row(const uint16_t *src, float *dst, size_t n)
{
#ifdef AD_FP16_X86
	if (ad_have_f16c()) {
		ad_fp16_to_f32_row_f16c(src, dst, n);
		return;
	}
#endif
	ad_fp16_to_f32_row_ref(src, dst, n);
}

static inline void
ad_f32_to_fp16_row(const float *src, uint16_t *dst, size_t n)
{
#ifdef AD_FP16_X86
	if (ad_have_f16c()) {
		ad_f32_to_fp16_row_f16c(src, dst, n);
		return;
	}
#endif
	ad_f32_to_fp16_row_ref(src, dst, n);
}

#endif
