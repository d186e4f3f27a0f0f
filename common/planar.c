#include "planar.h"

#include <stdint.h>
#include <string.h>

#include "fp16.h"
#include "pool.h"

// channels [c0, c1) of columns [j0, j1)
static void
gather_part(const uint8_t *base, size_t ps, float *x, size_t ld, size_t c0, size_t c1, size_t j0, size_t j1)
{
	for (size_t c = c0; c < c1; c++)
		for (size_t j = j0; j < j1; j++) {
			uint16_t h;
			memcpy(&h, base + c * ps + j * 2, 2);
			x[j * ld + c] = ad_fp16_to_f32(h);
		}
}

static void
scatter_part(uint8_t *base, size_t ps, const float *x, size_t ld, size_t c0, size_t c1, size_t j0, size_t j1)
{
	for (size_t c = c0; c < c1; c++)
		for (size_t j = j0; j < j1; j++) {
			uint16_t h = ad_f32_to_fp16(x[j * ld + c]);
			memcpy(base + c * ps + j * 2, &h, 2);
		}
}

void
ad_planar_gather_ref(const void *base, size_t ps, float *x, size_t C, size_t ld, size_t ncols)
{
	gather_part(base, ps, x, ld, 0, C, 0, ncols);
}

void
ad_planar_scatter_ref(void *base, size_t ps, const float *x, size_t C, size_t ld, size_t ncols)
{
	scatter_part(base, ps, x, ld, 0, C, 0, ncols);
}

#ifdef AD_FP16_X86
#define PL_TARGET __attribute__((target("avx2,f16c")))

PL_TARGET static inline void
transpose8(__m256 r[8])
{
	__m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
	__m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
	__m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
	__m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
	__m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
	__m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
	__m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
	__m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
	r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
	r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
	r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
	r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
	r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
	r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
	r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
	r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// the first n (1..8) fp16 of v to dst
PL_TARGET static inline void
store_ph(uint8_t *dst, __m128i v, size_t n)
{
	if (n == 8) {
		_mm_storeu_si128((__m128i *)dst, v);
		return;
	}
	if (n & 4) {
		_mm_storel_epi64((__m128i *)dst, v);
		v = _mm_srli_si128(v, 8);
		dst += 8;
	}
	if (n & 2) {
		uint32_t w = (uint32_t)_mm_cvtsi128_si32(v);
		memcpy(dst, &w, 4);
		v = _mm_srli_si128(v, 4);
		dst += 4;
	}
	if (n & 1) {
		uint16_t h = (uint16_t)_mm_extract_epi16(v, 0);
		memcpy(dst, &h, 2);
	}
}

// 8 channels x 8 columns per block. A block's 16-byte loads stay inside
// each channel's plane (columns past ncols are read, converted and
// dropped); a last block that would cross a plane's end (a width that is
// not a multiple of 8, above 32) goes the plain way.
PL_TARGET static void
gather_simd(const uint8_t *base, size_t ps, float *x, size_t C, size_t ld, size_t ncols)
{
	size_t C8 = C / 8 * 8;
	for (size_t c0 = 0; c0 < C8; c0 += 8)
		for (size_t j0 = 0; j0 < ncols; j0 += 8) {
			if (j0 * 2 + 16 > ps) {
				gather_part(base, ps, x, ld, c0, c0 + 8, j0, ncols);
				break;
			}
			size_t n = ncols - j0 < 8 ? ncols - j0 : 8;
			__m256 r[8];
			for (int k = 0; k < 8; k++)
				r[k] = _mm256_cvtph_ps(
					_mm_loadu_si128((const __m128i *)(base + (c0 + k) * ps + j0 * 2)));
			transpose8(r);
			for (size_t k = 0; k < n; k++)
				_mm256_storeu_ps(x + (j0 + k) * ld + c0, r[k]);
		}
	gather_part(base, ps, x, ld, C8, C, 0, ncols);
}

PL_TARGET static void
scatter_simd(uint8_t *base, size_t ps, const float *x, size_t C, size_t ld, size_t ncols)
{
	size_t C8 = C / 8 * 8;
	for (size_t c0 = 0; c0 < C8; c0 += 8)
		for (size_t j0 = 0; j0 < ncols; j0 += 8) {
			size_t n = ncols - j0 < 8 ? ncols - j0 : 8;
			__m256 r[8];
			for (size_t k = 0; k < 8; k++)
				r[k] = k < n ? _mm256_loadu_ps(x + (j0 + k) * ld + c0) : _mm256_setzero_ps();
			transpose8(r);
			for (int k = 0; k < 8; k++)
				store_ph(base + (c0 + k) * ps + j0 * 2,
				         _mm256_cvtps_ph(r[k], _MM_FROUND_TO_NEAREST_INT), n);
		}
	scatter_part(base, ps, x, ld, C8, C, 0, ncols);
}

// one column: channel c is the first fp16 of plane c, 8 converted at once
// (at an LM head's 49152 channels the plain conversions cost a tenth of
// the conv). Every channel is a line of its own (two, with the adjacent
// line the hardware fetches along), so the lines PL_AHEAD channels on are
// asked for early by a scatter (for ownership: it writes them): 151936
// channels took 2.2-2.5 ms without, 1.4-1.5 with. A gather gained nothing
// from the same prefetch (1.4-1.7 ms either way), so it has none
#define PL_AHEAD 16

PL_TARGET static void
scatter1_simd(uint8_t *base, size_t ps, const float *x, size_t C)
{
	size_t C8 = C / 8 * 8;
	for (size_t c0 = 0; c0 < C8; c0 += 8) {
		if (c0 + PL_AHEAD + 8 <= C)
			for (int k = 0; k < 8; k++)
				_mm_prefetch((const char *)(base + (c0 + PL_AHEAD + (size_t)k) * ps), _MM_HINT_ET0);
		uint16_t h[8];
		_mm_storeu_si128((__m128i *)h, _mm256_cvtps_ph(_mm256_loadu_ps(x + c0), _MM_FROUND_TO_NEAREST_INT));
		for (int k = 0; k < 8; k++)
			memcpy(base + (c0 + (size_t)k) * ps, &h[k], 2);
	}
	scatter_part(base, ps, x, C, C8, C, 0, 1);
}

static inline uint16_t
ld16(const uint8_t *p)
{
	uint16_t h;
	memcpy(&h, p, 2);
	return h;
}

PL_TARGET static void
gather1_simd(const uint8_t *base, size_t ps, float *x, size_t C)
{
	size_t C8 = C / 8 * 8;
	for (size_t c0 = 0; c0 < C8; c0 += 8) {
		__m128i v = _mm_setzero_si128();
		v = _mm_insert_epi16(v, ld16(base + (c0 + 0) * ps), 0);
		v = _mm_insert_epi16(v, ld16(base + (c0 + 1) * ps), 1);
		v = _mm_insert_epi16(v, ld16(base + (c0 + 2) * ps), 2);
		v = _mm_insert_epi16(v, ld16(base + (c0 + 3) * ps), 3);
		v = _mm_insert_epi16(v, ld16(base + (c0 + 4) * ps), 4);
		v = _mm_insert_epi16(v, ld16(base + (c0 + 5) * ps), 5);
		v = _mm_insert_epi16(v, ld16(base + (c0 + 6) * ps), 6);
		v = _mm_insert_epi16(v, ld16(base + (c0 + 7) * ps), 7);
		_mm256_storeu_ps(x + c0, _mm256_cvtph_ps(v));
	}
	gather_part(base, ps, x, C, C8, C, 0, 1);
}
#endif

void
ad_planar_gather(const void *base, size_t ps, float *x, size_t C, size_t ld, size_t ncols)
{
#ifdef AD_FP16_X86
	if (ad_cpu_simd()) {
		if (ncols == 1)
			gather1_simd(base, ps, x, C);
		else
			gather_simd(base, ps, x, C, ld, ncols);
		return;
	}
#endif
	ad_planar_gather_ref(base, ps, x, C, ld, ncols);
}

void
ad_planar_scatter(void *base, size_t ps, const float *x, size_t C, size_t ld, size_t ncols)
{
#ifdef AD_FP16_X86
	if (ad_cpu_simd()) {
		if (ncols == 1)
			scatter1_simd(base, ps, x, C);
		else
			scatter_simd(base, ps, x, C, ld, ncols);
		return;
	}
#endif
	ad_planar_scatter_ref(base, ps, x, C, ld, ncols);
}

struct plane_job {
	uint8_t *base;
	size_t ps, C, ld, ncols, per;
	float *x;
	int scatter, ref;
};

static void
plane_task(void *arg, size_t t, int worker)
{
	(void)worker;
	const struct plane_job *j = arg;
	size_t c0 = t * j->per, c1 = c0 + j->per < j->C ? c0 + j->per : j->C;
	if (c0 >= c1)
		return;
	uint8_t *b = j->base + c0 * j->ps;
	if (j->scatter && j->ref)
		ad_planar_scatter_ref(b, j->ps, j->x + c0, c1 - c0, j->ld, j->ncols);
	else if (j->scatter)
		ad_planar_scatter(b, j->ps, j->x + c0, c1 - c0, j->ld, j->ncols);
	else if (j->ref)
		ad_planar_gather_ref(b, j->ps, j->x + c0, c1 - c0, j->ld, j->ncols);
	else
		ad_planar_gather(b, j->ps, j->x + c0, c1 - c0, j->ld, j->ncols);
}

// a few ranges per thread (a woken worker may start late), each a
// multiple of 8 channels (the fast loops' blocks); a prefill chunk's
// surfaces too: 64 columns of 1536 or 4864 channels were scattered by one
// thread while the other waited, 2.6-3.8% of the eval's CPU time (perf);
// on the pool, two threads, best of 10, Qwen2.5's FFN evals +2-3%,
// SmolLM2's within the noise. A scatter of a prefill chunk (PLANE_WIDE
// columns or more) takes one range a thread, in the order of the
// threads' ranges in the emu's wide convs (the pool's caller claims the
// first), so that each thread reads the rows of y it has just written
// (bench-emu -p avx512 -q on a Zen 5, over those convs alone, 8 rounds
// alternating: +1 to +5% at the four shapes)
#define PLANE_WIDE 32
static void
plane_run(struct ad_pool *p, struct plane_job *j)
{
	size_t nt = 1;
	if (p && (j->C >= AD_PLANAR_PAR_CHANNELS || j->C * j->ncols >= AD_PLANAR_PAR_VALUES))
		nt = (size_t)ad_pool_threads(p) * (j->scatter && j->ncols >= PLANE_WIDE ? 1 : 4);
	j->per = (j->C + nt - 1) / nt;
	j->per = (j->per + 7) / 8 * 8;
	nt = (j->C + j->per - 1) / j->per;
	if (nt < 2)
		plane_task(j, 0, 0);
	else
		ad_pool_run(p, plane_task, j, nt);
}

void
ad_planar_gather_pool(struct ad_pool *p, const void *base, size_t ps, float *x, size_t C, size_t ld, size_t ncols,
                      int ref)
{
	struct plane_job j = {(uint8_t *)(uintptr_t)base, ps, C, ld, ncols, 0, x, 0, ref};
	plane_run(p, &j);
}

void
ad_planar_scatter_pool(struct ad_pool *p, void *base, size_t ps, const float *x, size_t C, size_t ld, size_t ncols,
                       int ref)
{
	struct plane_job j = {base, ps, C, ld, ncols, 0, (float *)(uintptr_t)x, 1, ref};
	plane_run(p, &j);
}
