// emu-i8.c - the emu's int8-weight conv kernels (emu.h, "int8 weights").
//
// Weights stay one byte each, one fp16 scale per row (widened to fp32 as
// it is read, exactly), in 16-row panels whose steps are interleaved four panels at a
// time: quad g holds panels 4g .. 4g+3 as [cin][4][16] int8, so step i of
// the quad's 64 rows is one 64-byte line and the quads follow one another
// ([ceil(cout/64)][cin][64], rows past cout zero). A one-column pass over
// panels [p0, p1) then reads one sequential stream, a line per step with
// four FMA chains in it, instead of four streams of 16 bytes a step (with
// short panels, cin = 576 or 896, the four streams restarted every few
// KiB and ran at 13-18 GB/s from DRAM against 27-29 for a plain read).
// Three kernels compute the same bits:
//   emu_conv_i8_ref     plain C
//   emu_conv_i8_avx2    AVX2 + FMA (+ F16C for the final rounding)
//   emu_conv_i8_avx512  AVX-512 F: one zmm register is one panel step
// picked at run time by emu_conv_i8_fast (cpuid; no -march flag needed).
// From EMU_I8_WIDE_COLS columns on, the AVX2 kernel widens the panels to
// fp16 once and runs emu.c's fp16 tiles (emu_conv_i8_wide); on AVX-512
// the calls of EMU_I8_X512_COLS columns or more go to emu_conv_i8_x512
// (emu.c), over x packed, whose wide calls widen to fp32 once a pair and
// whose narrower ones run the tiles below (emu_conv_i8_x512_narrow).
//
// Cost: widening a panel step (16 int8 to 16 fp32: vpmovsxbd + vcvtdq2ps)
// is one op more per 16 weights than fp16's vcvtph2ps, and on Zen 4 the
// 512-bit widening issues every other cycle: one column on one thread
// streams 25-27 GB/s of int8 from L3 (fp16: 72 GB/s of fp16), so two
// threads still outrun the memory (~30 GB/s here), but a machine short of
// CPU sees less than the 2x of the bytes. (An in-lane vpshufb widening
// with the 2^-24 folded into the scales, and 8 panels per one-column tile,
// were measured and were no better.) On Zen 4 the AVX2 tile (two 256-bit
// widenings a step) outran the AVX-512 one on one column: bench-emu-i8,
// two threads, 57 against 49 GB/s warm and 21.5-24.5 against 17.9-20.8
// from DRAM on 896x4864; so one column runs it there
// (emu_i8_one_col_avx2).
//
// Numerics, shared by all three: output (o, j) is
//   acc = 0; for i = 0 .. cin-1: acc = fma((float)q[o][i], x[j][i], acc)
//   y[j][o] = fp16(scale[o] * acc)        (fp32 product, then fp16 rounding)
// (float)q is exact and so is every product before its one rounding in the
// FMA; the chain's order depends on neither the blocking, the number of
// columns nor the threads, so the kernels agree bit for bit, and a column
// gives the same bits alone (decode) or among others (prefill).
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"
#include "fp16.h"

#define PANEL 16
#define QUAD 4              // panels interleaved
#define QROW (QUAD * PANEL) // bytes of a quad's step: one line
_Static_assert(QROW == EMU_I8_QUAD_ROWS, "emu.h's quad rows");

size_t
emu_i8_panel_bytes(size_t cout, size_t cin)
{
	return (cout + QROW - 1) / QROW * QROW * cin;
}

void
emu_i8_pack(const int8_t *q, size_t cout, size_t cin, int8_t *panels)
{
	size_t nq = (cout + QROW - 1) / QROW;
	for (size_t g = 0; g < nq; g++) {
		int8_t *dst = panels + g * cin * QROW;
		for (size_t r = 0; r < QROW; r++) {
			size_t o = g * QROW + r;
			for (size_t i = 0; i < cin; i++)
				dst[i * QROW + r] = o < cout ? q[o * cin + i] : 0;
		}
	}
}

void
emu_i8_pack_quads(const int8_t *q, size_t cout, size_t cin, int8_t *panels, size_t g0, size_t g1)
{
	// 64 steps at a time: the block's 4 KiB of the quad stay in L1 while
	// its 64 rows are read (a whole quad at cin 896 is 56 KiB)
	for (size_t g = g0; g < g1; g++) {
		int8_t *dst = panels + g * cin * QROW;
		for (size_t i0 = 0; i0 < cin; i0 += 64) {
			size_t i1 = i0 + 64 < cin ? i0 + 64 : cin;
			for (size_t r = 0; r < QROW; r++) {
				size_t o = g * QROW + r;
				for (size_t i = i0; i < i1; i++)
					dst[i * QROW + r] = o < cout ? q[o * cin + i] : 0;
			}
		}
	}
}

static inline float
round16(float v)
{
	return ad_fp16_to_f32(ad_f32_to_fp16(v));
}

void
emu_conv_i8_ref(const int8_t *panels, const uint16_t *scale, size_t cout, size_t cin, const float *x, size_t ncols,
                float *y, size_t p0, size_t p1)
{
	for (size_t p = p0; p < p1; p++) {
		for (size_t j = 0; j < ncols; j++) {
			const float *xj = x + j * cin;
			float acc[PANEL] = {0};
			for (size_t i = 0; i < cin; i++) {
				const int8_t *w = emu_i8_step(panels, cin, p, i);
				for (size_t r = 0; r < PANEL; r++)
					acc[r] = fmaf((float)w[r], xj[i], acc[r]);
			}
			for (size_t r = 0; r < PANEL && p * PANEL + r < cout; r++)
				y[j * cout + p * PANEL + r] = round16(ad_fp16_to_f32(scale[p * PANEL + r]) * acc[r]);
		}
	}
}

// ANEDVD_I8_ONE_COL: 1 avx2, 0 avx512, -1 unset or empty, -2 anything else
int
emu_i8_one_col_env(void)
{
	const char *e = getenv("ANEDVD_I8_ONE_COL");
	return !e || !*e ? -1 : !strcmp(e, "avx2") ? 1 : !strcmp(e, "avx512") ? 0 : -2;
}

#ifdef AD_FP16_X86
int
emu_i8_isa(void)
{
	int l = ad_cpu_level();
	return l == AD_SIMD_AVX512 ? 2 : l == AD_SIMD_AVX2 ? 1 : 0;
}

int
emu_i8_one_col_avx2(void)
{
	static int v = -1;
	int r = __atomic_load_n(&v, __ATOMIC_RELAXED);
	if (r < 0) {
		r = emu_i8_one_col_env();
		if (r < 0) // unset (emu_open refuses a bad value)
			r = ad_cpu_avx512_halved();
		__atomic_store_n(&v, r, __ATOMIC_RELAXED);
	}
	return r && emu_i8_isa() >= 1;
}

// Both SIMD kernels: column blocks of at most NC columns, as even as
// possible; a tile is MP consecutive panels of one quad times a block, its
// accumulators in registers for the whole cin loop; each panel step's 16
// int8 weights are widened once and used for every column of the block.
// Panels go in groups whose weights stay in L2 while the column blocks
// pass over them (one column: one pass, no grouping). One column
// prefetches its stream into L2, ahead steps (lines) on: emu_prefetch_steps.
#define GROUP 8

// ---- AVX2: a panel step is two ymm (rows 0-7, 8-15); 2 * MP * NC <= 12
#define T2 __attribute__((target("avx2,fma,f16c")))

T2 static inline __attribute__((always_inline)) void
tile2(const int8_t *w, size_t cin, const float *x, float *y, size_t cout, size_t left, const uint16_t *sc, size_t ahead,
      const int mp, const int nc)
{
	__m256 acc[12];
#pragma GCC unroll 12
	for (int a = 0; a < 2 * mp * nc; a++)
		acc[a] = _mm256_setzero_ps();
	const int nta = emu_prefetch_nta(1);
	for (size_t i = 0; i < cin; i++) {
		if (ahead)
			emu_prefetch_line(w + (i + ahead) * QROW, nta);
#pragma GCC unroll 4
		for (int p = 0; p < mp; p++) {
			if (p > 0 && nc > 1) // re-broadcast x per panel (see emu.c: no spills)
				__asm__ volatile("" ::: "memory");
			// each half widened straight from memory (vpmovsxbd ymm, m64):
			// no byte shift for the upper half, one op less per step
			const int8_t *wp = w + i * QROW + (size_t)p * PANEL;
			__m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)wp)));
			__m256 hi =
				_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(wp + 8))));
#pragma GCC unroll 6
			for (int c = 0; c < nc; c++) {
				__m256 b = _mm256_broadcast_ss(x + (size_t)c * cin + i);
				acc[(2 * p) * nc + c] = _mm256_fmadd_ps(lo, b, acc[(2 * p) * nc + c]);
				acc[(2 * p + 1) * nc + c] = _mm256_fmadd_ps(hi, b, acc[(2 * p + 1) * nc + c]);
			}
		}
	}
#pragma GCC unroll 4
	for (int p = 0; p < mp; p++) {
		__m256 slo = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sc + p * PANEL)));
		__m256 shi = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sc + p * PANEL + 8)));
#pragma GCC unroll 6
		for (int c = 0; c < nc; c++) {
			__m256 lo = _mm256_mul_ps(slo, acc[(2 * p) * nc + c]);
			__m256 hi = _mm256_mul_ps(shi, acc[(2 * p + 1) * nc + c]);
			lo = _mm256_cvtph_ps(_mm256_cvtps_ph(lo, _MM_FROUND_TO_NEAREST_INT));
			hi = _mm256_cvtph_ps(_mm256_cvtps_ph(hi, _MM_FROUND_TO_NEAREST_INT));
			float *dst = y + (size_t)c * cout + (size_t)p * PANEL;
			size_t l = left - (size_t)p * PANEL;
			if (l >= PANEL) {
				_mm256_storeu_ps(dst, lo);
				_mm256_storeu_ps(dst + 8, hi);
			} else {
				float tmp[PANEL];
				_mm256_storeu_ps(tmp, lo);
				_mm256_storeu_ps(tmp + 8, hi);
				memcpy(dst, tmp, l * sizeof(float));
			}
		}
	}
}

typedef void tile_fn(const int8_t *w, size_t cin, const float *x, float *y, size_t cout, size_t left,
                     const uint16_t *sc, size_t ahead);

T2 void
emu_i8_panel_fp16(const int8_t *panels, size_t cin, size_t p, uint16_t *dst, size_t ld)
{
	for (size_t i = 0; i < cin; i++, dst += ld) {
		const int8_t *w = emu_i8_step(panels, cin, p, i);
		__m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)w)));
		__m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(w + 8))));
		_mm_storeu_si128((__m128i *)dst, _mm256_cvtps_ph(lo, _MM_FROUND_TO_NEAREST_INT));
		_mm_storeu_si128((__m128i *)(dst + 8), _mm256_cvtps_ph(hi, _MM_FROUND_TO_NEAREST_INT));
	}
}

#define TILE2(MP, NC)                                                                                                  \
	T2 static void t2_##MP##x##NC(const int8_t *w, size_t cin, const float *x, float *y, size_t cout, size_t left, \
	                              const uint16_t *sc, size_t ahead)                                                \
	{                                                                                                              \
		tile2(w, cin, x, y, cout, left, sc, ahead, MP, NC);                                                    \
	}
TILE2(1, 1)
TILE2(1, 2)
TILE2(1, 3)
TILE2(2, 1)
TILE2(2, 2)
TILE2(2, 3)
TILE2(3, 1)
TILE2(3, 2)
TILE2(4, 1)

static tile_fn *const tiles2[5][4] = {
	[1] = {NULL, t2_1x1, t2_1x2, t2_1x3},
	[2] = {NULL, t2_2x1, t2_2x2, t2_2x3},
	[3] = {NULL, t2_3x1, t2_3x2},
	[4] = {NULL, t2_4x1},
};

// ---- AVX-512: a panel step is one zmm; MP * NC <= 24 accumulators, 4
// weight vectors and a broadcast: 29 of the 32 registers
#define T5 __attribute__((target("avx512f,avx2,fma,f16c")))

// the sums acc[p * nc + c] of an mp x nc tile times their rows' scales,
// rounded to fp16; rows from left on are not written
T5 static inline __attribute__((always_inline)) void
store5(float *y, size_t cout, size_t left, const uint16_t *sc, const __m512 *acc, const int mp, const int nc)
{
#pragma GCC unroll 4
	for (int p = 0; p < mp; p++) {
		__m512 s = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(sc + p * PANEL)));
		size_t l = left - (size_t)p * PANEL;
		__mmask16 m = l >= PANEL ? (__mmask16)0xffff : (__mmask16)((1u << l) - 1);
#pragma GCC unroll 12
		for (int c = 0; c < nc; c++) {
			__m512 v = _mm512_mul_ps(s, acc[p * nc + c]);
			v = _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
			_mm512_mask_storeu_ps(y + (size_t)c * cout + (size_t)p * PANEL, m, v);
		}
	}
}

T5 static inline __attribute__((always_inline)) void
tile5(const int8_t *w, size_t cin, const float *x, float *y, size_t cout, size_t left, const uint16_t *sc, size_t ahead,
      const int mp, const int nc)
{
	__m512 acc[24];
#pragma GCC unroll 24
	for (int a = 0; a < mp * nc; a++)
		acc[a] = _mm512_setzero_ps();
	const int nta = emu_prefetch_nta(1);
	for (size_t i = 0; i < cin; i++) {
		__m512 wv[4];
		if (ahead)
			emu_prefetch_line(w + (i + ahead) * QROW, nta);
#pragma GCC unroll 4
		for (int p = 0; p < mp; p++)
			wv[p] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
				_mm_load_si128((const __m128i *)(w + i * QROW + (size_t)p * PANEL))));
#pragma GCC unroll 6
		for (int c = 0; c < nc; c++) {
			__m512 b = _mm512_set1_ps(x[(size_t)c * cin + i]);
#pragma GCC unroll 4
			for (int p = 0; p < mp; p++)
				acc[p * nc + c] = _mm512_fmadd_ps(wv[p], b, acc[p * nc + c]);
		}
	}
	store5(y, cout, left, sc, acc, mp, nc);
}

#define TILE5(MP, NC)                                                                                                  \
	T5 static void t5_##MP##x##NC(const int8_t *w, size_t cin, const float *x, float *y, size_t cout, size_t left, \
	                              const uint16_t *sc, size_t ahead)                                                \
	{                                                                                                              \
		tile5(w, cin, x, y, cout, left, sc, ahead, MP, NC);                                                    \
	}
#define TILE5_ROW(MP) TILE5(MP, 1) TILE5(MP, 2) TILE5(MP, 3) TILE5(MP, 4) TILE5(MP, 5) TILE5(MP, 6)
TILE5_ROW(1)
TILE5_ROW(2)
TILE5_ROW(3)
TILE5_ROW(4)

#define T5_ROW(MP)                                                                                                     \
	{                                                                                                              \
		NULL, t5_##MP##x1, t5_##MP##x2, t5_##MP##x3, t5_##MP##x4, t5_##MP##x5, t5_##MP##x6                     \
	}
static tile_fn *const tiles5[5][7] = {[1] = T5_ROW(1), [2] = T5_ROW(2), [3] = T5_ROW(3), [4] = T5_ROW(4)};

// the blocking both SIMD kernels share; maxc columns per block, tile mp
// panels for nc columns from mp_for[nc]. A deliberate twin of emu.c's
// conv_simd loop (the fp16 panels' blocking): the same column blocks and
// panel groups, each the hot loop of its weight type with its own tiles.
static void
conv_blocked(tile_fn *const *tab, size_t tabw, const int *mp_for, size_t maxc, const int8_t *panels,
             const uint16_t *scale, size_t cout, size_t cin, const float *x, size_t ncols, float *y, size_t p0,
             size_t p1)
{
	size_t nb = (ncols + maxc - 1) / maxc;
	size_t base = ncols / nb, extra = ncols % nb;
	size_t group = nb == 1 ? p1 - p0 : GROUP;
	size_t ahead = ncols == 1 ? emu_prefetch_steps(1) : 0;
	for (size_t p = p0; p < p1; p += group) {
		size_t pe = p1 - p > group ? p + group : p1;
		size_t j = 0;
		for (size_t b = 0; b < nb; b++) {
			size_t nc = base + (b < extra);
			size_t mp = (size_t)mp_for[nc];
			for (size_t q = p, m; q < pe; q += m) {
				// within one quad: its panels' steps share a line
				m = pe - q < mp ? pe - q : mp;
				if (m > QUAD - q % QUAD)
					m = QUAD - q % QUAD;
				tab[m * tabw + nc](emu_i8_step(panels, cin, q, 0), cin, x + j * cin,
				                   y + j * cout + q * PANEL, cout, cout - q * PANEL, scale + q * PANEL,
				                   ahead);
			}
			j += nc;
		}
	}
}

void
emu_conv_i8_avx2(const int8_t *panels, const uint16_t *scale, size_t cout, size_t cin, const float *x, size_t ncols,
                 float *y, size_t p0, size_t p1)
{
	if (ncols >= EMU_I8_WIDE_COLS && emu_conv_i8_wide(panels, scale, cout, cin, x, ncols, y, p0, p1, NULL) == 0)
		return;
	static const int mp_for[4] = {0, 4, 2, 2}; // dividing the quad
	conv_blocked(&tiles2[0][0], 4, mp_for, 3, panels, scale, cout, cin, x, ncols, y, p0, p1);
}

void
emu_conv_i8_avx512(const int8_t *panels, const uint16_t *scale, size_t cout, size_t cin, const float *x, size_t ncols,
                   float *y, size_t p0, size_t p1)
{
	static const int mp_for[7] = {0, 4, 4, 4, 4, 4, 4};
	conv_blocked(&tiles5[0][0], 7, mp_for, 6, panels, scale, cout, cin, x, ncols, y, p0, p1);
}

// ---- AVX-512 over packed x (emu_x512_pack): mp (1 or 2) panels of a
// quad by nc <= 12 columns, xp [cin][nc]; 24 accumulators, the broadcasts
// folded into the FMAs. One thread, 64 columns, whole GEMMs at the SmolLM2
// and Qwen2.5 FFN shapes, best of 20 by CPU time on an Intel Xeon (family
// 6 model 207): 2 x 11 141-144 GFLOP/s, the 4 x 6 tiles above 125-128
// (packed or not), the fp16 panels' 2 x 11 141-146, of a 174 peak. The
// int8 twin of emu.c's tile512, as tile5 is of its conv_simd tiles. From
// five column blocks on, emu.c's wide tiles take over (137 -> 161 GFLOP/s
// at 64 columns, Qwen2.5's FFN up).
T5 static inline __attribute__((always_inline)) void
tile5x(const int8_t *w, size_t cin, const float *xp, float *y, size_t cout, size_t left, const uint16_t *sc,
       const int mp, const int nc)
{
	__m512 acc[24];
#pragma GCC unroll 24
	for (int a = 0; a < mp * nc; a++)
		acc[a] = _mm512_setzero_ps();
	for (size_t i = 0; i < cin; i++) {
		const float *xi = xp + i * (size_t)nc;
#pragma GCC unroll 2
		for (int p = 0; p < mp; p++) {
			// each panel broadcasts x again from memory (see emu.c's
			// tile512: keeping nc broadcasts live across panels spills)
			if (p > 0)
				__asm__ volatile("" ::: "memory");
			__m512 wv = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
				_mm_load_si128((const __m128i *)(w + i * QROW + (size_t)p * PANEL))));
#pragma GCC unroll 12
			for (int c = 0; c < nc; c++)
				acc[p * nc + c] = _mm512_fmadd_ps(wv, _mm512_set1_ps(xi[c]), acc[p * nc + c]);
		}
	}
	store5(y, cout, left, sc, acc, mp, nc);
}

typedef void tile5x_fn(const int8_t *w, size_t cin, const float *xp, float *y, size_t cout, size_t left,
                       const uint16_t *sc);
#define TILE5X(MP, NC)                                                                                                 \
	T5 static void t5x_##MP##x##NC(const int8_t *w, size_t cin, const float *xp, float *y, size_t cout,            \
	                               size_t left, const uint16_t *sc)                                                \
	{                                                                                                              \
		tile5x(w, cin, xp, y, cout, left, sc, MP, NC);                                                         \
	}
#define TILE5X_ROW(MP)                                                                                                 \
	TILE5X(MP, 1)                                                                                                  \
	TILE5X(MP, 2)                                                                                                  \
	TILE5X(MP, 3)                                                                                                  \
	TILE5X(MP, 4)                                                                                                  \
	TILE5X(MP, 5)                                                                                                  \
	TILE5X(MP, 6)                                                                                                  \
	TILE5X(MP, 7) TILE5X(MP, 8) TILE5X(MP, 9) TILE5X(MP, 10) TILE5X(MP, 11) TILE5X(MP, 12)
TILE5X_ROW(1)
TILE5X_ROW(2)
#define T5X_ROW(MP)                                                                                                    \
	{                                                                                                              \
		NULL, t5x_##MP##x1, t5x_##MP##x2, t5x_##MP##x3, t5x_##MP##x4, t5x_##MP##x5, t5x_##MP##x6,              \
			t5x_##MP##x7, t5x_##MP##x8, t5x_##MP##x9, t5x_##MP##x10, t5x_##MP##x11, t5x_##MP##x12          \
	}
static tile5x_fn *const tiles5x[3][EMU_X512_COLS + 1] = {[1] = T5X_ROW(1), [2] = T5X_ROW(2)};

// column blocks [b0, b1) (emu_x512_blocks) of panels [p0, p1): a pair of
// panels of one quad passes every block, then the next pair (the quad's
// lines stay in L1 and L2 meanwhile)
void
emu_conv_i8_x512_narrow(const int8_t *panels, const uint16_t *scale, size_t cout, size_t cin, const float *xp,
                        size_t ncols, float *y, size_t p0, size_t p1, size_t b0, size_t b1)
{
	size_t nb, base, extra;
	emu_x512_split(ncols, &nb, &base, &extra);
	for (size_t q = p0, m; q < p1; q += m) {
		m = p1 - q < 2 || q % 2 ? 1 : 2;
		for (size_t b = 0, j = 0; b < nb && b < b1; b++) {
			size_t nc = base + (b < extra);
			if (b >= b0)
				tiles5x[m][nc](emu_i8_step(panels, cin, q, 0), cin, xp + j * cin,
				               y + j * cout + q * PANEL, cout, cout - q * PANEL, scale + q * PANEL);
			j += nc;
		}
	}
}
#else
int
emu_i8_isa(void)
{
	return 0;
}

int
emu_i8_one_col_avx2(void)
{
	return 0;
}

void
emu_conv_i8_avx2(const int8_t *panels, const uint16_t *scale, size_t cout, size_t cin, const float *x, size_t ncols,
                 float *y, size_t p0, size_t p1)
{
	emu_conv_i8_ref(panels, scale, cout, cin, x, ncols, y, p0, p1);
}

void
emu_conv_i8_avx512(const int8_t *panels, const uint16_t *scale, size_t cout, size_t cin, const float *x, size_t ncols,
                   float *y, size_t p0, size_t p1)
{
	emu_conv_i8_ref(panels, scale, cout, cin, x, ncols, y, p0, p1);
}
#endif

void
emu_conv_i8_at(int isa, const int8_t *panels, const uint16_t *scale, size_t cout, size_t cin, const float *x,
               size_t ncols, float *y, size_t p0, size_t p1)
{
	if (isa >= 2 && !(ncols == 1 && emu_i8_one_col_avx2()))
		emu_conv_i8_avx512(panels, scale, cout, cin, x, ncols, y, p0, p1);
	else if (isa >= 1)
		emu_conv_i8_avx2(panels, scale, cout, cin, x, ncols, y, p0, p1);
	else
		emu_conv_i8_ref(panels, scale, cout, cin, x, ncols, y, p0, p1);
}

void
emu_conv_i8_fast(const int8_t *panels, const uint16_t *scale, size_t cout, size_t cin, const float *x, size_t ncols,
                 float *y, size_t p0, size_t p1)
{
	emu_conv_i8_at(emu_i8_isa(), panels, scale, cout, cin, x, ncols, y, p0, p1);
}
