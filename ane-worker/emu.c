#include "emu.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "blob.h"
#include "err.h"
#include "fp16.h"
#include "hugemem.h"
#include "planar.h"
#include "pool.h"
#include "mil.h"

#define PANEL 16
#define MAX_NAME 64
#define MAX_RANK 8
#define ANE_EMU_SLOTS ANE_MIL_MAX_BLOBFILES

// ---------------------------------------------------------------------------
// conv kernels

// The 16-row panels are interleaved two at a time: pair g holds panels 2g
// and 2g + 1 as [cin][2][16], so step i of the pair's 32 rows is one
// 64-byte line and the pairs follow one another ([ceil(cout/32)][cin][32],
// rows past cout zero). One column over a pair is one stream with two FMA
// chains: a chain is 4 cycles per 32 bytes, which held one thread near 30
// GB/s, about the memory's speed, where two leave the memory the limit.
#define PAIR 2
#define PSTEP (PAIR * PANEL) // elements from a panel's step to its next

// the AVX-512 wide tiles (conv512w): steps of a slice at most. With all
// of cin at once, 4864 (Qwen2.5's FFN down) took 622 KB of fp32 a pair,
// which with its 1.2 MB of packed x and the next group's lines overflowed
// a 2 MB L2 (two threads, 240 -> 230 GFLOP/s against the fp16 tiles;
// sliced, even or better)
#define X512_WIDE_STEPS 1024
#define X512_WIDE_MP 2
// the scratch a thread widens into: a group of panels, a slice of steps
#define X512_WIDE_FLOATS(cin) ((size_t)X512_WIDE_MP * PANEL * ((cin) < X512_WIDE_STEPS ? (cin) : X512_WIDE_STEPS))

size_t
emu_panel_bytes(size_t cout, size_t cin)
{
	return (cout + PSTEP - 1) / PSTEP * PSTEP * cin * 2;
}

// panel p's step 0
static inline const uint16_t *
ppan(const uint16_t *panels, size_t cin, size_t p)
{
	return panels + (p / PAIR) * cin * PSTEP + (p % PAIR) * PANEL;
}

void
emu_pack(const uint16_t *w, size_t cout, size_t cin, uint16_t *panels)
{
	size_t np = (cout + PSTEP - 1) / PSTEP * PAIR;
	for (size_t p = 0; p < np; p++) {
		uint16_t *dst = (uint16_t *)ppan(panels, cin, p);
		for (size_t r = 0; r < PANEL; r++) {
			size_t o = p * PANEL + r;
			if (o >= cout) {
				for (size_t i = 0; i < cin; i++)
					dst[i * PSTEP + r] = 0;
				continue;
			}
			const uint16_t *src = w + o * cin;
			for (size_t i = 0; i < cin; i++)
				dst[i * PSTEP + r] = src[i];
		}
	}
}

void
emu_pack_pairs(const void *w, size_t cout, size_t cin, uint16_t *panels, size_t q0, size_t q1)
{
	const uint8_t *wb = w;
	for (size_t q = q0; q < q1; q++) {
		// the pair's 32 rows into [cin][32], 64 steps (4 KiB) at a time: a
		// whole pair at cin 896 is 56 KiB, past L1
		uint16_t *dst = (uint16_t *)ppan(panels, cin, q * PAIR);
		for (size_t i0 = 0; i0 < cin; i0 += 64) {
			size_t i1 = i0 + 64 < cin ? i0 + 64 : cin;
			for (size_t r = 0; r < PSTEP; r++) {
				size_t o = q * PSTEP + r;
				if (o >= cout) {
					for (size_t i = i0; i < i1; i++)
						dst[i * PSTEP + r] = 0;
					continue;
				}
				const uint8_t *src = wb + o * cin * 2;
				for (size_t i = i0; i < i1; i++)
					memcpy(&dst[i * PSTEP + r], src + i * 2, 2);
			}
		}
	}
}

static inline float
round16(float v)
{
	return ad_fp16_to_f32(ad_f32_to_fp16(v));
}

// Summation order, shared by every kernel: output (o, j) is one fp32 FMA
// chain over i = 0 .. cin-1 starting from zero, rounded to fp16 at the end.
// It depends on neither the number of columns nor the blocking, so a column
// gives the same bits alone (decode) or with others (prefill), on any
// number of threads, and the plain kernel matches the fast one exactly.
void
emu_conv_ref(const uint16_t *panels, size_t cout, size_t cin, const float *x, size_t ncols, float *y, size_t p0,
             size_t p1)
{
	for (size_t p = p0; p < p1; p++) {
		const uint16_t *w = ppan(panels, cin, p);
		for (size_t j = 0; j < ncols; j++) {
			const float *xj = x + j * cin;
			float acc[PANEL] = {0};
			for (size_t i = 0; i < cin; i++)
				for (size_t r = 0; r < PANEL; r++)
					acc[r] = fmaf(ad_fp16_to_f32(w[i * PSTEP + r]), xj[i], acc[r]);
			for (size_t r = 0; r < PANEL && p * PANEL + r < cout; r++)
				y[j * cout + p * PANEL + r] = round16(acc[r]);
		}
	}
}

#ifdef AD_FP16_X86
#define SIMD_TARGET __attribute__((target("avx2,fma,f16c")))

SIMD_TARGET static inline __m256
round16_ps(__m256 v)
{
	return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

SIMD_TARGET static inline void
store_rows(float *dst, size_t left, __m256 lo, __m256 hi)
{
	lo = round16_ps(lo);
	hi = round16_ps(hi);
	if (left >= PANEL) {
		_mm256_storeu_ps(dst, lo);
		_mm256_storeu_ps(dst + 8, hi);
		return;
	}
	float tmp[PANEL];
	_mm256_storeu_ps(tmp, lo);
	_mm256_storeu_ps(tmp + 8, hi);
	memcpy(dst, tmp, left * sizeof(float));
}

// the micro-kernel: MP consecutive panels (16 rows each) times NC columns,
// 2 * MP * NC accumulators held in ymm registers for the whole cin loop.
// Each half-panel weight vector is loaded and widened once per i and used
// for every column; the activations are broadcast from x ([NC][cin]).
// At most 12 accumulators, 2 weight vectors and one broadcast: 15 of the
// 16 ymm registers of plain AVX2.
#define TILE_MAX_ACC 12

// weights to pull towards L2 while a tile computes: the panels from q of
// panels, the lines at i0, i0 + di, ... (one 64-byte line holds a step of a pair)
struct pf {
	const uint16_t *panels;
	size_t q, i0, di;
};

// sc: NULL, or per-row scales (sc[o] for row o of panel q's first row):
// each sum times its scale before the rounding (int8 weights, widened)
SIMD_TARGET static inline __attribute__((always_inline)) void
tile(const uint16_t *panels, size_t q, size_t cin, const float *x, float *y, size_t cout, size_t left,
     const struct pf *pf, const uint16_t *sc, size_t ahead, const int mp, const int nc)
{
	size_t pfi = pf ? pf->i0 : (size_t)-1;
	const uint16_t *wp0[4], *pf0[4];
#pragma GCC unroll 4
	for (int p = 0; p < mp; p++) {
		wp0[p] = ppan(panels, cin, q + (size_t)p);
		pf0[p] = pf ? ppan(pf->panels, cin, pf->q + (size_t)p) : NULL;
	}
	__m256 acc[TILE_MAX_ACC];
#pragma GCC unroll 12
	for (int a = 0; a < 2 * mp * nc; a++)
		acc[a] = _mm256_setzero_ps();
	const int nta = ahead && emu_prefetch_nta(0);
	for (size_t i = 0; i < cin; i++) {
#pragma GCC unroll 4
		for (int p = 0; p < mp; p++) {
			// re-broadcast x for each panel instead of keeping nc broadcasts
			// live: that would take 17 registers in the 2x3 tile, and a spill
			// in this loop halves its speed on plain AVX2
			if (p > 0 && nc > 1)
				__asm__ volatile("" ::: "memory");
			const __m128i *wp = (const __m128i *)(wp0[p] + i * PSTEP);
			// one column: each pair's line, ahead steps on (emu_prefetch_steps)
			if (ahead && (p == 0 || (q + (size_t)p) % PAIR == 0))
				emu_prefetch_line(wp0[p] + (i + ahead) * PSTEP, nta);
			if (i == pfi)
				_mm_prefetch((const char *)(pf0[p] + i * PSTEP), _MM_HINT_T1);
			__m256 lo = _mm256_cvtph_ps(_mm_load_si128(wp));
			__m256 hi = _mm256_cvtph_ps(_mm_load_si128(wp + 1));
#pragma GCC unroll 6
			for (int c = 0; c < nc; c++) {
				__m256 b = _mm256_broadcast_ss(x + (size_t)c * cin + i);
				acc[(2 * p) * nc + c] = _mm256_fmadd_ps(lo, b, acc[(2 * p) * nc + c]);
				acc[(2 * p + 1) * nc + c] = _mm256_fmadd_ps(hi, b, acc[(2 * p + 1) * nc + c]);
			}
		}
		if (i == pfi)
			pfi += pf->di;
	}
#pragma GCC unroll 4
	for (int p = 0; p < mp; p++) {
		__m256 slo = _mm256_setzero_ps(), shi = slo;
		if (sc) {
			slo = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sc + (size_t)p * PANEL)));
			shi = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sc + (size_t)p * PANEL + 8)));
		}
#pragma GCC unroll 6
		for (int c = 0; c < nc; c++) {
			__m256 lo = acc[(2 * p) * nc + c], hi = acc[(2 * p + 1) * nc + c];
			if (sc) {
				lo = _mm256_mul_ps(slo, lo);
				hi = _mm256_mul_ps(shi, hi);
			}
			store_rows(y + (size_t)c * cout + (size_t)p * PANEL, left - (size_t)p * PANEL, lo, hi);
		}
	}
}

typedef void tile_fn(const uint16_t *panels, size_t q, size_t cin, const float *x, float *y, size_t cout, size_t left,
                     const struct pf *pf, const uint16_t *sc, size_t ahead);

#define TILE(MP, NC)                                                                                                   \
	SIMD_TARGET static void tile_##MP##x##NC(const uint16_t *panels, size_t q, size_t cin, const float *x,         \
	                                         float *y, size_t cout, size_t left, const struct pf *pf,              \
	                                         const uint16_t *sc, size_t ahead)                                     \
	{                                                                                                              \
		tile(panels, q, cin, x, y, cout, left, pf, sc, ahead, MP, NC);                                         \
	}
TILE(1, 1)
TILE(1, 2)
TILE(1, 3)
TILE(2, 1)
TILE(2, 2)
TILE(2, 3)
TILE(3, 1)
TILE(3, 2)
TILE(4, 1)

#define TILE_COLS 3  // widest column block
#define TILE_GROUP 6 // panels whose weights stay in L2 while the column blocks pass
// at most this many panels (weight streams, 64 KiB apart for cin 2048) at
// once: with 5 or 6 a one-column eval ran at half the speed (measured on
// Zen 4: L1 set conflicts or too many prefetch streams), with 3 or 4 at the
// last-level cache's bandwidth
#define TILE_STREAMS 4

// [mp][nc], 2 * mp * nc <= TILE_MAX_ACC: the tile for mp panels, nc columns
static tile_fn *const tiles[TILE_STREAMS + 1][TILE_COLS + 1] = {
	[1] = {NULL, tile_1x1, tile_1x2, tile_1x3},
	[2] = {NULL, tile_2x1, tile_2x2, tile_2x3},
	[3] = {NULL, tile_3x1, tile_3x2},
	[4] = {NULL, tile_4x1},
};

SIMD_TARGET static void
conv_simd(const uint16_t *panels, size_t cout, size_t cin, const float *x, size_t ncols, float *y, size_t p0, size_t p1,
          size_t streams)
{
	// column blocks of at most TILE_COLS, as even as possible; each block
	// takes as many panels at once as keep its accumulators in registers:
	// 4x1, 3x2, 2x3, so every tile but the tails has 8 to 12 FMA chains in
	// flight (FMA latency x throughput is 8). Blocks of 3 beat blocks of 4
	// to 6 (1x4 .. 1x6 tiles: 8 to 12 chains, fewer weight conversions) by
	// 5-10% at every width measured. (emu-i8.c's conv_blocked is the int8
	// panels' twin of this loop.)
	size_t nb = (ncols + TILE_COLS - 1) / TILE_COLS;
	size_t base = ncols / nb, extra = ncols % nb;
	// one column: a single pass over the weights anyway, no grouping
	size_t group = nb == 1 ? p1 - p0 : TILE_GROUP;
	size_t ahead = ncols == 1 ? emu_prefetch_steps(0) : 0;
	for (size_t p = p0; p < p1; p += group) {
		size_t pe = p1 - p > group ? p + group : p1;
		size_t j = 0;
		for (size_t b = 0; b < nb; b++) {
			size_t nc = base + (b < extra);
			size_t mp = TILE_MAX_ACC / 2 / nc;
			if (mp > TILE_STREAMS)
				mp = TILE_STREAMS;
			// one column from DRAM: one stream reads best (see
			// emu_prefetch_steps; here 22-25 -> 25-27 GB/s on one thread
			// against a read of 29-32 on Zen 4): a pair, whose panels share
			// their lines
			if (ncols == 1 && streams == 1)
				mp = 2;
			for (size_t q = p, m; q < pe; q += m) {
				m = pe - q < mp ? pe - q : mp;
				if (ncols == 1 && streams == 1 && q % PAIR)
					m = 1;
				// blocks 1 .. nb-1 (their weights are in L2) pull the same
				// panels of the next group from DRAM, each a share of the
				// lines, so the next group's first block finds them in L2
				// (cold 2048x2048 at 8 columns: 940 -> 720 us on one thread,
				// warm 630)
				struct pf pf = {NULL, 0, 0, 0};
				if (b > 0 && q + group + m <= p1)
					pf = (struct pf){panels, q + group, b - 1, nb - 1};
				tiles[m][nc](panels, q, cin, x + j * cin, y + j * cout + q * PANEL, cout,
				             cout - q * PANEL, pf.panels ? &pf : NULL, NULL, ahead);
			}
			j += nc;
		}
	}
}

// int8 panels (emu-i8.c) of many columns: the int8 tile widens every step
// for each block of three columns (two ops per eight weights), which held
// 64 columns at 69 GFLOP/s on one thread where these tiles reach 88 (Zen
// 4, AVX2). So a pair of panels at a time is widened once to fp16 (exact:
// |q| <= 128) in scratch, laid out as one pair of fp16 panels, and every
// column block runs these tiles over it, each sum times its row's scale
// before the rounding: emu_conv_i8_ref's bits.
SIMD_TARGET static void
conv_i8_wide(const int8_t *qp, const uint16_t *scale, size_t cout, size_t cin, const float *x, size_t ncols, float *y,
             size_t p0, size_t p1, uint16_t *tmp)
{
	size_t nb = (ncols + TILE_COLS - 1) / TILE_COLS, base = ncols / nb, extra = ncols % nb;
	for (size_t g = p0; g < p1; g += PAIR) {
		size_t n = p1 - g < PAIR ? p1 - g : PAIR;
		for (size_t p = 0; p < n; p++)
			emu_i8_panel_fp16(qp, cin, g + p, tmp + p * PANEL, PSTEP);
		for (size_t b = 0, j = 0; b < nb; b++) {
			size_t nc = base + (b < extra);
			tiles[n][nc](tmp, 0, cin, x + j * cin, y + j * cout + g * PANEL, cout, cout - g * PANEL, NULL,
			             scale + g * PANEL, 0);
			j += nc;
		}
	}
}

int
emu_conv_i8_wide(const int8_t *panels, const uint16_t *scale, size_t cout, size_t cin, const float *x, size_t ncols,
                 float *y, size_t p0, size_t p1, uint16_t *scratch)
{
	uint16_t *tmp = scratch;
	if (!tmp && !(tmp = aligned_alloc(64, (PSTEP * cin * sizeof *tmp + 63) / 64 * 64)))
		return -1;
	conv_i8_wide(panels, scale, cout, cin, x, ncols, y, p0, p1, tmp);
	if (!scratch)
		free(tmp);
	return 0;
}

// ---- AVX-512 ------------------------------------------------------------
// One panel row (16 fp16) is one 256-bit load widened to one zmm, and the
// 32 zmm registers hold up to 24 accumulators: tiles of up to 4 panels x 12
// columns (mp * nc <= 24). Same chains as above: accumulator (o, j) sums
// i = 0 .. cin-1 in order from zero and is rounded once.
#define AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")))
#define X512_COLS EMU_X512_COLS // widest column block
#define X512_ACC 24             // accumulators of one tile
#define X512_STREAMS 4          // panels at once (see TILE_STREAMS)
// the one-column tile: 1 to 8 panels (weight streams) at once, each
// prefetched into L2 some steps of i ahead (emu_prefetch_steps). Measured on
// Zen 4, one thread, weights from DRAM (576x49152, 896x4864, 4864x896),
// best of 15 by thread CPU time, against a plain read of the same bytes at
// 29-31 GB/s: 4 streams prefetched into L1 19-20 GB/s, 8 into L1 16, 8 into
// L2 23-27, 2 into L2 19-22, one stream into L2 1 KiB ahead 27-28 (0.87 to
// 0.95 of the read). One stream is one FMA chain (4 cycles per 32 bytes),
// which caps it near 30 GB/s per thread from the caches, where 8 streams
// reach 45-55. So: one stream when the weights come from DRAM (a context
// whose weights exceed half the last-level cache: a model's weights cycle
// through it at every token), X512_COL_WARM when they stay in the caches
#define X512_COL_WARM 8

// column blocks of at most maxc columns, as even as possible: block b has
// base + (b < extra) columns
static void
col_blocks(size_t ncols, size_t maxc, size_t *nb, size_t *base, size_t *extra)
{
	*nb = (ncols + maxc - 1) / maxc;
	*base = ncols / *nb;
	*extra = ncols % *nb;
}

// panels a wide AVX-512 tile takes at once: as many as keep its
// accumulators in registers
static size_t
x512_mp(size_t ncols)
{
	size_t nb, base, extra;
	col_blocks(ncols, X512_COLS, &nb, &base, &extra);
	size_t nc = base + (extra > 0), mp = X512_ACC / nc;
	return mp > X512_STREAMS ? X512_STREAMS : mp;
}

// the activations of a wide call for the AVX-512 tiles: column block
// [j, j + nc) of x ([ncols][cin]) is rewritten, in the same place of xp,
// as [cin][nc], so a tile's broadcasts walk one line after another instead
// of nc rows. Blocks [b0, b1). The steps go X512_PACK_STEPS at a time,
// whose packed lines (at most 24 KiB) stay in L1 while every column of
// the block is written into them: in one pass per column over all of cin
// a block of 1536 or more steps left L1 between two columns (one thread,
// 64 columns: 64 x 1536 95 -> 40 us, 64 x 4864 313 -> 145 us, the
// conv after it 810 and 4000 us).
#define X512_PACK_STEPS 512
static void
pack_rows(const float *x, size_t cin, size_t nc, float *dst)
{
	for (size_t i0 = 0; i0 < cin; i0 += X512_PACK_STEPS) {
		size_t i1 = cin - i0 < X512_PACK_STEPS ? cin : i0 + X512_PACK_STEPS;
		for (size_t c = 0; c < nc; c++) {
			const float *src = x + c * cin;
			for (size_t i = i0; i < i1; i++)
				dst[i * nc + c] = src[i];
		}
	}
}

// the same from the planar fp16 surface itself, its columns from the
// surface's column col on (ps bytes from a channel's plane to the next,
// columns contiguous): step i is nc contiguous values of plane i, one
// masked load and store, where packing the gathered rows took a strided
// store per value. A 64-column eval of Qwen2.5's FFN up: the gather and
// the pack 1.8% of its CPU time (perf), this 0.6%.
AVX512_TARGET static void
pack_planar(const uint8_t *surf, size_t ps, size_t col, size_t cin, size_t nc, float *dst)
{
	__mmask16 m = (__mmask16)((1u << nc) - 1);
	for (size_t i = 0; i < cin; i++) {
		__m256i h = _mm256_maskz_loadu_epi16(m, surf + i * ps + col * 2);
		_mm512_mask_storeu_ps(dst + i * nc, m, _mm512_cvtph_ps(h));
	}
}

// blocks [b0, b1) of x's rows, or (surf not NULL) of the surface's planes
static void
x512_pack(const float *x, const uint8_t *surf, size_t ps, size_t cin, size_t ncols, float *xp, size_t b0, size_t b1)
{
	size_t nb, base, extra;
	col_blocks(ncols, X512_COLS, &nb, &base, &extra);
	for (size_t b = 0, j = 0; b < nb; b++) {
		size_t nc = base + (b < extra);
		if (b >= b0 && b < b1) {
			if (surf)
				pack_planar(surf, ps, j, cin, nc, xp + j * cin);
			else
				pack_rows(x + j * cin, cin, nc, xp + j * cin);
		}
		j += nc;
	}
}

AVX512_TARGET static inline void
store16(float *dst, size_t left, __m512 v)
{
	v = _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
	if (left >= PANEL)
		_mm512_storeu_ps(dst, v);
	else
		_mm512_mask_storeu_ps(dst, (__mmask16)((1u << left) - 1), v);
}

// mp panels x nc columns of packed activations xp ([cin][nc]); pf as in
// tile()
AVX512_TARGET static inline __attribute__((always_inline)) void
tile512(const uint16_t *panels, size_t q, size_t cin, const float *xp, float *y, size_t cout, size_t left,
        const struct pf *pf, const int mp, const int nc)
{
	size_t pfi = pf ? pf->i0 : (size_t)-1;
	const uint16_t *wp0[X512_STREAMS], *pf0[X512_STREAMS];
#pragma GCC unroll 4
	for (int p = 0; p < mp; p++) {
		wp0[p] = ppan(panels, cin, q + (size_t)p);
		pf0[p] = pf ? ppan(pf->panels, cin, pf->q + (size_t)p) : NULL;
	}
	__m512 acc[X512_ACC];
#pragma GCC unroll 24
	for (int a = 0; a < mp * nc; a++)
		acc[a] = _mm512_setzero_ps();
	for (size_t i = 0; i < cin; i++) {
		const float *xi = xp + i * (size_t)nc;
#pragma GCC unroll 4
		for (int p = 0; p < mp; p++) {
			// broadcasts from memory for each panel (folded into the FMAs):
			// keeping nc broadcasts live across panels would spill
			if (p > 0)
				__asm__ volatile("" ::: "memory");
			const uint16_t *wp = wp0[p] + i * PSTEP;
			if (i == pfi)
				_mm_prefetch((const char *)(pf0[p] + i * PSTEP), _MM_HINT_T1);
			__m512 wv = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)wp));
#pragma GCC unroll 12
			for (int c = 0; c < nc; c++)
				acc[p * nc + c] = _mm512_fmadd_ps(wv, _mm512_set1_ps(xi[c]), acc[p * nc + c]);
		}
		if (i == pfi)
			pfi += pf->di;
	}
#pragma GCC unroll 4
	for (int p = 0; p < mp; p++)
#pragma GCC unroll 12
		for (int c = 0; c < nc; c++)
			store16(y + (size_t)c * cout + (size_t)p * PANEL, left - (size_t)p * PANEL, acc[p * nc + c]);
}

// one column (decode): mp panels from panel q, each an FMA chain; a pair's
// two panels share their lines, so mp = 2 on a pair is one stream
AVX512_TARGET static inline __attribute__((always_inline)) void
col512(const uint16_t *panels, size_t q, size_t cin, const float *x, float *y, size_t left, size_t ahead, const int mp)
{
	__m512 acc[8];
	const uint16_t *wp0[8];
#pragma GCC unroll 8
	for (int p = 0; p < mp; p++) {
		acc[p] = _mm512_setzero_ps();
		wp0[p] = ppan(panels, cin, q + (size_t)p);
	}
	const int nta = ahead && emu_prefetch_nta(0);
	for (size_t i = 0; i < cin; i++) {
#pragma GCC unroll 8
		for (int p = 0; ahead && p < mp; p += (q + (size_t)p) % PAIR == 0 && p + 1 < mp ? 2 : 1)
			emu_prefetch_line(wp0[p] + (i + ahead) * PSTEP, nta);
		__m512 b = _mm512_set1_ps(x[i]);
#pragma GCC unroll 8
		for (int p = 0; p < mp; p++)
			acc[p] = _mm512_fmadd_ps(
				_mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(wp0[p] + i * PSTEP))), b, acc[p]);
	}
#pragma GCC unroll 8
	for (int p = 0; p < mp; p++)
		store16(y + (size_t)p * PANEL, left - (size_t)p * PANEL, acc[p]);
}

typedef void col_fn(const uint16_t *panels, size_t q, size_t cin, const float *x, float *y, size_t left, size_t ahead);
#define COL512(MP)                                                                                                     \
	AVX512_TARGET static void col512_##MP(const uint16_t *panels, size_t q, size_t cin, const float *x, float *y,  \
	                                      size_t left, size_t ahead)                                               \
	{                                                                                                              \
		col512(panels, q, cin, x, y, left, ahead, MP);                                                         \
	}
COL512(1)
COL512(2)
COL512(3)
COL512(4)
COL512(5)
COL512(6)
COL512(7)
COL512(8)
// for 1 to 8 streams (conv512's streams)
static col_fn *const cols512[9] = {NULL,     col512_1, col512_2, col512_3, col512_4,
                                   col512_5, col512_6, col512_7, col512_8};

#define TILE512(MP, NC)                                                                                                \
	AVX512_TARGET static void tile512_##MP##x##NC(const uint16_t *panels, size_t q, size_t cin, const float *xp,   \
	                                              float *y, size_t cout, size_t left, const struct pf *pf)         \
	{                                                                                                              \
		tile512(panels, q, cin, xp, y, cout, left, pf, MP, NC);                                                \
	}
#define TILE512_ROW(MP)                                                                                                \
	TILE512(MP, 1)                                                                                                 \
	TILE512(MP, 2) TILE512(MP, 3) TILE512(MP, 4) TILE512(MP, 5) TILE512(MP, 6)
// clang-format off
TILE512_ROW(1)
TILE512_ROW(2)
TILE512_ROW(3)
TILE512_ROW(4)
TILE512(1, 7)
TILE512(1, 8)
TILE512(1, 9)
TILE512(1, 10)
TILE512(1, 11)
TILE512(1, 12)
TILE512(2, 7)
TILE512(2, 8)
TILE512(2, 9)
TILE512(2, 10)
TILE512(2, 11)
TILE512(2, 12)
TILE512(3, 7)
TILE512(3, 8)
// clang-format on

#define T512_ROW(MP)                                                                                                   \
	tile512_##MP##x1, tile512_##MP##x2, tile512_##MP##x3, tile512_##MP##x4, tile512_##MP##x5, tile512_##MP##x6
// [mp][nc], mp * nc <= X512_ACC
typedef void tile512_fn(const uint16_t *panels, size_t q, size_t cin, const float *xp, float *y, size_t cout,
                        size_t left, const struct pf *pf);
static tile512_fn *const tiles512[X512_STREAMS + 1][X512_COLS + 1] = {
	[1] = {NULL, T512_ROW(1), tile512_1x7, tile512_1x8, tile512_1x9, tile512_1x10, tile512_1x11, tile512_1x12},
	[2] = {NULL, T512_ROW(2), tile512_2x7, tile512_2x8, tile512_2x9, tile512_2x10, tile512_2x11, tile512_2x12},
	[3] = {NULL, T512_ROW(3), tile512_3x7, tile512_3x8},
	[4] = {NULL, T512_ROW(4)},
};

// ---- wide calls over widened weights: from X512_WIDE_BLOCKS column blocks
// on, the first column block's tile widens each step of its group of mp
// panels to fp32 as it goes and keeps it in the thread's scratch, [kn][mp]
// [16] (mp * 64 bytes a step), and the other blocks' tiles read it there.
// The tiles above widen every step again for each block: vcvtph2ps is two
// ops on the FMAs' two ports, so a 2 x 11 tile spends 26 port slots on 22
// FMAs. Here the widening is paid once a group, and each column's
// broadcast is loaded once and feeds the mp panels (the tiles above fold
// a broadcast into every FMA). Whether a row's weights come as fp16 or
// int8 makes no difference past the widening, so both weight types share
// these tiles. A block has 9 to 12 columns from 5 blocks on, so mp is 2
// (or 1 at the end of a range).
//
// Measured on an Intel Xeon (family 6 model 207), 64 columns, against the
// tiles above, best by CPU time: int8 weights, the kernel alone on one
// thread, 137-142 -> 158-164 GFLOP/s at both models' FFN shapes (a 167
// peak); fp16, a whole eval on one thread, 129-136 -> 136-154, on two
// 210-249 -> 256-281 (a 334 peak). With fewer blocks the widening pays
// less than it costs: fp16 at 16 columns (2 blocks) 124 -> 104, at 32 (3)
// 118-128 -> 117, at 48 (4) about even. The widening as a pass of its own
// before the tiles, rather than in the first block's tile, took 10% of the
// time: its loads and stores ran at 7 cycles a step with nothing to hide
// behind.
#define X512_WIDE_BLOCKS 5
// (X512_WIDE_STEPS, X512_WIDE_MP, X512_WIDE_FLOATS: at the top)
// The widening tile pulls its group's own lines into L1 this many steps
// (a 64-byte line each: 4 KiB) ahead. The next group's lines are pulled
// towards L2 while the blocks pass over a group, but the widening tile
// still waited on them: bench-emu -p avx512, 64 columns, two threads, 6
// rounds alternating, ratio to the FMA peak on a Zen 5: Qwen2.5's FFN
// down (4864 steps) 0.645 -> 0.745, every round above; its FFN up 0.825
// both ways, SmolLM2's FFN up 0.725 -> 0.735, its LM head 0.72 -> 0.765.
// 16 steps ahead gave the down 0.68, 32 0.735, 128 0.76, 256 0.735.
#define X512_WIDE_AHEAD 64

// where a wide tile's weights come from: the scratch, or (the first block)
// the panels themselves, widened into the scratch on the way
enum { W_F32, W_F16, W_I8, W_L4 };
// a slice of the steps: its sums go on from y's and stay there unrounded
// for the next slice, as the same FMA chains
#define W_CONT 1 // a slice before this one: start from y
#define W_MORE 2 // a slice after this one: leave the raw sums in y

// the weights of a wide call: fp16 pairs, int8 quads (emu-i8.c) or 4-bit
// quads (emu-l4.c, with their tables: lut), from panel q, steps from k0
// (even: a 4-bit line holds two steps)
struct wsrc {
	const void *panels;
	const uint16_t *lut;
	size_t cin, q, k0;
	const char *next[X512_WIDE_MP]; // the next group's lines, pulled in meanwhile
	int nnext;
	size_t pf0, pfd; // ... those of steps pf0, pf0 + pfd, ...
};

// bytes from a panel's step to its next: a 64-byte line a step for fp16
// pairs and int8 quads, half of one for 4-bit quads
#define WSTEP(kind) ((kind) == W_L4 ? 32u : 64u)

// the first line of 4-bit quad g, and that of its step k (even)
static inline const char *
l4_line(const void *panels, size_t cin, size_t g, size_t k)
{
	return (const char *)panels + (g * ((cin + 1) / 2) + k / 2) * 64;
}

// panel q + p's line at w's first step (step i is i * WSTEP bytes on)
static inline const char *
wfirst(const struct wsrc *w, int kind, size_t p)
{
	if (kind == W_L4)
		return l4_line(w->panels, w->cin, (w->q + p) / 4, w->k0);
	return kind == W_F16 ? (const char *)(ppan(w->panels, w->cin, w->q + p) + w->k0 * PSTEP)
	                     : (const char *)emu_i8_step(w->panels, w->cin, w->q + p, w->k0);
}

// one step of a panel, widened
AVX512_TARGET static inline __m512
wstep(const char *s, int kind)
{
	if (kind == W_F16)
		return _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)s));
	return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)s)));
}

// kn steps of mp panels by nc columns of xp ([kn][nc]); wf: the panels
// widened ([kn][mp][16]), read (W_F32) or written (from w). What the loop
// needs of w is read into locals first: the stores of widened weights
// (__m512, which may alias anything) would otherwise make it load w's
// fields again at every step, and work out the panels' addresses with two
// multiplies. On a Zen 5 (bench-emu -p avx512 -q, perf samples) the
// widening 2 x 11 tile took 1.77x a reading one's samples before, 1.2x
// after; the GEMMs, 16 alternating pairs: Qwen2.5's FFN down +10%, the
// other three shapes +2 to +5%
AVX512_TARGET static inline __attribute__((always_inline)) void
tile512w(const struct wsrc *w, float *wf, size_t kn, const float *xp, float *y, size_t cout, size_t left,
         const uint16_t *sc, unsigned part, const int kind, const int mp, const int nc)
{
	const size_t pfd = w->pfd;
	size_t pfi = w->nnext ? w->pf0 : (size_t)-1;
	const char *next[X512_WIDE_MP] = {NULL}, *src[X512_WIDE_MP] = {NULL};
	const int nnext = w->nnext;
	const size_t sb = WSTEP(kind);
	for (int s = 0; s < nnext; s++)
		next[s] = w->next[s] + w->k0 * sb;
	// 4-bit: a panel's table (its quad's) and its nibble: 4 (p % 4) bits
	// up in a word at an even step, 16 more at an odd one
	__m512 tab[X512_WIDE_MP];
	int sh[X512_WIDE_MP] = {0};
	if (kind != W_F32)
		for (int p = 0; p < mp; p++) {
			src[p] = wfirst(w, kind, (size_t)p);
			if (kind == W_L4) {
				tab[p] = _mm512_cvtph_ps(
					_mm256_loadu_si256((const __m256i *)(w->lut + (w->q + (size_t)p) / 4 * 16)));
				sh[p] = 4 * (int)((w->q + (size_t)p) % 4);
			}
		}
	__m512 acc[X512_ACC];
#pragma GCC unroll 2
	for (int p = 0; p < mp; p++) {
		size_t l = left - (size_t)p * PANEL;
		__mmask16 m = l >= PANEL ? (__mmask16)0xffff : (__mmask16)((1u << l) - 1);
#pragma GCC unroll 12
		for (int c = 0; c < nc; c++)
			acc[p * nc + c] = part & W_CONT
			                          ? _mm512_maskz_loadu_ps(m, y + (size_t)c * cout + (size_t)p * PANEL)
			                          : _mm512_setzero_ps();
	}
	for (size_t i = 0; i < kn; i++) {
		const float *xi = xp + i * (size_t)nc;
		float *wi = wf + i * (size_t)mp * PANEL;
		if (i == pfi) {
			for (int s = 0; s < nnext; s++)
				_mm_prefetch(next[s] + i * sb, _MM_HINT_T1);
			pfi += pfd;
		}
		__m512 wv[X512_WIDE_MP];
		// the group's line (a prefetch past the panels' end is harmless)
		if (kind != W_F32)
			_mm_prefetch(src[0] + (i + X512_WIDE_AHEAD) * sb, _MM_HINT_T0);
#pragma GCC unroll 2
		for (int p = 0; p < mp; p++) {
			if (kind == W_F32) {
				wv[p] = _mm512_load_ps(wi + p * PANEL);
			} else if (kind == W_L4) {
				__m512i v = _mm512_load_si512((const void *)(src[p] + (i / 2) * 64));
				__m128i n = _mm_cvtsi32_si128(sh[p] + 16 * (int)(i & 1));
				wv[p] = _mm512_permutexvar_ps(_mm512_srl_epi32(v, n), tab[p]);
				_mm512_store_ps(wi + p * PANEL, wv[p]);
			} else {
				wv[p] = wstep(src[p] + i * 64, kind);
				_mm512_store_ps(wi + p * PANEL, wv[p]);
			}
		}
#pragma GCC unroll 12
		for (int c = 0; c < nc; c++) {
			__m512 b = _mm512_set1_ps(xi[c]);
#pragma GCC unroll 2
			for (int p = 0; p < mp; p++)
				acc[p * nc + c] = _mm512_fmadd_ps(wv[p], b, acc[p * nc + c]);
		}
	}
#pragma GCC unroll 2
	for (int p = 0; p < mp; p++) {
		size_t l = left - (size_t)p * PANEL;
		__mmask16 m = l >= PANEL ? (__mmask16)0xffff : (__mmask16)((1u << l) - 1);
		__m512 s = sc ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(sc + p * PANEL)))
		              : _mm512_setzero_ps();
#pragma GCC unroll 12
		for (int c = 0; c < nc; c++) {
			float *dst = y + (size_t)c * cout + (size_t)p * PANEL;
			if (part & W_MORE)
				_mm512_mask_storeu_ps(dst, m, acc[p * nc + c]);
			else
				store16(dst, l, sc ? _mm512_mul_ps(s, acc[p * nc + c]) : acc[p * nc + c]);
		}
	}
}

typedef void tile512w_fn(const struct wsrc *w, float *wf, size_t kn, const float *xp, float *y, size_t cout,
                         size_t left, const uint16_t *sc, unsigned part);
#define TILE512W(KIND, MP, NC)                                                                                         \
	AVX512_TARGET static void tile512w_##KIND##_##MP##x##NC(const struct wsrc *w, float *wf, size_t kn,            \
	                                                        const float *xp, float *y, size_t cout, size_t left,   \
	                                                        const uint16_t *sc, unsigned part)                     \
	{                                                                                                              \
		tile512w(w, wf, kn, xp, y, cout, left, sc, part, KIND, MP, NC);                                        \
	}
#define TILE512W_KIND(KIND)                                                                                            \
	TILE512W(KIND, 1, 9)                                                                                           \
	TILE512W(KIND, 1, 10)                                                                                          \
	TILE512W(KIND, 1, 11)                                                                                          \
	TILE512W(KIND, 1, 12)                                                                                          \
	TILE512W(KIND, 2, 9) TILE512W(KIND, 2, 10) TILE512W(KIND, 2, 11) TILE512W(KIND, 2, 12)
TILE512W_KIND(W_F32)
TILE512W_KIND(W_F16)
TILE512W_KIND(W_I8)
TILE512W_KIND(W_L4)
#define T512W_MP(KIND, MP)                                                                                             \
	{                                                                                                              \
		[9] = tile512w_##KIND##_##MP##x9, [10] = tile512w_##KIND##_##MP##x10,                                  \
		[11] = tile512w_##KIND##_##MP##x11, [12] = tile512w_##KIND##_##MP##x12                                 \
	}
#define T512W_KIND(KIND)                                                                                               \
	{                                                                                                              \
		[1] = T512W_MP(KIND, 1), [2] = T512W_MP(KIND, 2)                                                       \
	}
// [kind][mp][nc]
static tile512w_fn *const tiles512w[4][X512_WIDE_MP + 1][X512_COLS + 1] = {
	[W_F32] = T512W_KIND(W_F32), [W_F16] = T512W_KIND(W_F16), [W_I8] = T512W_KIND(W_I8), [W_L4] = T512W_KIND(W_L4)};

// the first line of panel p's pair (fp16) or quad (int8, 4-bit)
static const char *
wline(const void *panels, int kind, size_t cin, size_t p)
{
	if (kind == W_L4)
		return l4_line(panels, cin, p / 4, 0);
	return kind == W_F16 ? (const char *)((const uint16_t *)panels + (p / PAIR) * cin * PSTEP)
	                     : (const char *)emu_i8_step(panels, cin, p - p % 4, 0);
}

// column blocks [b0, b1) of panels [p0, p1) over xp packed (x512_pack), from
// X512_WIDE_BLOCKS blocks on: a group of X512_WIDE_MP panels at a time, in
// slices of at most X512_WIDE_STEPS steps, widened by the first block into
// wf (X512_WIDE_FLOATS); while the blocks pass over a slice, each pulls a
// share of the next group's lines of the same steps towards L2
static void
conv512w(const void *panels, int kind, const uint16_t *lut, const uint16_t *scale, size_t cout, size_t cin,
         const float *xp, size_t ncols, float *y, size_t p0, size_t p1, size_t b0, size_t b1, float *wf)
{
	size_t nb, base, extra;
	col_blocks(ncols, X512_COLS, &nb, &base, &extra);
	size_t be = b1 < nb ? b1 : nb, nk = (cin + X512_WIDE_STEPS - 1) / X512_WIDE_STEPS;
	for (size_t q = p0; q < p1; q += X512_WIDE_MP) {
		size_t m = p1 - q < X512_WIDE_MP ? p1 - q : X512_WIDE_MP;
		struct wsrc w = {.panels = panels, .lut = lut, .cin = cin, .q = q, .pfd = be - b0};
		for (size_t p = q + m; p < q + m + X512_WIDE_MP && p < p1; p++) {
			const char *l = wline(panels, kind, cin, p);
			if (!w.nnext || w.next[w.nnext - 1] != l)
				w.next[w.nnext++] = l;
		}
		for (size_t k = 0; k < nk; k++) {
			// slices of whole 4-bit lines: even bounds (the chains go on
			// over slices, so the bounds change no bits)
			size_t k0 = cin * k / nk & ~(size_t)1, k1 = k + 1 < nk ? cin * (k + 1) / nk & ~(size_t)1 : cin;
			unsigned part = (k > 0 ? W_CONT : 0) | (k + 1 < nk ? W_MORE : 0);
			w.k0 = k0;
			for (size_t b = 0, j = 0; b < be; b++) {
				size_t nc = base + (b < extra);
				if (b >= b0) {
					w.pf0 = b - b0;
					tiles512w[b == b0 ? kind : W_F32][m][nc](
						&w, wf, k1 - k0, xp + j * cin + k0 * nc, y + j * cout + q * PANEL, cout,
						cout - q * PANEL, scale ? scale + q * PANEL : NULL, part);
				}
				j += nc;
			}
		}
	}
}

// conv512w over scratch, or a scratch of its own when that is NULL (-1
// when out of memory)
static int
conv512w_own(const void *panels, int kind, const uint16_t *lut, const uint16_t *scale, size_t cout, size_t cin,
             const float *xp, size_t ncols, float *y, size_t p0, size_t p1, size_t b0, size_t b1, float *scratch)
{
	float *wf = scratch;
	if (!wf && !(wf = aligned_alloc(64, X512_WIDE_FLOATS(cin) * sizeof(float))))
		return -1;
	conv512w(panels, kind, lut, scale, cout, cin, xp, ncols, y, p0, p1, b0, b1, wf);
	if (!scratch)
		free(wf);
	return 0;
}

int
emu_conv_i8_x512(const int8_t *panels, const uint16_t *scale, size_t cout, size_t cin, const float *xp, size_t ncols,
                 float *y, size_t p0, size_t p1, size_t b0, size_t b1, float *scratch)
{
	size_t nb = emu_x512_blocks(ncols), be = b1 < nb ? b1 : nb;
	if (be < b0 + X512_WIDE_BLOCKS) {
		emu_conv_i8_x512_narrow(panels, scale, cout, cin, xp, ncols, y, p0, p1, b0, b1);
		return 0;
	}
	return conv512w_own(panels, W_I8, NULL, scale, cout, cin, xp, ncols, y, p0, p1, b0, b1, scratch);
}

_Static_assert((EMU_L4_X512_COLS + EMU_X512_COLS - 1) / EMU_X512_COLS == X512_WIDE_BLOCKS &&
                       (EMU_L4_X512_COLS + EMU_X512_COLS - 2) / EMU_X512_COLS < X512_WIDE_BLOCKS,
               "emu.h's EMU_L4_X512_COLS: the fewest columns of X512_WIDE_BLOCKS blocks");

int
emu_conv_l4_x512(const uint8_t *panels, const uint16_t *lut, const uint16_t *scale, size_t cout, size_t cin,
                 const float *xp, size_t ncols, float *y, size_t p0, size_t p1, float *scratch)
{
	size_t nb = emu_x512_blocks(ncols);
	if (nb < X512_WIDE_BLOCKS)
		return -1;
	return conv512w_own(panels, W_L4, lut, scale, cout, cin, xp, ncols, y, p0, p1, 0, nb, scratch);
}

// panels [p0, p1); xp is x itself for one column, else packed by x512_pack;
// streams (1..8): panels at once for one column; wf: NULL, or scratch for
// conv512w
static void
conv512(const uint16_t *panels, size_t cout, size_t cin, const float *xp, size_t ncols, float *y, size_t p0, size_t p1,
        size_t streams, float *wf)
{
	if (ncols == 1) {
		// from DRAM: a pair at a time (one stream, two chains); an odd
		// first or last panel alone
		if (streams == 1)
			streams = 2;
		size_t ahead = emu_prefetch_steps(0);
		for (size_t q = p0, m; q < p1; q += m) {
			m = p1 - q < streams ? p1 - q : streams;
			if (streams == 2 && q % PAIR)
				m = 1;
			cols512[m](panels, q, cin, xp, y + q * PANEL, cout - q * PANEL, ahead);
		}
		return;
	}
	size_t nb, base, extra;
	col_blocks(ncols, X512_COLS, &nb, &base, &extra);
	if (wf && nb >= X512_WIDE_BLOCKS) {
		conv512w(panels, W_F16, NULL, NULL, cout, cin, xp, ncols, y, p0, p1, 0, nb, wf);
		return;
	}
	// a group of mp panels passes every column block while its weights sit
	// in L2; every block pulls a share of the next group's lines meanwhile
	size_t group = x512_mp(ncols);
	for (size_t q = p0; q < p1; q += group) {
		size_t m = p1 - q < group ? p1 - q : group;
		int next = q + group + m <= p1;
		for (size_t b = 0, j = 0; b < nb; b++) {
			size_t nc = base + (b < extra);
			struct pf pf = {panels, q + group, b, nb};
			tiles512[m][nc](panels, q, cin, xp + j * cin, y + j * cout + q * PANEL, cout, cout - q * PANEL,
			                next ? &pf : NULL);
			j += nc;
		}
	}
}

// x packed as the AVX-512 wide tiles read it, for emu-i8.c's as well
size_t
emu_x512_blocks(size_t ncols)
{
	size_t nb, base, extra;
	col_blocks(ncols, X512_COLS, &nb, &base, &extra);
	return nb;
}

void
emu_x512_split(size_t ncols, size_t *nb, size_t *base, size_t *extra)
{
	col_blocks(ncols, X512_COLS, nb, base, extra);
}

void
emu_x512_pack(const float *x, size_t cin, size_t ncols, float *xp)
{
	x512_pack(x, NULL, 0, cin, ncols, xp, 0, emu_x512_blocks(ncols));
}

int
emu_have_simd(void)
{
	return ad_cpu_simd();
}
#else
int
emu_have_simd(void)
{
	return 0;
}
#endif

int
emu_cpu_simd(void)
{
	return EMU_SIMD_REF + ad_cpu_level();
}

const char *
emu_simd_name(int level)
{
	switch (level) {
	case EMU_SIMD_REF:
		return "ref";
	case EMU_SIMD_AVX2:
		return "avx2";
	case EMU_SIMD_AVX512:
		return "avx512";
	default:
		return "auto";
	}
}

// level capped at what the CPU has (AUTO: the best)
static int
simd_cap(int level)
{
	int cpu = emu_cpu_simd();
	return level == EMU_SIMD_AUTO || level > cpu ? cpu : level;
}

// xp: x, or for a wide call on the AVX-512 path x packed by x512_pack;
// streams: see conv512
static void
conv_level(int level, const uint16_t *panels, size_t cout, size_t cin, const float *x, const float *xp, size_t ncols,
           float *y, size_t p0, size_t p1, size_t streams, float *wf)
{
#ifdef AD_FP16_X86
	if (level == EMU_SIMD_AVX512) {
		conv512(panels, cout, cin, xp, ncols, y, p0, p1, streams, wf);
		return;
	}
	if (level == EMU_SIMD_AVX2) {
		conv_simd(panels, cout, cin, x, ncols, y, p0, p1, streams);
		return;
	}
#endif
	emu_conv_ref(panels, cout, cin, x, ncols, y, p0, p1);
}

void
emu_conv_simd(int level, const uint16_t *panels, size_t cout, size_t cin, const float *x, size_t ncols, float *y,
              size_t p0, size_t p1)
{
	level = simd_cap(level);
	const float *xp = x;
	float *tmp = NULL, *wf = NULL;
#ifdef AD_FP16_X86
	if (level == EMU_SIMD_AVX512 && ncols > 1) {
		tmp = malloc(ncols * cin * sizeof(float));
		if (emu_x512_blocks(ncols) >= X512_WIDE_BLOCKS)
			wf = aligned_alloc(64, X512_WIDE_FLOATS(cin) * sizeof(float));
		if (!tmp) {
			level = EMU_SIMD_AVX2; // the same bits
		} else {
			x512_pack(x, NULL, 0, cin, ncols, tmp, 0, ncols);
			xp = tmp;
		}
	}
#endif
	conv_level(level, panels, cout, cin, x, xp, ncols, y, p0, p1, 1, wf);
	free(tmp);
	free(wf);
}

void
emu_conv_fast(const uint16_t *panels, size_t cout, size_t cin, const float *x, size_t ncols, float *y, size_t p0,
              size_t p1)
{
	emu_conv_simd(EMU_SIMD_AUTO, panels, cout, cin, x, ncols, y, p0, p1);
}

// x rounded to fp16 in place
static void
round16_row(float *x, size_t n)
{
	uint16_t tmp[256];
	for (size_t i = 0; i < n; i += 256) {
		size_t k = n - i < 256 ? n - i : 256;
		ad_f32_to_fp16_row(x + i, tmp, k);
		ad_fp16_to_f32_row(tmp, x + i, k);
	}
}

// the context's thread pool (common/pool.h): after a job a worker polls
// for the next one a little while before it sleeps: an eval runs its convs
// back to back with short gaps, and a sleeping worker wakes too late for a
// decode-sized conv (tens of us), so it would all run on the caller
// (896x896, one column, 2 threads: 27-40 us without polling, 17-25 us
// with). 200 us, not 50, outlasts the cpu-worker's work between a decode's
// calls (attention, ~20-60 us a layer, and the round trip), so the first
// conv of the next call (the o projection) finds the worker awake: decode
// +1.4% on the Qwen2.5-0.5B shape, +3-5% on SmolLM2's (4 alternations, the
// worker polling with sched_yield, so a busy machine lost nothing).
// ANEDVD_POOL_SPIN_US, read at emu_open, sets it.
#define POOL_SPIN_NS 200000
// the caller, its share done, spins for the workers' last tasks this long
// before it sleeps (a task is a slice of one conv, tens of microseconds at
// most): sleeping at once cost every conv of a decode step a wake-up, and
// on a VM an idle vCPU takes ~50 us to wake
#define POOL_WAIT_SPIN_NS 200000
// convs of fewer columns run on the calling thread alone (emu_opts.par_cols)
#define EMU_PAR_COLS 1

struct emu {
	struct ad_pool *pool;
	int nthreads;
	int force_ref; // the plain kernels everywhere (simd == EMU_SIMD_REF)
	int simd;      // the conv path, EMU_SIMD_REF .. AVX512
	int no_fuse;
	int par_cols; // emu_opts.par_cols
	// the activations of a wide conv packed for the AVX-512 tiles; one
	// context runs one eval at a time, so its kernels share it
	float *xpack;
	size_t xpack_cap; // floats
	// a wide int8 conv's panels widened to fp16, PSTEP * cin values for
	// each thread (conv_i8_wide)
	uint16_t *i8wide;
	size_t i8wide_cap; // values
	// a wide conv's group of panels widened to fp32, X512_WIDE_FLOATS
	// floats for each thread (conv512w)
	float *wide;
	size_t wide_cap;            // floats
	int steal;                  // one column from DRAM: ranges shared by stealing
	struct steal_range *ranges; // a range a task (run_conv)
	uint64_t steals;            // atomic: ranges stolen (emu_steals)
	// the activations of every kernel (its inputs, intermediates and
	// outputs in fp32), for the same reason: a kernel has its buffers only
	// while it runs, so a 24-layer model compiled 64 columns wide holds one
	// kernel's worth (~2 MB) rather than every kernel's (~100 MB)
	float *act;
	size_t act_cap;            // bytes
	struct ad_ready act_ready; // act's pages present (eval_io)
	// panel bytes of the context's live kernels, and the last-level
	// cache's size (0: unknown): whether weights stay cached between evals
	size_t weight_bytes, llc;
	// the kernels' panels, on huge pages (hugemem.h): a one-column conv
	// streams its weights once, and most of a model's weights are small
	// buffers that would each sit on 4 KiB pages
	struct ad_huge_arena *panels;
};

// ---------------------------------------------------------------------------
// moves between planar fp16 surfaces and the emu's [ncols][C] fp32 buffers
// (common/planar.h: 8x8 blocks transposed in registers; at 2 to 64 columns
// a channel at a time cost as much as a small conv). The layouts are the
// emu's own (fp16, height 1, checked at compile time).

// surface -> x ([ncols][ld]); l is fp16 with height 1 and ncols <= width;
// a wide one (an LM head's output) on the context's threads
static void
emu_gather(const struct emu *e, const struct ane_layout *l, const void *surf, float *x, size_t ncols, size_t ld)
{
	ad_planar_gather_pool(e->pool, surf, l->plane_stride, x, l->channels, ld, ncols, e->force_ref);
}

static void
emu_scatter(const struct emu *e, const struct ane_layout *l, void *surf, const float *x, size_t ncols, size_t ld)
{
	ad_planar_scatter_pool(e->pool, surf, l->plane_stride, x, l->channels, ld, ncols, e->force_ref);
}


struct par {
	void (*fn)(void *arg, size_t task);
	void *arg;
};

static void
par_task(void *arg, size_t t, int worker)
{
	(void)worker;
	const struct par *j = arg;
	j->fn(j->arg, t);
}

void
emu_parallel(struct emu *e, void (*fn)(void *arg, size_t task), void *arg, size_t ntasks)
{
	struct par j = {fn, arg};
	ad_pool_run(e->pool, par_task, &j, ntasks);
}

void
emu_hot(struct emu *e, int on)
{
	ad_pool_hot(e->pool, on);
}

uint64_t
emu_steals(const struct emu *e)
{
	return __atomic_load_n(&e->steals, __ATOMIC_RELAXED);
}

int
emu_nthreads(const struct emu *e)
{
	return e->nthreads;
}

int
emu_simd(const struct emu *e)
{
	return e->simd;
}

// the last-level (L3) cache's size from sysfs, 0 if unknown. Not
// sysconf(_SC_LEVEL3_CACHE_SIZE): glibc reports ten times the real 32 MiB
// on a Zen 4 VM.
static size_t
llc_bytes(void)
{
	FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
	if (!f)
		return 0;
	unsigned long v = 0;
	char unit = 0;
	int n = fscanf(f, "%lu%c", &v, &unit);
	fclose(f);
	if (n < 1)
		return 0;
	return (size_t)v << (unit == 'K' ? 10 : unit == 'M' ? 20 : 0);
}

// AMD family 19h: Zen 4 (and Zen 3, which has no AVX-512), where the
// one-column defaults below were measured
static int
zen4(void)
{
	return ad_cpu_amd_family() == 0x19;
}

long
emu_prefetch_env(void)
{
	const char *e = getenv("ANEDVD_PREFETCH_AHEAD");
	if (!e || !*e)
		return -1;
	char *end;
	errno = 0;
	long v = strtol(e, &end, 10);
	return errno || *end || end == e || v < 0 || v > EMU_PREFETCH_MAX ? -2 : v;
}

// How far ahead one column's stream is prefetched into L2, measured as the
// decode pass of the Qwen2.5-0.5B shape (anedvd-dev kernels: every kernel
// once, one column, 2 threads) over a streaming read in the same process:
// - AMD Zen 4: fp16 1 KiB ahead, 0.87 to 0.95 of the read (one thread per
//   stream; more streams or L1 prefetches did worse, see X512_COL_WARM);
//   8 KiB gave 0.85-0.89 on both shapes. Weights of a byte or less (int8,
//   lut4) 8 KiB: the SmolLM2-135M shape's int8 pass 0.60-0.79 of the read
//   at 1 KiB, 0.75-0.87 at 8 KiB, 0.80-0.86 at 12 and 16 KiB; lut4 0.42-0.63
//   against 0.62-0.71; Qwen2.5's int8 0.88-0.92 at either.
// - Intel Xeon (family 6 model 207), fp16: none 0.65, 1 KiB 0.69, 2 KiB
//   0.81, 3 KiB 0.90-0.93, 4 KiB 0.92-0.94, 6 KiB 0.88-0.98 (4 runs of 6 at
//   0.94 or more), 8 to 12 KiB 0.92-0.94; int8: 1 KiB 0.64, 4 KiB 0.89,
//   6 KiB 0.90-1.02, 8 to 12 KiB 0.87-0.92.
// - AMD Zen 5 (family 1Ah; its 2-thread read 35-65 GB/s): 1 KiB 0.70-0.74
//   of the read (fp16), 0.59-0.70 (int8); 8 KiB, stealing too, 0.82-0.98
//   and 0.69-0.82, the pass 15-40% faster on all four bench models; 16
//   KiB no better than 8 (3 alternating rounds of each).
// (Intel's L2 streamer is documented not to cross a 4 KiB boundary,
// whatever the page size; a software prefetch runs on regardless.)

// Non-temporal prefetches on Zen 4, measured with run --json --no-spec
// (64-token prompt, 64 tokens), alternating with the prefetch into L2:
// SmolLM2-135M Q8_0 (int8) decode 192-232 -> 212-229 tok/s over 7 pairs
// (median 212 -> 219), the client's attention 0.20-0.24 -> 0.16-0.21 ms a
// token (its keys and values no longer evicted by the weights' stream), the
// share outside the kernels 12.9-15.3% -> 10.8-12.7%; its decode pass
// 0.84-0.88 -> 0.87-0.91 of the read; Qwen2.5-0.5B Q8_0 59-64 -> 63-78
// tok/s (3 pairs). With fp16 weights SmolLM2's share outside the kernels
// fell as well (7.9-13.6% -> 6.7-9.6%, 10 pairs) but its decode did not
// get faster, nor did Qwen2.5 F16's (31-48 tok/s either way: the VM's
// memory moved more than that), and the fp16 pass was 0.89-0.96 against
// 0.94-0.95: fp16 keeps L2.
int
emu_prefetch_nta_env(void)
{
	const char *e = getenv("ANEDVD_PREFETCH_NTA");
	if (!e || !*e)
		return -1;
	return !strcmp(e, "0") ? 0 : !strcmp(e, "1") ? 1 : -2;
}

// the one-column prefetch of a weight kind (narrow: int8, lut4), worked
// out once: the distance in bytes << 1 | non-temporal, from the settings or
// else the CPU's kind (both above)
static long
prefetch_of(int narrow)
{
	static long v[2] = {-1, -1};
	narrow = narrow != 0;
	long r = __atomic_load_n(&v[narrow], __ATOMIC_RELAXED);
	if (r < 0) { // a bad setting is refused at start: emu_simd_env
		long bytes = emu_prefetch_env(), nta = emu_prefetch_nta_env();
		if (bytes < 0)
			bytes = zen4() ? (narrow ? 8192 : 1024) : ad_cpu_amd_family() ? 8192 : 6144;
		if (nta < 0)
			nta = narrow && zen4();
		r = bytes << 1 | nta;
		__atomic_store_n(&v[narrow], r, __ATOMIC_RELAXED);
	}
	return r;
}

size_t
emu_prefetch_steps(int narrow)
{
	return (size_t)(prefetch_of(narrow) >> 1) / 64;
}

int
emu_prefetch_nta(int narrow)
{
	return (int)(prefetch_of(narrow) & 1);
}

int
emu_simd_env(int *level, char *err)
{
	const int cap = ad_simd_env();
	*level = cap < 0 ? EMU_SIMD_AUTO : EMU_SIMD_REF + cap;
	if (cap == -2)
		return ad_err(err, "emu: ANEDVD_SIMD=%s: expected ref, avx2 or avx512", getenv("ANEDVD_SIMD"));
	if (emu_i8_one_col_env() == -2)
		return ad_err(err, "emu: ANEDVD_I8_ONE_COL=%s: expected avx2 or avx512", getenv("ANEDVD_I8_ONE_COL"));
	if (emu_prefetch_env() == -2)
		return ad_err(err, "emu: ANEDVD_PREFETCH_AHEAD=%s: expected bytes from 0 to %d",
		              getenv("ANEDVD_PREFETCH_AHEAD"), EMU_PREFETCH_MAX);
	if (emu_prefetch_nta_env() == -2)
		return ad_err(err, "emu: ANEDVD_PREFETCH_NTA=%s: expected 0 or 1", getenv("ANEDVD_PREFETCH_NTA"));
	return 0;
}

struct emu *
emu_open(const struct emu_opts *opts, char *err)
{
	struct emu *e = calloc(1, sizeof *e);
	if (!e) {
		ad_err(err, "emu: out of memory");
		return NULL;
	}
	e->nthreads = opts && opts->threads > 0 ? opts->threads : 2;
	long spin_ns = POOL_SPIN_NS;
	const char *ps = getenv("ANEDVD_POOL_SPIN_US");
	if (ps && *ps)
		spin_ns = strtol(ps, NULL, 10) * 1000L;
	if (e->nthreads > 256)
		e->nthreads = 256;
	int simd = opts ? opts->simd : EMU_SIMD_AUTO;
	if (simd < EMU_SIMD_AUTO || simd > EMU_SIMD_AVX512) {
		free(e);
		ad_err(err, "emu: simd level %d: expected EMU_SIMD_AUTO .. EMU_SIMD_AVX512", simd);
		return NULL;
	}
	int env_simd; // the settings checked whatever the options say
	if (emu_simd_env(&env_simd, err)) {
		free(e);
		return NULL;
	}
	if (simd == EMU_SIMD_AUTO)
		simd = env_simd;
	if (opts && opts->force_ref)
		simd = EMU_SIMD_REF;
	e->simd = simd_cap(simd);
	e->force_ref = e->simd == EMU_SIMD_REF;
	e->no_fuse = opts ? opts->no_fuse : 0;
	e->par_cols = opts && opts->par_cols > 0 ? opts->par_cols : EMU_PAR_COLS;
	const char *pc = getenv("ANEDVD_EMU_PAR_COLS");
	if ((!opts || opts->par_cols <= 0) && pc && *pc)
		e->par_cols = (int)strtol(pc, NULL, 10);
	e->llc = opts && opts->cold ? 0 : llc_bytes();
	e->steal = opts && opts->steal ? opts->steal > 0 : !zen4();
	if (!(e->panels = ad_huge_arena_new(0))) {
		ad_err(err, "emu: out of memory");
		emu_close(e);
		return NULL;
	}
	const struct ad_pool_opts po = {e->nthreads, spin_ns, POOL_WAIT_SPIN_NS, "emu pool"};
	if (!(e->pool = ad_pool_new(&po, err))) {
		emu_close(e);
		return NULL;
	}
	if (ad_pool_threads(e->pool) < e->nthreads) {
		ad_err(err, "emu: could start %d of %d threads", ad_pool_threads(e->pool), e->nthreads);
		emu_close(e);
		return NULL;
	}
	return e;
}

void
emu_close(struct emu *e)
{
	if (!e)
		return;
	ad_pool_free(e->pool);
	ad_huge_arena_free(e->panels);
	free(e->xpack);
	free(e->i8wide);
	free(e->wide);
	free(e->ranges);
	free(e->act);
	ad_ready_clear(&e->act_ready);
	free(e);
}

// ---------------------------------------------------------------------------
// tokenizer

enum tok_kind { T_EOF, T_IDENT, T_NUM, T_STR, T_PUNCT, T_ARROW };

struct tok {
	enum tok_kind k;
	int line;
	const char *s; // start in the source
	size_t n;
	char c; // the character of a T_PUNCT
};

struct parser {
	const char *src;
	struct tok *toks;
	size_t ntoks, pos;
	char *err;
	int failed;
};

static int perr(struct parser *ps, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int
perr(struct parser *ps, int line, const char *fmt, ...)
{
	if (ps->failed)
		return -1;
	ps->failed = 1;
	va_list ap;
	va_start(ap, fmt);
	ad_verr(ps->err, fmt, ap);
	va_end(ap);
	return line > 0 ? ad_err_prefix(ps->err, "mil line %d", line) : ad_err_prefix(ps->err, "mil");
}

static int
tokenize(struct parser *ps)
{
	const char *s = ps->src;
	size_t cap = 1024, n = 0;
	int line = 1;
	ps->toks = malloc(cap * sizeof *ps->toks);
	if (!ps->toks)
		return perr(ps, 0, "out of memory");
	for (;;) {
		while (*s && isspace((unsigned char)*s)) {
			if (*s == '\n')
				line++;
			s++;
		}
		if (n + 1 >= cap) {
			cap *= 2;
			struct tok *t = realloc(ps->toks, cap * sizeof *t);
			if (!t)
				return perr(ps, line, "out of memory");
			ps->toks = t;
		}
		struct tok *t = &ps->toks[n];
		*t = (struct tok){.line = line, .s = s};
		if (!*s) {
			t->k = T_EOF;
			n++;
			break;
		}
		unsigned char c = (unsigned char)*s;
		if (isalpha(c) || c == '_' || c == '@') {
			while (isalnum((unsigned char)*s) || *s == '_' || *s == '@' || *s == '.')
				s++;
			t->k = T_IDENT;
		} else if (isdigit(c) || ((c == '-' || c == '+') && isdigit((unsigned char)s[1]))) {
			s++;
			// decimal, exponent and hex-float forms; strtod/strtoll judge later
			while (isalnum((unsigned char)*s) || *s == '.' ||
			       ((*s == '-' || *s == '+') &&
			        (s[-1] == 'e' || s[-1] == 'E' || s[-1] == 'p' || s[-1] == 'P')))
				s++;
			t->k = T_NUM;
		} else if (c == '"') {
			s++;
			while (*s && *s != '"' && *s != '\n')
				s++;
			if (*s != '"')
				return perr(ps, line, "unterminated string");
			s++;
			t->k = T_STR;
		} else if (c == '-' && s[1] == '>') {
			s += 2;
			t->k = T_ARROW;
		} else if (strchr("()[]{}<>,=;", c)) {
			s++;
			t->k = T_PUNCT;
			t->c = (char)c;
		} else {
			return perr(ps, line, "unexpected character '%c'", c);
		}
		t->n = (size_t)(s - t->s);
		n++;
	}
	ps->ntoks = n;
	return 0;
}

static struct tok *
peek(struct parser *ps)
{
	return &ps->toks[ps->pos];
}

static struct tok *
next(struct parser *ps)
{
	struct tok *t = &ps->toks[ps->pos];
	if (t->k != T_EOF)
		ps->pos++;
	return t;
}

static int
is_punct(const struct tok *t, char c)
{
	return t->k == T_PUNCT && t->c == c;
}

static int
is_word(const struct tok *t, const char *w)
{
	return t->k == T_IDENT && t->n == strlen(w) && !memcmp(t->s, w, t->n);
}

static int
expect_punct(struct parser *ps, char c)
{
	struct tok *t = next(ps);
	if (!is_punct(t, c))
		return perr(ps, t->line, "expected '%c', found '%.*s'", c, (int)t->n, t->s);
	return 0;
}

static int
expect_word(struct parser *ps, const char *w)
{
	struct tok *t = next(ps);
	if (!is_word(t, w))
		return perr(ps, t->line, "expected '%s', found '%.*s'", w, (int)t->n, t->s);
	return 0;
}

static int
take_ident(struct parser *ps, char *out, size_t cap)
{
	struct tok *t = next(ps);
	if (t->k != T_IDENT)
		return perr(ps, t->line, "expected a name, found '%.*s'", (int)t->n, t->s);
	if (t->n >= cap)
		return perr(ps, t->line, "name '%.*s' longer than %zu", (int)t->n, t->s, cap - 1);
	memcpy(out, t->s, t->n);
	out[t->n] = 0;
	return 0;
}

static int
take_int(struct parser *ps, long long *v)
{
	struct tok *t = next(ps);
	char buf[64], *end;
	if (t->k != T_NUM || t->n >= sizeof buf)
		return perr(ps, t->line, "expected an integer, found '%.*s'", (int)t->n, t->s);
	memcpy(buf, t->s, t->n);
	buf[t->n] = 0;
	errno = 0;
	*v = strtoll(buf, &end, 10);
	if (*end || errno)
		return perr(ps, t->line, "bad integer '%s'", buf);
	return 0;
}

// ---------------------------------------------------------------------------
// program representation

struct type {
	int tensor; // tensor<dtype, [dims]> or a scalar dtype
	char dtype[16];
	int rank;
	long long dims[MAX_RANK];
};

enum val_kind { V_NONE, V_VAR, V_STR, V_INT, V_FLOAT, V_BOOL, V_INTS, V_BLOB };

struct val {
	enum val_kind k;
	int line;
	struct type t; // literal's type (scalar name, or tensor<...>)
	char s[256];   // V_VAR name, V_STR text, V_BLOB path
	long long i;   // V_INT, V_BOOL, V_BLOB offset
	double f;
	int nints;
	long long ints[MAX_RANK];
};

struct arg {
	char key[MAX_NAME];
	struct val v;
};

enum var_kind { VAR_INPUT, VAR_CONST, VAR_OP };

struct var {
	char name[MAX_NAME];
	enum var_kind kind;
	int line;
	struct type t;
	struct val cval; // VAR_CONST: its value
	int blob;        // VAR_CONST with BLOBFILE: index into k->weights, or -1
	int buf;         // activation buffer index, or -1
	int unscaled;    // constexpr_lut_to_dense's: a conv takes it only with its scales
};

enum step_op { S_CONV, S_ADD, S_MUL, S_SIGMOID };

struct step {
	enum step_op op;
	int y, a, b;  // buffer indices (b = -1: scalar operand or unary)
	int weight;   // S_CONV: k->weights index
	float scalar; // binary op with an inline scalar
	size_t cin, cout;
};

struct weight {
	size_t cout, cin;
	uint16_t *panels;       // NULL until a conv uses it
	int borrowed;           // panels belong to the caller of emu_compile_packed
	const uint8_t *payload; // during compile only
	// int8 (constexpr_affine_dequantize): panels of int8, one scale per row
	int i8;
	int8_t *qpanels;
	// 4-bit palettised (constexpr_lut_to_dense, constexpr_blockwise_shift_scale):
	// indices (emu_l4_pack's layout), a table of 16 a quad of 64 rows, the
	// rows' scales in scale
	int l4;
	uint8_t *lpanels;
	uint16_t *lut;           // fp16, as the program gives it
	const uint8_t *lpayload; // the fp16 tables, during compile only
	int scaled;              // l4: its constexpr_blockwise_shift_scale seen
	size_t ltables;          // l4: tables in the program (1, or one a quad)
	uint16_t *scale;         // npanels * 16, fp16 as the program gives them
	const uint8_t *spayload; // the fp16 scales, during compile only
	int mapped;              // payload lies in a blob file's private read-only mapping
};

struct bufdesc {
	size_t channels;
	size_t off;  // bytes into the context's activations
	float *data; // [width][channels], set by emu_eval
	// an input whose only readers are convs over packed x: its surface
	// (plane_stride ps), packed from directly, and data left unfilled
	// (eval_io); NULL: data holds the values
	const uint8_t *surf;
	size_t ps;
	int unused; // never written: a fused gate's intermediate (layout_bufs)
};

struct io {
	char name[MAX_NAME];
	int buf;
	struct ane_layout layout;
};

struct emu_kernel {
	struct emu *e;
	size_t width;
	struct io *in, *out;
	int nin, nout;
	struct step *steps;
	int nsteps;
	struct weight *weights;
	int nweights;
	struct bufdesc *bufs;
	int nbufs;
	size_t in_cap, out_cap;
	size_t act_bytes; // the buffers' room in the context's activations
	uint64_t weight_bytes;
};

// a blob file opened for compile
struct bfile {
	char name[256];
	const uint8_t *img;
	size_t len;
	void *map; // mmap'd, to unmap
	struct ane_blob_chunk *chunks;
	int nchunks;
};

struct compiler {
	struct parser ps;
	struct emu_kernel *k;
	struct var *vars;
	int nvars, capvars;
	const struct emu_file *files;
	int nfiles;
	struct bfile *bf;
	int nbf;
	int inline_scalar_line; // first op with an inline scalar operand, 0: none
	int nblob;
	// emu_compile_packed: the constant buffers, taken instead of blob files
	const struct emu_const *packed;
	int npacked, use_packed;
};

static int
type_str(const struct type *t, char *buf, size_t cap)
{
	if (!t->tensor)
		return snprintf(buf, cap, "%s", t->dtype);
	int n = snprintf(buf, cap, "tensor<%s, [", t->dtype);
	for (int i = 0; i < t->rank && (size_t)n < cap; i++)
		n += snprintf(buf + n, cap - (size_t)n, "%s%lld", i ? ", " : "", t->dims[i]);
	if ((size_t)n < cap)
		n += snprintf(buf + n, cap - (size_t)n, "]>");
	return n;
}

static int
type_eq(const struct type *a, const struct type *b)
{
	if (a->tensor != b->tensor || strcmp(a->dtype, b->dtype) || a->rank != b->rank)
		return 0;
	for (int i = 0; i < a->rank; i++)
		if (a->dims[i] != b->dims[i])
			return 0;
	return 1;
}

static const char *const dtypes[] = {"fp16",   "fp32",  "int32", "int8",   "uint8", "uint4",
                                     "uint64", "int64", "bool",  "string", NULL};

static int
parse_dtype(struct parser *ps, char *out)
{
	struct tok *t = peek(ps);
	for (int i = 0; dtypes[i]; i++)
		if (is_word(t, dtypes[i])) {
			next(ps);
			strcpy(out, dtypes[i]);
			return 0;
		}
	return perr(ps, t->line, "unknown type '%.*s'", (int)t->n, t->s);
}

static int
parse_type(struct parser *ps, struct type *t)
{
	memset(t, 0, sizeof *t);
	if (!is_word(peek(ps), "tensor"))
		return parse_dtype(ps, t->dtype);
	next(ps);
	t->tensor = 1;
	if (expect_punct(ps, '<') || parse_dtype(ps, t->dtype) || expect_punct(ps, ',') || expect_punct(ps, '['))
		return -1;
	if (!is_punct(peek(ps), ']'))
		for (;;) {
			long long d;
			int line = peek(ps)->line;
			if (take_int(ps, &d))
				return -1;
			if (t->rank == MAX_RANK)
				return perr(ps, line, "tensor rank above %d", MAX_RANK);
			// bounded so that no size computed from dims can overflow
			if (d < 1 || d > ANE_MIL_MAX_DIM)
				return perr(ps, line, "tensor dimension %lld out of range [1, %d]", d, ANE_MIL_MAX_DIM);
			t->dims[t->rank++] = d;
			if (!is_punct(peek(ps), ','))
				break;
			next(ps);
		}
	return expect_punct(ps, ']') || expect_punct(ps, '>');
}

static int parse_val(struct parser *ps, struct val *v);

// BLOBFILE(path = string("..."), offset = uint64(N))
static int
parse_blobfile(struct parser *ps, struct val *v)
{
	struct val p, o;
	char key[MAX_NAME];
	int have_path = 0, have_off = 0;
	if (expect_punct(ps, '('))
		return -1;
	for (;;) {
		int line = peek(ps)->line;
		if (take_ident(ps, key, sizeof key) || expect_punct(ps, '='))
			return -1;
		if (!strcmp(key, "path")) {
			if (parse_val(ps, &p))
				return -1;
			if (p.k != V_STR)
				return perr(ps, line, "BLOBFILE path must be a string");
			have_path = 1;
		} else if (!strcmp(key, "offset")) {
			if (parse_val(ps, &o))
				return -1;
			if (o.k != V_INT || strcmp(o.t.dtype, "uint64") || o.i < 0)
				return perr(ps, line, "BLOBFILE offset must be uint64(N)");
			have_off = 1;
		} else {
			return perr(ps, line, "unknown BLOBFILE field '%s'", key);
		}
		if (!is_punct(peek(ps), ','))
			break;
		next(ps);
	}
	if (expect_punct(ps, ')'))
		return -1;
	if (!have_path || !have_off)
		return perr(ps, v->line, "BLOBFILE needs both path and offset");
	v->k = V_BLOB;
	snprintf(v->s, sizeof v->s, "%s", p.s);
	v->i = o.i;
	return 0;
}

// a literal or a variable reference
static int
parse_val(struct parser *ps, struct val *v)
{
	memset(v, 0, sizeof *v);
	struct tok *t = peek(ps);
	v->line = t->line;
	if (t->k != T_IDENT)
		return perr(ps, t->line, "expected a value, found '%.*s'", (int)t->n, t->s);
	if (is_word(t, "tensor")) {
		if (parse_type(ps, &v->t) || expect_punct(ps, '('))
			return -1;
		if (is_word(peek(ps), "BLOBFILE")) {
			next(ps);
			if (parse_blobfile(ps, v))
				return -1;
		} else {
			if (expect_punct(ps, '['))
				return -1;
			v->k = V_INTS;
			if (!is_punct(peek(ps), ']'))
				for (;;) {
					if (v->nints == MAX_RANK)
						return perr(ps, t->line, "tensor literal longer than %d", MAX_RANK);
					if (take_int(ps, &v->ints[v->nints++]))
						return -1;
					if (!is_punct(peek(ps), ','))
						break;
					next(ps);
				}
			if (expect_punct(ps, ']'))
				return -1;
			if (strcmp(v->t.dtype, "int32") || v->t.rank != 1 || v->t.dims[0] != v->nints)
				return perr(ps, t->line, "only int32 vector literals are supported");
		}
		return expect_punct(ps, ')');
	}
	if (is_word(t, "BLOBFILE"))
		return perr(ps, t->line, "BLOBFILE must be wrapped in a tensor<...>(...) literal");
	next(ps);
	if (!is_punct(peek(ps), '(')) { // a variable
		if (t->n >= MAX_NAME)
			return perr(ps, t->line, "name too long");
		v->k = V_VAR;
		memcpy(v->s, t->s, t->n);
		v->s[t->n] = 0;
		return 0;
	}
	// scalar literal: dtype(value)
	int known = 0;
	for (int i = 0; dtypes[i]; i++)
		if (is_word(t, dtypes[i])) {
			strcpy(v->t.dtype, dtypes[i]);
			known = 1;
		}
	if (!known)
		return perr(ps, t->line, "unknown literal type '%.*s'", (int)t->n, t->s);
	next(ps); // '('
	struct tok *a = next(ps);
	char buf[256], *end;
	if (a->n >= sizeof buf)
		return perr(ps, a->line, "literal too long");
	memcpy(buf, a->s, a->n);
	buf[a->n] = 0;
	if (!strcmp(v->t.dtype, "string")) {
		if (a->k != T_STR)
			return perr(ps, a->line, "string() needs a quoted string");
		v->k = V_STR;
		snprintf(v->s, sizeof v->s, "%.*s", (int)a->n - 2, a->s + 1);
	} else if (!strcmp(v->t.dtype, "bool")) {
		if (!is_word(a, "true") && !is_word(a, "false"))
			return perr(ps, a->line, "bool() needs true or false");
		v->k = V_BOOL;
		v->i = is_word(a, "true");
	} else if (!strcmp(v->t.dtype, "fp16") || !strcmp(v->t.dtype, "fp32")) {
		errno = 0;
		v->f = strtod(buf, &end);
		if (a->k != T_NUM || *end || errno)
			return perr(ps, a->line, "bad float literal '%s'", buf);
		v->k = V_FLOAT;
	} else {
		errno = 0;
		v->i = strtoll(buf, &end, 10);
		if (a->k != T_NUM || *end || errno)
			return perr(ps, a->line, "bad integer literal '%s'", buf);
		v->k = V_INT;
	}
	return expect_punct(ps, ')');
}

static int
parse_args(struct parser *ps, char close, struct arg *args, int max, int *n)
{
	*n = 0;
	if (is_punct(peek(ps), close)) {
		next(ps);
		return 0;
	}
	for (;;) {
		int line = peek(ps)->line;
		if (*n == max)
			return perr(ps, line, "too many arguments");
		struct arg *a = &args[*n];
		if (take_ident(ps, a->key, sizeof a->key) || expect_punct(ps, '=') || parse_val(ps, &a->v))
			return -1;
		for (int i = 0; i < *n; i++)
			if (!strcmp(args[i].key, a->key))
				return perr(ps, line, "argument '%s' given twice", a->key);
		(*n)++;
		if (!is_punct(peek(ps), ','))
			break;
		next(ps);
	}
	return expect_punct(ps, close);
}

static struct arg *
find_arg(struct arg *args, int n, const char *key)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(args[i].key, key))
			return &args[i];
	return NULL;
}

// ---------------------------------------------------------------------------
// semantic checks

static struct var *
find_var(struct compiler *c, const char *name)
{
	for (int i = 0; i < c->nvars; i++)
		if (!strcmp(c->vars[i].name, name))
			return &c->vars[i];
	return NULL;
}

static struct var *
add_var(struct compiler *c, const char *name, enum var_kind kind, int line, const struct type *t)
{
	if (find_var(c, name)) {
		perr(&c->ps, line, "'%s' defined twice", name);
		return NULL;
	}
	if (c->nvars == c->capvars) {
		int cap = c->capvars ? c->capvars * 2 : 64;
		struct var *v = realloc(c->vars, (size_t)cap * sizeof *v);
		if (!v) {
			perr(&c->ps, line, "out of memory");
			return NULL;
		}
		c->vars = v;
		c->capvars = cap;
	}
	struct var *v = &c->vars[c->nvars++];
	memset(v, 0, sizeof *v);
	snprintf(v->name, sizeof v->name, "%s", name);
	v->kind = kind;
	v->line = line;
	v->t = *t;
	v->blob = -1;
	v->buf = -1;
	return v;
}

// an activation: tensor<fp16, [1, C, 1, W]> with W the program's width
static int
check_act(struct compiler *c, int line, const char *name, const struct type *t)
{
	char ts[128];
	type_str(t, ts, sizeof ts);
	if (!t->tensor || strcmp(t->dtype, "fp16") || t->rank != 4 || t->dims[0] != 1 || t->dims[2] != 1)
		return perr(&c->ps, line, "'%s' is %s; activations must be tensor<fp16, [1, C, 1, W]>", name, ts);
	if (!c->k->width)
		c->k->width = (size_t)t->dims[3];
	else if ((size_t)t->dims[3] != c->k->width)
		return perr(&c->ps, line, "'%s' has width %lld, the program's width is %zu", name, t->dims[3],
		            c->k->width);
	return 0;
}

static int
new_buf(struct compiler *c, size_t channels)
{
	struct emu_kernel *k = c->k;
	struct bufdesc *b = realloc(k->bufs, (size_t)(k->nbufs + 1) * sizeof *b);
	if (!b)
		return -1;
	k->bufs = b;
	k->bufs[k->nbufs] = (struct bufdesc){.channels = channels};
	return k->nbufs++;
}

static struct bfile *
open_bfile(struct compiler *c, int line, const char *path)
{
	static const char prefix[] = "@model_path/weights/";
	if (strncmp(path, prefix, sizeof prefix - 1)) {
		perr(&c->ps, line, "BLOBFILE path '%s' does not start with %s", path, prefix);
		return NULL;
	}
	const char *name = path + sizeof prefix - 1;
	for (int i = 0; i < c->nbf; i++)
		if (!strcmp(c->bf[i].name, name))
			return &c->bf[i];
	const struct emu_file *f = NULL;
	for (int i = 0; i < c->nfiles; i++)
		if (!strcmp(c->files[i].name, name))
			f = &c->files[i];
	if (!f) {
		perr(&c->ps, line, "BLOBFILE '%s': no weight file named '%s' was given", path, name);
		return NULL;
	}
	struct bfile *bf = realloc(c->bf, (size_t)(c->nbf + 1) * sizeof *bf);
	if (!bf) {
		perr(&c->ps, line, "out of memory");
		return NULL;
	}
	c->bf = bf;
	struct bfile *b = &c->bf[c->nbf];
	memset(b, 0, sizeof *b);
	snprintf(b->name, sizeof b->name, "%s", name);
	if (f->data) {
		b->img = f->data;
		b->len = f->len;
	} else {
		int fd = open(f->path, O_RDONLY);
		struct stat st;
		if (fd < 0 || fstat(fd, &st) < 0) {
			perr(&c->ps, line, "weight file %s: %s", f->path, strerror(errno));
			if (fd >= 0)
				close(fd);
			return NULL;
		}
		b->len = (size_t)st.st_size;
		if (b->len) {
			b->map = mmap(NULL, b->len, PROT_READ, MAP_PRIVATE, fd, 0);
			if (b->map == MAP_FAILED) {
				b->map = NULL;
				close(fd);
				perr(&c->ps, line, "weight file %s: mmap: %s", f->path, strerror(errno));
				return NULL;
			}
		}
		close(fd);
		b->img = b->map;
	}
	c->nbf++; // from here on the file is released by the compiler's cleanup
	char e[AD_ERRLEN];
	int n = ane_blob_scan(b->img, b->len, NULL, 0, e);
	if (n < 0) {
		perr(&c->ps, line, "weight file '%s': %s", name, e);
		return NULL;
	}
	b->chunks = malloc((size_t)n * sizeof *b->chunks);
	if (!b->chunks) {
		perr(&c->ps, line, "out of memory");
		return NULL;
	}
	b->nchunks = ane_blob_scan(b->img, b->len, b->chunks, n, NULL);
	return b;
}

static const uint8_t *blob_payload(struct compiler *c, struct var *v, const struct val *x, int dt, int *mapped);

// a BLOBFILE const of v's type; payload NULL with packed constants
static int
add_weight(struct compiler *c, struct var *v, const uint8_t *payload, int mapped)
{
	struct emu_kernel *k = c->k;
	struct weight *w = realloc(k->weights, (size_t)(k->nweights + 1) * sizeof *w);
	if (!w)
		return perr(&c->ps, v->line, "out of memory");
	k->weights = w;
	k->weights[k->nweights] = (struct weight){.payload = payload, .mapped = mapped};
	if (v->t.rank == 4) {
		k->weights[k->nweights].cout = (size_t)v->t.dims[0];
		k->weights[k->nweights].cin = (size_t)v->t.dims[1];
	}
	v->blob = k->nweights++;
	return 0;
}

static int
do_const(struct compiler *c, struct var *v, struct arg *attrs, int nattrs)
{
	struct parser *ps = &c->ps;
	struct arg *val = find_arg(attrs, nattrs, "val");
	if (!val)
		return perr(ps, v->line, "const '%s' has no val", v->name);
	if (nattrs != 2)
		return perr(ps, v->line, "const '%s': attributes must be exactly name and val", v->name);
	struct val *x = &val->v;
	char dt[128], vt[128];
	type_str(&v->t, dt, sizeof dt);
	type_str(&x->t, vt, sizeof vt);
	if (x->k == V_VAR)
		return perr(ps, v->line, "const '%s' needs a literal value", v->name);
	if (!type_eq(&v->t, &x->t))
		return perr(ps, v->line, "const '%s' declared %s but its value is %s", v->name, dt, vt);
	v->cval = *x;
	if (x->k != V_BLOB)
		return 0;
	// a weight: fp16, size checked against the chunk it points at
	if (strcmp(v->t.dtype, "fp16"))
		return perr(ps, v->line,
		            "BLOBFILE const '%s' is %s; only fp16 weights are supported (int8 "
		            "ones as the quantized_data of a constexpr_affine_dequantize)",
		            v->name, dt);
	c->nblob++;
	if (c->use_packed)
		return add_weight(c, v, NULL, 0);
	int mapped = 0;
	const uint8_t *payload = blob_payload(c, v, x, ANE_BLOB_DT_FP16, &mapped);
	if (!payload)
		return -1;
	return add_weight(c, v, payload, mapped);
}

// the payload of the chunk a BLOBFILE value x (of const v) points at,
// checked against x's type: element type dt and size; NULL after perr
static const uint8_t *
blob_payload(struct compiler *c, struct var *v, const struct val *x, int dt, int *mapped)
{
	struct parser *ps = &c->ps;
	char dt_s[128];
	type_str(&x->t, dt_s, sizeof dt_s);
	struct bfile *b = open_bfile(c, x->line ? x->line : v->line, x->s);
	if (!b)
		return NULL;
	const struct ane_blob_chunk *ch = NULL;
	for (int i = 0; i < b->nchunks; i++)
		if (b->chunks[i].header == (uint64_t)x->i)
			ch = &b->chunks[i];
	if (!ch) {
		char hs[160];
		int n = 0;
		for (int i = 0; i < b->nchunks && i < 6 && n < (int)sizeof hs - 24; i++)
			n += snprintf(hs + n, sizeof hs - (size_t)n, "%s%llu", i ? ", " : "",
			              (unsigned long long)b->chunks[i].header);
		if (b->nchunks > 6)
			snprintf(hs + n, sizeof hs - (size_t)n, ", ...");
		perr(ps, v->line, "const '%s': BLOBFILE offset %lld in '%s' is not a chunk header (headers at %s)",
		     v->name, x->i, b->name, hs);
		return NULL;
	}
	uint64_t elems = 1;
	for (int i = 0; i < x->t.rank; i++)
		elems *= (uint64_t)x->t.dims[i];
	uint64_t need = dt == ANE_BLOB_DT_UINT4 ? (elems + 1) / 2 : elems * (dt == ANE_BLOB_DT_INT8 ? 1 : 2);
	if (ch->dtype != dt) {
		perr(ps, v->line, "const '%s' %s: the chunk at %lld in '%s' holds %s values", v->name, dt_s, x->i,
		     b->name,
		     ch->dtype == ANE_BLOB_DT_INT8    ? "int8"
		     : ch->dtype == ANE_BLOB_DT_UINT4 ? "uint4"
		                                      : "fp16");
		return NULL;
	}
	if (ch->bytes != need) {
		perr(ps, v->line, "const '%s' %s needs %llu bytes, the chunk at %lld in '%s' holds %llu", v->name, dt_s,
		     (unsigned long long)need, x->i, b->name, (unsigned long long)ch->bytes);
		return NULL;
	}
	if (mapped)
		*mapped = b->map != NULL;
	return b->img + ch->data;
}

// w = constexpr_affine_dequantize()[axis, name, quantized_data, scale,
// zero_point]: exactly the form mil.h emits, anything else refused with
// what was expected
static int
do_dequant(struct compiler *c, struct var *v, int nargs, struct arg *attrs, int nattrs)
{
	struct parser *ps = &c->ps;
	static const char *const keys[] = {"axis", "name", "quantized_data", "scale", "zero_point"};
	const char *op = "constexpr_affine_dequantize";
	char ts[128];
	type_str(&v->t, ts, sizeof ts);
	if (nargs)
		return perr(ps, v->line,
		            "%s '%s' takes its operands as arguments; only the attribute form [axis = ..., "
		            "quantized_data = ..., scale = ..., zero_point = ...] is accepted (the other is refused "
		            "on the device)",
		            op, v->name);
	for (int i = 0; i < nattrs; i++) {
		int known = 0;
		for (size_t j = 0; j < sizeof keys / sizeof keys[0]; j++)
			known |= !strcmp(attrs[i].key, keys[j]);
		if (!known)
			return perr(ps, v->line,
			            "%s '%s': unknown attribute '%s' (expected axis, name, "
			            "quantized_data, scale, zero_point)",
			            op, v->name, attrs[i].key);
	}
	for (size_t j = 0; j < sizeof keys / sizeof keys[0]; j++)
		if (!find_arg(attrs, nattrs, keys[j]))
			return perr(ps, v->line, "%s '%s' without %s", op, v->name, keys[j]);
	const struct type *t = &v->t;
	if (!t->tensor || strcmp(t->dtype, "fp16") || t->rank != 4 || t->dims[2] != 1 || t->dims[3] != 1)
		return perr(ps, v->line,
		            "%s '%s' is %s; only conv weights tensor<fp16, [COUT, CIN, 1, 1]> are supported", op,
		            v->name, ts);
	const long long O = t->dims[0], I = t->dims[1];
	struct val *ax = &find_arg(attrs, nattrs, "axis")->v;
	if (ax->k != V_INT || strcmp(ax->t.dtype, "int32") || ax->i != 0)
		return perr(ps, v->line, "%s '%s': axis must be int32(0), the output channel (per-channel scales)", op,
		            v->name);
	struct val *qd = &find_arg(attrs, nattrs, "quantized_data")->v;
	struct type qt = *t;
	strcpy(qt.dtype, "int8");
	if (qd->k != V_BLOB || !type_eq(&qd->t, &qt))
		return perr(ps, v->line,
		            "%s '%s': quantized_data must be tensor<int8, [%lld, %lld, 1, 1]>(BLOBFILE(...))", op,
		            v->name, O, I);
	struct val *sc = &find_arg(attrs, nattrs, "scale")->v;
	if (sc->k != V_BLOB || !sc->t.tensor || strcmp(sc->t.dtype, "fp16") || sc->t.rank != 1 || sc->t.dims[0] != O)
		return perr(ps, v->line,
		            "%s '%s': scale must be tensor<fp16, [%lld]>(BLOBFILE(...)), one per output channel", op,
		            v->name, O);
	struct val *zp = &find_arg(attrs, nattrs, "zero_point")->v;
	if (zp->k != V_INT || strcmp(zp->t.dtype, "int8") || zp->i != 0)
		return perr(ps, v->line, "%s '%s': zero_point must be int8(0): the weights are symmetric", op, v->name);
	c->nblob += 2;
	int mapped = 0;
	const uint8_t *q = NULL, *s = NULL;
	if (!c->use_packed) {
		q = blob_payload(c, v, qd, ANE_BLOB_DT_INT8, &mapped);
		s = q ? blob_payload(c, v, sc, ANE_BLOB_DT_FP16, NULL) : NULL;
		if (!s)
			return -1;
	}
	if (add_weight(c, v, q, mapped))
		return -1;
	struct weight *w = &c->k->weights[v->blob];
	w->spayload = s;
	w->i8 = 1;
	w->cout = (size_t)O;
	w->cin = (size_t)I;
	return 0;
}

// the operands of a constexpr op given as arguments: each of keys there
// once, nothing else
static int
constexpr_args(struct compiler *c, struct var *v, const char *op, struct arg *args, int nargs, const char *const *keys,
               int nkeys, const char *expect)
{
	for (int i = 0; i < nargs; i++) {
		int known = 0;
		for (int j = 0; j < nkeys; j++)
			known |= !strcmp(args[i].key, keys[j]);
		if (!known)
			return perr(&c->ps, v->line, "%s '%s': unknown argument '%s' (expected %s)", op, v->name,
			            args[i].key, expect);
	}
	for (int j = 0; j < nkeys; j++)
		if (!find_arg(args, nargs, keys[j]))
			return perr(&c->ps, v->line, "%s '%s' without %s", op, v->name, keys[j]);
	return 0;
}

// w = constexpr_lut_to_dense(indices = tensor<uint4, [O, I, 1, 1]>(BLOBFILE),
// lut = tensor<fp16, [O / 64, 1, 1, 1, 16, 1]>(BLOBFILE)): 4-bit palettised
// conv weights, a table of 16 values for each group of 64 output rows (the
// iOS18 form, mil.h). A conv takes them only scaled per row, through
// constexpr_blockwise_shift_scale (do_shift_scale)
static int
do_lut(struct compiler *c, struct var *v, struct arg *args, int nargs)
{
	struct parser *ps = &c->ps;
	const char *op = "constexpr_lut_to_dense";
	static const char *const keys[] = {"indices", "lut"};
	if (constexpr_args(c, v, op, args, nargs, keys, 2, "indices, lut"))
		return -1;
	const struct type *t = &v->t;
	char ts[128];
	type_str(t, ts, sizeof ts);
	if (!t->tensor || strcmp(t->dtype, "fp16") || t->rank != 4 || t->dims[2] != 1 || t->dims[3] != 1)
		return perr(ps, v->line,
		            "%s '%s' is %s; only conv weights tensor<fp16, [COUT, CIN, 1, 1]> are supported", op,
		            v->name, ts);
	const long long O = t->dims[0], I = t->dims[1];
	struct val *ix = &find_arg(args, nargs, "indices")->v;
	struct type it = *t;
	strcpy(it.dtype, "uint4");
	if (ix->k != V_BLOB || !type_eq(&ix->t, &it))
		return perr(ps, v->line, "%s '%s': indices must be tensor<uint4, [%lld, %lld, 1, 1]>(BLOBFILE(...))",
		            op, v->name, O, I);
	struct val *lv = &find_arg(args, nargs, "lut")->v;
	const struct type *lt = &lv->t;
	if (lv->k != V_BLOB || !lt->tensor || strcmp(lt->dtype, "fp16") || lt->rank != 6 || lt->dims[1] != 1 ||
	    lt->dims[2] != 1 || lt->dims[3] != 1 || lt->dims[4] != 16 || lt->dims[5] != 1 ||
	    (lt->dims[0] != 1 && lt->dims[0] * EMU_L4_QUAD_ROWS != O)) {
		if (O % EMU_L4_QUAD_ROWS)
			return perr(ps, v->line,
			            "%s '%s': lut must be tensor<fp16, [1, 1, 1, 1, 16, 1]>(BLOBFILE(...)): one table, "
			            "as %lld rows are not a multiple of %d",
			            op, v->name, O, EMU_L4_QUAD_ROWS);
		return perr(
			ps, v->line,
			"%s '%s': lut must be tensor<fp16, [G, 1, 1, 1, 16, 1]>(BLOBFILE(...)) with G = 1 (one table) "
			"or G = %lld (a table of 16 for each group of %d output rows)",
			op, v->name, O / EMU_L4_QUAD_ROWS, EMU_L4_QUAD_ROWS);
	}
	c->nblob += 2;
	int mapped = 0;
	const uint8_t *q = NULL, *l = NULL;
	if (!c->use_packed) {
		q = blob_payload(c, v, ix, ANE_BLOB_DT_UINT4, &mapped);
		l = q ? blob_payload(c, v, lv, ANE_BLOB_DT_FP16, NULL) : NULL;
		if (!l)
			return -1;
	}
	if (add_weight(c, v, q, mapped))
		return -1;
	struct weight *w = &c->k->weights[v->blob];
	w->lpayload = l;
	w->l4 = 1;
	w->ltables = (size_t)lt->dims[0];
	v->unscaled = 1;
	return 0;
}

// w = constexpr_blockwise_shift_scale(data = <a constexpr_lut_to_dense>,
// scale = tensor<fp16, [O, 1, 1, 1]>(BLOBFILE)): the palettised weights
// times one scale per output row, no offset
static int
do_shift_scale(struct compiler *c, struct var *v, struct arg *args, int nargs)
{
	struct parser *ps = &c->ps;
	const char *op = "constexpr_blockwise_shift_scale";
	static const char *const keys[] = {"data", "scale"};
	if (constexpr_args(c, v, op, args, nargs, keys, 2, "data, scale"))
		return -1;
	struct val *dv = &find_arg(args, nargs, "data")->v;
	struct var *d = dv->k == V_VAR ? find_var(c, dv->s) : NULL;
	if (!d || !d->unscaled)
		return perr(ps, v->line,
		            "%s '%s': data must name a constexpr_lut_to_dense (the emu scales nothing else)", op,
		            v->name);
	if (!type_eq(&d->t, &v->t))
		return perr(ps, v->line, "%s '%s' must have the type of its data '%s'", op, v->name, d->name);
	const long long O = v->t.dims[0];
	struct val *sc = &find_arg(args, nargs, "scale")->v;
	const struct type *st = &sc->t;
	if (sc->k != V_BLOB || !st->tensor || strcmp(st->dtype, "fp16") || st->rank != 4 || st->dims[0] != O ||
	    st->dims[1] != 1 || st->dims[2] != 1 || st->dims[3] != 1)
		return perr(ps, v->line,
		            "%s '%s': scale must be tensor<fp16, [%lld, 1, 1, 1]>(BLOBFILE(...)), one per output row",
		            op, v->name, O);
	struct weight *w = &c->k->weights[d->blob];
	if (w->spayload || w->scaled)
		return perr(ps, v->line, "%s '%s': '%s' is scaled twice", op, v->name, d->name);
	c->nblob++;
	if (!c->use_packed && !(w->spayload = blob_payload(c, v, sc, ANE_BLOB_DT_FP16, NULL)))
		return -1;
	w->scaled = 1;
	v->blob = d->blob;
	return 0;
}

// a conv parameter: a named const with the one value the emu supports
static int
conv_param(struct compiler *c, int line, struct arg *args, int nargs, const char *key, enum val_kind kind,
           const long long *want, int nwant, const char *wants)
{
	struct parser *ps = &c->ps;
	struct arg *a = find_arg(args, nargs, key);
	if (!a)
		return perr(ps, line, "conv without %s", key);
	if (a->v.k != V_VAR)
		return perr(ps, line, "conv %s given inline; conv parameters must be named consts", key);
	struct var *v = find_var(c, a->v.s);
	if (!v)
		return perr(ps, line, "conv %s: '%s' is not defined", key, a->v.s);
	if (v->kind != VAR_CONST || v->cval.k != kind)
		return perr(ps, line, "conv %s: '%s' is not a %s const", key, a->v.s,
		            kind == V_STR ? "string" : "int32");
	int ok = 1;
	if (kind == V_STR)
		ok = !strcmp(v->cval.s, wants);
	else if (kind == V_INT)
		ok = v->cval.i == want[0];
	else {
		ok = v->cval.nints == nwant;
		for (int i = 0; ok && i < nwant; i++)
			ok = v->cval.ints[i] == want[i];
	}
	if (!ok)
		return perr(ps, line,
		            "conv %s = %s is not %s; only 1x1, stride 1, unpadded, groups 1 convs are supported", key,
		            a->v.s, wants);
	return 0;
}

// an activation operand of an op
static struct var *
operand(struct compiler *c, int line, const char *op, struct arg *a)
{
	struct var *v = find_var(c, a->v.s);
	if (!v) {
		perr(&c->ps, line, "%s %s: '%s' is not defined", op, a->key, a->v.s);
		return NULL;
	}
	if (v->buf < 0) {
		perr(&c->ps, line, "%s %s: '%s' is a const, not an activation", op, a->key, a->v.s);
		return NULL;
	}
	return v;
}

static int
add_step(struct compiler *c, const struct step *s)
{
	struct emu_kernel *k = c->k;
	struct step *st = realloc(k->steps, (size_t)(k->nsteps + 1) * sizeof *st);
	if (!st)
		return perr(&c->ps, 0, "out of memory");
	k->steps = st;
	k->steps[k->nsteps++] = *s;
	return 0;
}

static const struct {
	const char *op, *why;
} banned[] = {
	{"matmul", "compiles but fails at eval (status 0x1d) on the ANE; use a 1x1 conv"},
	{"linear", "not in the accepted set; use a 1x1 conv"},
	{"rsqrt", "fails to compile on the ANE"},
	{"reduce_mean", "missing from the ANE's dialect"},
	{"concat", "fails to compile on the ANE"},
	{"gelu", "fails to compile on the ANE"},
	{"softmax", "fails at eval for non-power-of-2 sizes"},
	{"scaled_dot_product_attention", "ignores causal masks on the ANE"},
	{"cast", "not needed: I/O is fp16, and uint8 casts are broken on the ANE"},
	{"slice_by_index", "broken on function inputs in a larger graph"},
};

static int
do_op(struct compiler *c, struct var *y, const char *op, struct arg *args, int nargs)
{
	struct parser *ps = &c->ps;
	int line = y->line;
	if (check_act(c, line, y->name, &y->t))
		return -1;
	size_t C = (size_t)y->t.dims[1];
	char ts[128];
	if (!strcmp(op, "conv")) {
		static const char *const keys[] = {"dilations", "groups", "pad", "pad_type", "strides", "weight", "x"};
		if (find_arg(args, nargs, "bias"))
			return perr(ps, line, "conv '%s' with bias=: rejected by the ANE; add the bias separately",
			            y->name);
		for (int i = 0; i < nargs; i++) {
			int known = 0;
			for (size_t j = 0; j < sizeof keys / sizeof keys[0]; j++)
				known |= !strcmp(args[i].key, keys[j]);
			if (!known)
				return perr(ps, line, "conv '%s': unknown argument '%s'", y->name, args[i].key);
		}
		static const long long one[] = {1}, ones[] = {1, 1}, zeros[] = {0, 0, 0, 0};
		if (conv_param(c, line, args, nargs, "pad_type", V_STR, NULL, 0, "valid") ||
		    conv_param(c, line, args, nargs, "strides", V_INTS, ones, 2, "[1, 1]") ||
		    conv_param(c, line, args, nargs, "pad", V_INTS, zeros, 4, "[0, 0, 0, 0]") ||
		    conv_param(c, line, args, nargs, "dilations", V_INTS, ones, 2, "[1, 1]") ||
		    conv_param(c, line, args, nargs, "groups", V_INT, one, 1, "1"))
			return -1;
		struct arg *wa = find_arg(args, nargs, "weight"), *xa = find_arg(args, nargs, "x");
		if (!wa || !xa)
			return perr(ps, line, "conv '%s' needs weight and x", y->name);
		if (wa->v.k != V_VAR || xa->v.k != V_VAR)
			return perr(ps, line, "conv '%s': weight and x must be names", y->name);
		struct var *w = find_var(c, wa->v.s);
		if (!w)
			return perr(ps, line, "conv '%s': weight '%s' is not defined", y->name, wa->v.s);
		if (w->kind != VAR_CONST || w->blob < 0)
			return perr(ps, line, "conv '%s': weight '%s' is not a BLOBFILE const", y->name, wa->v.s);
		if (w->unscaled)
			return perr(ps, line,
			            "conv '%s': weight '%s' is palettised without its per-row scales; the emu takes it "
			            "as constexpr_blockwise_shift_scale(data = %s, scale = ...)",
			            y->name, wa->v.s, wa->v.s);
		struct var *x = operand(c, line, "conv", xa);
		if (!x)
			return -1;
		const struct type *wt = &w->t;
		size_t cin = (size_t)x->t.dims[1];
		if (wt->rank != 4 || wt->dims[2] != 1 || wt->dims[3] != 1 || (size_t)wt->dims[0] != C ||
		    (size_t)wt->dims[1] != cin) {
			type_str(wt, ts, sizeof ts);
			return perr(
				ps, line,
				"conv '%s': weight '%s' is %s, expected [%zu, %zu, 1, 1] for x '%s' with %zu channels and output %zu",
				y->name, w->name, ts, C, cin, x->name, cin, C);
		}
		y->buf = new_buf(c, C);
		if (y->buf < 0)
			return perr(ps, line, "out of memory");
		return add_step(c, &(struct step){.op = S_CONV,
		                                  .y = y->buf,
		                                  .a = x->buf,
		                                  .b = -1,
		                                  .weight = w->blob,
		                                  .cin = cin,
		                                  .cout = C});
	}
	if (!strcmp(op, "add") || !strcmp(op, "mul") || !strcmp(op, "sigmoid")) {
		int unary = !strcmp(op, "sigmoid");
		struct arg *xa = find_arg(args, nargs, "x"), *ya = find_arg(args, nargs, "y");
		if (!xa || (!unary && !ya) || nargs != (unary ? 1 : 2))
			return perr(ps, line, "%s '%s': arguments must be exactly %s", op, y->name,
			            unary ? "x" : "x and y");
		struct step s = {.op = unary ? S_SIGMOID : !strcmp(op, "add") ? S_ADD : S_MUL, .b = -1};
		struct arg *ops[2] = {xa, ya};
		int *slot[2] = {&s.a, &s.b};
		int nscalar = 0;
		for (int i = 0; i < (unary ? 1 : 2); i++) {
			struct arg *a = ops[i];
			if (a->v.k == V_FLOAT && !unary) {
				// an inline scalar: costs the program one BLOBFILE slot
				s.scalar = (float)a->v.f;
				nscalar++;
				if (!c->inline_scalar_line)
					c->inline_scalar_line = line;
				if (i == 0) { // keep the tensor in a
					s.a = -2;
				}
				continue;
			}
			if (a->v.k != V_VAR)
				return perr(ps, line, "%s '%s': %s must be a tensor name%s", op, y->name, a->key,
				            unary ? "" : " or an fp16/fp32 scalar");
			struct var *v = operand(c, line, op, a);
			if (!v)
				return -1;
			if (!type_eq(&v->t, &y->t)) {
				char vs[128];
				type_str(&v->t, vs, sizeof vs);
				type_str(&y->t, ts, sizeof ts);
				return perr(ps, line, "%s '%s': %s '%s' is %s, the result is %s", op, y->name, a->key,
				            v->name, vs, ts);
			}
			*slot[i] = v->buf;
		}
		if (nscalar == 2)
			return perr(ps, line, "%s '%s': both operands are scalars", op, y->name);
		if (s.a == -2) {
			s.a = s.b;
			s.b = -1;
		}
		y->buf = new_buf(c, C);
		if (y->buf < 0)
			return perr(ps, line, "out of memory");
		s.y = y->buf;
		return add_step(c, &s);
	}
	return perr(ps, line, "op '%s' ('%s') is not supported: the accepted set is const, conv, add, mul, sigmoid", op,
	            y->name);
}

static int
parse_stmt(struct compiler *c)
{
	struct parser *ps = &c->ps;
	struct type t;
	char name[MAX_NAME], op[MAX_NAME];
	int line = peek(ps)->line;
	if (parse_type(ps, &t) || take_ident(ps, name, sizeof name) || expect_punct(ps, '='))
		return -1;
	int opline = peek(ps)->line;
	if (take_ident(ps, op, sizeof op))
		return -1;
	for (size_t i = 0; i < sizeof banned / sizeof banned[0]; i++)
		if (!strcmp(op, banned[i].op))
			return perr(ps, opline, "op '%s' ('%s') is not allowed: %s", op, name, banned[i].why);
	int dq = !strcmp(op, "constexpr_affine_dequantize"), lut = !strcmp(op, "constexpr_lut_to_dense"),
	    ss = !strcmp(op, "constexpr_blockwise_shift_scale");
	if (strcmp(op, "const") && strcmp(op, "conv") && strcmp(op, "add") && strcmp(op, "mul") &&
	    strcmp(op, "sigmoid") && !dq && !lut && !ss)
		return perr(ps, opline,
		            "op '%s' ('%s') is not supported: the accepted set is const, "
		            "constexpr_affine_dequantize, constexpr_lut_to_dense, constexpr_blockwise_shift_scale, "
		            "conv, add, mul, sigmoid",
		            op, name);
	struct arg args[16], attrs[8];
	int nargs, nattrs;
	if (expect_punct(ps, '(') || parse_args(ps, ')', args, 16, &nargs) || expect_punct(ps, '[') ||
	    parse_args(ps, ']', attrs, 8, &nattrs) || expect_punct(ps, ';'))
		return -1;
	struct arg *nm = find_arg(attrs, nattrs, "name");
	if (!nm || nm->v.k != V_STR)
		return perr(ps, line, "'%s' has no name = string(...) attribute", name);
	if (strcmp(nm->v.s, name))
		return perr(ps, line, "'%s' is named \"%s\"; the seed dialect names each op after its result", name,
		            nm->v.s);
	struct var *v = add_var(c, name, strcmp(op, "const") && !dq && !lut && !ss ? VAR_OP : VAR_CONST, line, &t);
	if (!v)
		return -1;
	if (dq)
		return do_dequant(c, v, nargs, attrs, nattrs);
	if ((lut || ss) && nattrs != 1)
		return perr(ps, line, "%s '%s': the only attribute allowed is name (its operands are arguments)", op,
		            name);
	if (lut)
		return do_lut(c, v, args, nargs);
	if (ss)
		return do_shift_scale(c, v, args, nargs);
	if (v->kind == VAR_CONST) {
		if (nargs)
			return perr(ps, line, "const '%s' takes no arguments", name);
		return do_const(c, v, attrs, nattrs);
	}
	if (nattrs != 1)
		return perr(ps, line, "op '%s': the only attribute allowed is name", name);
	return do_op(c, v, op, args, nargs);
}

static int
parse_program(struct compiler *c)
{
	struct parser *ps = &c->ps;
	struct emu_kernel *k = c->k;
	if (expect_word(ps, "program") || expect_punct(ps, '('))
		return -1;
	struct tok *vt = next(ps);
	if (vt->k != T_NUM || vt->n != 3 || memcmp(vt->s, "1.3", 3))
		return perr(ps, vt->line, "program version must be 1.3");
	if (expect_punct(ps, ')'))
		return -1;
	// the buildInfo line: exactly the one the generator writes (the only
	// one known to be accepted), then skipped as a balanced group
	struct tok *bt = peek(ps);
	if (!is_punct(bt, '[') || strncmp(bt->s, ane_mil_build_info, strlen(ane_mil_build_info)))
		return perr(ps, bt->line, "line 2 is not the expected [buildInfo = ...] line");
	int depth = 0;
	do {
		struct tok *t = next(ps);
		if (t->k == T_EOF)
			return perr(ps, t->line, "unterminated buildInfo");
		if (is_punct(t, '[') || is_punct(t, '(') || is_punct(t, '{'))
			depth++;
		else if (is_punct(t, ']') || is_punct(t, ')') || is_punct(t, '}'))
			depth--;
	} while (depth > 0);
	if (expect_punct(ps, '{') || expect_word(ps, "func") || expect_word(ps, "main") || expect_punct(ps, '<') ||
	    expect_word(ps, "ios18") || expect_punct(ps, '>') || expect_punct(ps, '('))
		return -1;
	// inputs
	for (;;) {
		struct type t;
		char name[MAX_NAME];
		int line = peek(ps)->line;
		if (parse_type(ps, &t) || take_ident(ps, name, sizeof name))
			return -1;
		if (check_act(c, line, name, &t))
			return -1;
		struct var *v = add_var(c, name, VAR_INPUT, line, &t);
		if (!v)
			return -1;
		v->buf = new_buf(c, (size_t)t.dims[1]);
		struct io *in = realloc(k->in, (size_t)(k->nin + 1) * sizeof *in);
		if (v->buf < 0 || !in)
			return perr(ps, line, "out of memory");
		k->in = in;
		memset(&k->in[k->nin], 0, sizeof *in);
		snprintf(k->in[k->nin].name, MAX_NAME, "%s", name);
		k->in[k->nin++].buf = v->buf;
		if (!is_punct(peek(ps), ','))
			break;
		next(ps);
	}
	if (expect_punct(ps, ')') || expect_punct(ps, '{'))
		return -1;
	while (!is_punct(peek(ps), '}')) {
		if (peek(ps)->k == T_EOF)
			return perr(ps, peek(ps)->line, "unexpected end of program");
		if (parse_stmt(c))
			return -1;
	}
	next(ps);
	if (peek(ps)->k != T_ARROW)
		return perr(ps, peek(ps)->line, "expected '-> (outputs)' after the body");
	next(ps);
	if (expect_punct(ps, '('))
		return -1;
	for (;;) {
		char name[MAX_NAME];
		int line = peek(ps)->line;
		if (take_ident(ps, name, sizeof name))
			return -1;
		struct var *v = find_var(c, name);
		if (!v)
			return perr(ps, line, "output '%s' is not defined", name);
		if (v->kind != VAR_OP)
			return perr(ps, line, "output '%s' is %s, not the result of an op", name,
			            v->kind == VAR_INPUT ? "an input" : "a const");
		for (int i = 0; i < k->nout; i++)
			if (!strcmp(k->out[i].name, name))
				return perr(ps, line, "output '%s' returned twice", name);
		struct io *o = realloc(k->out, (size_t)(k->nout + 1) * sizeof *o);
		if (!o)
			return perr(ps, line, "out of memory");
		k->out = o;
		memset(&k->out[k->nout], 0, sizeof *o);
		snprintf(k->out[k->nout].name, MAX_NAME, "%s", name);
		k->out[k->nout++].buf = v->buf;
		if (!is_punct(peek(ps), ','))
			break;
		next(ps);
	}
	if (expect_punct(ps, ')') || expect_punct(ps, ';') || expect_punct(ps, '}'))
		return -1;
	if (peek(ps)->k != T_EOF)
		return perr(ps, peek(ps)->line, "text after the end of the program");
	// the slot budget
	int limit = c->inline_scalar_line ? ANE_EMU_SLOTS - 1 : ANE_EMU_SLOTS;
	if (c->nblob > limit) {
		if (c->inline_scalar_line)
			return perr(
				ps, c->inline_scalar_line,
				"%d BLOBFILE consts, but the ANE takes at most %d once an op has an inline scalar (this one)",
				c->nblob, limit);
		return perr(ps, 0, "%d BLOBFILE consts, the ANE takes at most %d per program", c->nblob, limit);
	}
	return 0;
}

// ---------------------------------------------------------------------------
// compile

static void
compiler_release(struct compiler *c)
{
	for (int i = 0; i < c->nbf; i++) {
		if (c->bf[i].map)
			munmap(c->bf[i].map, c->bf[i].len);
		free(c->bf[i].chunks);
	}
	free(c->bf);
	free(c->vars);
	free(c->ps.toks);
}

// the whole pages inside [p, p + n) of a read-only private file mapping
static void
drop_inside(const uint8_t *p, size_t n)
{
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t lo = ((uintptr_t)p + pg - 1) & ~(pg - 1), hi = ((uintptr_t)p + n) & ~(pg - 1);
	if (hi > lo)
		madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

// A weight's rows repacked into its panels in REPACK_TASKS tasks of whole
// units on the context's pool: fp16 pairs of panels (emu_pack_pairs) or
// int8 quads (emu_i8_pack_quads), each packer in blocks of steps that stay
// in L1. A mapped fp16 blob's pages leave this process as they are
// repacked, a task's rows every REPACK_DROP pairs, so a large weight is
// never in memory twice (read-only file pages: dropping them only unmaps
// them). A start that compiles (--no-cache, the model in the page cache),
// 3 alternating pairs: Qwen2.5-0.5B shape F16, 3.1-5.8 s of compile on one
// thread against 0.42-0.49 s in tasks on two (0.74-0.81 before the
// blocks); Q8_0, 2.3-3.5 s against 0.34-0.36 s (once 1.85). On this VM one
// thread faulting in fresh panels was the slow part: unblocked on two
// threads, 0.67-0.81 s
#define REPACK_TASKS 8
#define REPACK_DROP 32

struct repack_job {
	struct weight *w;
	int i8;
	size_t units, ntasks; // pairs (fp16) or quads (int8)
};

static void
repack_task(void *arg, size_t t, int worker)
{
	(void)worker;
	struct repack_job *j = arg;
	const struct weight *w = j->w;
	const size_t u0 = j->units * t / j->ntasks, u1 = j->units * (t + 1) / j->ntasks;
	if (w->l4) {
		emu_l4_pack_quads(w->payload, w->cout, w->cin, w->lpanels, u0, u1);
		return;
	}
	if (j->i8) {
		emu_i8_pack_quads((const int8_t *)w->payload, w->cout, w->cin, w->qpanels, u0, u1);
		return;
	}
	const size_t rb = w->cin * 2;
	for (size_t q = u0; q < u1; q += REPACK_DROP) {
		size_t qe = u1 - q < REPACK_DROP ? u1 : q + REPACK_DROP;
		emu_pack_pairs(w->payload, w->cout, w->cin, w->panels, q, qe);
		size_t r0 = q * PSTEP, r1 = qe * PSTEP < w->cout ? qe * PSTEP : w->cout;
		if (w->mapped && r1 > r0)
			drop_inside(w->payload + r0 * rb, (r1 - r0) * rb);
	}
}

// the weight's panels from its payload (panels or qpanels allocated)
static void
repack(struct emu *e, struct weight *w, int i8)
{
	size_t units = w->l4 ? (w->cout + EMU_L4_QUAD_ROWS - 1) / EMU_L4_QUAD_ROWS
	               : i8  ? (w->cout + EMU_I8_QUAD_ROWS - 1) / EMU_I8_QUAD_ROWS
	                     : (w->cout + PSTEP - 1) / PSTEP;
	struct repack_job j = {w, i8, units, units < REPACK_TASKS ? units : REPACK_TASKS};
	if (j.ntasks > 1 && e->pool)
		ad_pool_run(e->pool, repack_task, &j, j.ntasks);
	else
		for (size_t t = 0; t < j.ntasks; t++)
			repack_task(&j, t, 0);
}

static void *
alloc64(size_t n)
{
	void *p = NULL;
	if (posix_memalign(&p, 64, n ? n : 64))
		return NULL;
	return p;
}

// a quantised weight's scales as the program gives them (fp16, one a row),
// 0 in the rows past cout that fill its last panel
static void
copy_scales(struct weight *w, size_t np)
{
	memcpy(w->scale, w->spayload, w->cout * sizeof(uint16_t));
	memset(w->scale + w->cout, 0, (np * PANEL - w->cout) * sizeof(uint16_t));
}

// the constant buffers of weight wi: what emu_kernel_const lists and
// emu_compile_packed takes back (a weight a conv uses has its panels)
static int
weight_consts(const struct emu_kernel *k, int wi, struct emu_const *out)
{
	const struct weight *w = &k->weights[wi];
	if (w->lpanels) {
		size_t np = (w->cout + PANEL - 1) / PANEL, nq = (w->cout + EMU_L4_QUAD_ROWS - 1) / EMU_L4_QUAD_ROWS;
		out[0] = (struct emu_const){.weight = wi,
		                            .kind = EMU_CONST_L4_PANELS,
		                            .bytes = emu_l4_panel_bytes(w->cout, w->cin),
		                            .data = w->lpanels};
		out[1] = (struct emu_const){
			.weight = wi, .kind = EMU_CONST_F16_LUT, .bytes = nq * 16 * sizeof(uint16_t), .data = w->lut};
		out[2] = (struct emu_const){.weight = wi,
		                            .kind = EMU_CONST_F16_SCALES,
		                            .bytes = np * PANEL * sizeof(uint16_t),
		                            .data = w->scale};
		return 3;
	}
	if (w->qpanels) {
		size_t np = (w->cout + PANEL - 1) / PANEL;
		out[0] = (struct emu_const){.weight = wi,
		                            .kind = EMU_CONST_I8_PANELS,
		                            .bytes = emu_i8_panel_bytes(w->cout, w->cin),
		                            .data = w->qpanels};
		out[1] = (struct emu_const){.weight = wi,
		                            .kind = EMU_CONST_F16_SCALES,
		                            .bytes = np * PANEL * sizeof(uint16_t),
		                            .data = w->scale};
		return 2;
	}
	if (!w->panels)
		return 0;
	out[0] = (struct emu_const){.weight = wi,
	                            .kind = EMU_CONST_F16_PANELS,
	                            .bytes = emu_panel_bytes(w->cout, w->cin),
	                            .data = w->panels};
	return 1;
}

// the packed buffer of (weight, kind), checked against what the program needs
static int
take_packed(struct compiler *c, int wi, int kind, size_t bytes, const void **data, char *err)
{
	for (int i = 0; i < c->npacked; i++) {
		const struct emu_const *q = &c->packed[i];
		if (q->weight != wi || q->kind != kind)
			continue;
		if (q->bytes != bytes)
			return ad_err(err, "emu: constant %d (kind %d) holds %zu bytes, the program needs %zu", wi,
			              kind, q->bytes, bytes);
		if (!q->data || ((uintptr_t)q->data & (EMU_CONST_ALIGN - 1)))
			return ad_err(err, "emu: constant %d (kind %d) is not %d-byte aligned", wi, kind,
			              EMU_CONST_ALIGN);
		*data = q->data;
		return 0;
	}
	return ad_err(err, "emu: no packed constant for weight %d (kind %d)", wi, kind);
}

struct gate;
static int gate_at(const struct emu_kernel *k, int s, struct gate *gt);

// The buffers' room in the context's activations. A buffer lives from the
// step that writes it (an input: from before the first) to the last step
// that reads it (an output: past the last), both included, so no step
// writes over what it reads; buffers whose lives do not meet share bytes,
// each put at the lowest offset clear of the live ones, in the order they
// are written. A fused gate's two intermediates (gate_at) are never
// written and take none (unused), and its result is written at its first
// step. An FFN's buffers for a 64-column prefill chunk took 2.2 MB, of
// which 0.8 were never written.
static int
layout_bufs(struct emu_kernel *k)
{
	int n = k->nbufs;
	int *first = malloc((size_t)(n ? n : 1) * 2 * sizeof *first), *last = first + n;
	if (!first)
		return -1;
	for (int i = 0; i < n; i++) {
		first[i] = k->nsteps; // never written: live throughout (below)
		last[i] = -1;
		k->bufs[i].unused = 0;
	}
	for (int i = 0; i < k->nin; i++)
		first[k->in[i].buf] = -1;
	for (int s = 0; s < k->nsteps; s++) {
		const struct step *st = &k->steps[s];
		if (st->y >= 0 && first[st->y] > s)
			first[st->y] = s;
		if (st->a >= 0 && last[st->a] < s)
			last[st->a] = s;
		if (st->b >= 0 && last[st->b] < s)
			last[st->b] = s;
	}
	for (int i = 0; i < k->nout; i++)
		last[k->out[i].buf] = k->nsteps;
	for (int i = 0; i < n; i++) {
		if (first[i] == k->nsteps) // neither an input nor written: keep it whole
			first[i] = -1, last[i] = k->nsteps;
		if (last[i] < first[i])
			last[i] = first[i]; // written, never read
	}
	// the gate the eval fuses (the same test, in the same walk, as eval_io)
	for (int s = 0; s < k->nsteps && !k->e->no_fuse; s++) {
		if (k->steps[s].op != S_CONV && gate_at(k, s, NULL)) {
			k->bufs[k->steps[s].y].unused = 1;
			k->bufs[k->steps[s + 1].y].unused = 1;
			// its result is written at the first of the three steps
			first[k->steps[s + 2].y] = s;
			s += 2;
		}
	}
	k->act_bytes = 0;
	for (int i = 0; i < n; i++) {
		struct bufdesc *b = &k->bufs[i];
		size_t sz = (k->width * b->channels * sizeof(float) + 63) / 64 * 64, off = 0;
		b->off = 0;
		if (b->unused)
			continue;
		// the lowest offset clear of every placed buffer whose life meets this one's
		for (int moved = 1; moved;) {
			moved = 0;
			for (int j = 0; j < i; j++) {
				const struct bufdesc *o = &k->bufs[j];
				size_t osz = (k->width * o->channels * sizeof(float) + 63) / 64 * 64;
				if (o->unused || first[j] > last[i] || first[i] > last[j])
					continue;
				if (off < o->off + osz && o->off < off + sz) {
					off = o->off + osz;
					moved = 1;
				}
			}
		}
		b->off = off;
		if (off + sz > k->act_bytes)
			k->act_bytes = off + sz;
	}
	free(first);
	return 0;
}

static struct emu_kernel *
compile(struct emu *e, const char *mil, const struct emu_file *files, int nfiles, const struct emu_const *packed,
        int npacked, char *err)
{
	struct emu_kernel *k = calloc(1, sizeof *k);
	struct compiler c = {
		.files = files, .nfiles = nfiles, .packed = packed, .npacked = npacked, .use_packed = packed != NULL};
	if (!k) {
		ad_err(err, "emu: out of memory");
		return NULL;
	}
	k->e = e;
	c.k = k;
	c.ps.src = mil;
	c.ps.err = err;
	if (!mil) {
		ad_err(err, "emu: no program text");
		goto fail;
	}
	if (tokenize(&c.ps) || parse_program(&c))
		goto fail;
	// repack every weight a conv uses; unused BLOBFILE consts are only checked
	for (int s = 0; s < k->nsteps; s++) {
		struct step *st = &k->steps[s];
		if (st->op != S_CONV)
			continue;
		struct weight *w = &k->weights[st->weight];
		if (w->panels || w->qpanels || w->lpanels)
			continue;
		if (w->l4) {
			// half a byte per weight, as stored; the tables and scales fp16,
			// as the program gives them
			size_t np = (w->cout + PANEL - 1) / PANEL,
			       nq = (w->cout + EMU_L4_QUAD_ROWS - 1) / EMU_L4_QUAD_ROWS;
			size_t lb = emu_l4_panel_bytes(w->cout, w->cin), tb = nq * 16 * sizeof(uint16_t),
			       sb = np * PANEL * sizeof(uint16_t);
			if (c.use_packed) {
				const void *dl = NULL, *dt = NULL, *ds = NULL;
				if (take_packed(&c, st->weight, EMU_CONST_L4_PANELS, lb, &dl, err) ||
				    take_packed(&c, st->weight, EMU_CONST_F16_LUT, tb, &dt, err) ||
				    take_packed(&c, st->weight, EMU_CONST_F16_SCALES, sb, &ds, err))
					goto fail;
				w->lpanels = (uint8_t *)dl;
				w->lut = (uint16_t *)dt;
				w->scale = (uint16_t *)ds;
				w->borrowed = 1;
			} else {
				w->lpanels = ad_huge_arena_alloc(e->panels, lb);
				w->lut = alloc64(tb);
				w->scale = alloc64(sb);
				if (!w->lpanels || !w->lut || !w->scale) {
					ad_err(err, "emu: out of memory for %zu x %zu 4-bit weights", w->cout, w->cin);
					goto fail;
				}
				repack(e, w, 0);
				copy_scales(w, np);
				for (size_t i = 0; i < nq * 16; i++)
					memcpy(&w->lut[i], w->lpayload + (w->ltables == 1 ? i % 16 : i) * 2, 2);
				if (w->mapped)
					drop_inside(w->payload, (w->cout * w->cin + 1) / 2);
			}
			e->weight_bytes += lb;
			k->weight_bytes +=
				(uint64_t)(w->cout * w->cin + 1) / 2 + (uint64_t)w->cout * 2 + (uint64_t)nq * 32;
			continue;
		}
		if (w->i8) {
			// one byte per weight, as stored; the scales fp16, as given
			size_t np = (w->cout + PANEL - 1) / PANEL;
			size_t qb = emu_i8_panel_bytes(w->cout, w->cin), sb = np * PANEL * sizeof(uint16_t);
			if (c.use_packed) {
				const void *dq = NULL, *ds = NULL;
				if (take_packed(&c, st->weight, EMU_CONST_I8_PANELS, qb, &dq, err) ||
				    take_packed(&c, st->weight, EMU_CONST_F16_SCALES, sb, &ds, err))
					goto fail;
				w->qpanels = (int8_t *)dq;
				w->scale = (uint16_t *)ds;
				w->borrowed = 1;
			} else {
				w->qpanels = ad_huge_arena_alloc(e->panels, qb);
				w->scale = alloc64(sb);
				if (!w->qpanels || !w->scale) {
					ad_err(err, "emu: out of memory for %zu x %zu int8 weights", w->cout, w->cin);
					goto fail;
				}
				repack(e, w, 1);
				copy_scales(w, np);
				if (w->mapped)
					drop_inside(w->payload, w->cout * w->cin);
			}
			e->weight_bytes += qb;
			k->weight_bytes += (uint64_t)w->cout * w->cin + (uint64_t)w->cout * 2;
			continue;
		}
		if (c.use_packed) {
			const void *d = NULL;
			if (take_packed(&c, st->weight, EMU_CONST_F16_PANELS, emu_panel_bytes(w->cout, w->cin), &d,
			                err))
				goto fail;
			w->panels = (uint16_t *)d;
			w->borrowed = 1;
			e->weight_bytes += emu_panel_bytes(w->cout, w->cin);
			k->weight_bytes += (uint64_t)w->cout * w->cin * 2;
			continue;
		}
		w->panels = ad_huge_arena_alloc(e->panels, emu_panel_bytes(w->cout, w->cin));
		if (w->panels)
			e->weight_bytes += emu_panel_bytes(w->cout, w->cin);
		if (!w->panels) {
			ad_err(err, "emu: out of memory for %zu x %zu weights", w->cout, w->cin);
			goto fail;
		}
		repack(e, w, 0);
		k->weight_bytes += (uint64_t)w->cout * w->cin * 2;
	}
	for (int i = 0; i < k->nweights; i++) // the file is unmapped below
		k->weights[i].payload = k->weights[i].spayload = k->weights[i].lpayload = NULL;
	if (layout_bufs(k) < 0) {
		ad_err(err, "emu: out of memory");
		goto fail;
	}
	for (int dir = 0; dir < 2; dir++) {
		struct io *io = dir ? k->out : k->in;
		int n = dir ? k->nout : k->nin;
		size_t cap = ANE_MIN_SURFACE;
		for (int i = 0; i < n; i++) {
			if (ane_layout_init(&io[i].layout, k->bufs[io[i].buf].channels, 1, k->width, 2, err) < 0)
				goto fail;
			if (io[i].layout.nbytes > cap)
				cap = io[i].layout.nbytes;
		}
		if (dir)
			k->out_cap = cap;
		else
			k->in_cap = cap;
	}
	compiler_release(&c);
	return k;
fail:
	compiler_release(&c);
	emu_kernel_free(k);
	return NULL;
}

struct emu_kernel *
emu_compile(struct emu *e, const char *mil, const struct emu_file *files, int nfiles, char *err)
{
	return compile(e, mil, files, nfiles, NULL, 0, err);
}

struct emu_kernel *
emu_compile_packed(struct emu *e, const char *mil, const struct emu_const *consts, int nconsts, char *err)
{
	if (nconsts < 0 || (nconsts > 0 && !consts)) {
		ad_err(err, "emu: bad constant list");
		return NULL;
	}
	static const struct emu_const none;
	return compile(e, mil, NULL, 0, consts ? consts : &none, nconsts, err);
}

int
emu_kernel_nconsts(const struct emu_kernel *k)
{
	struct emu_const tmp[EMU_MAX_CONSTS_PER_WEIGHT];
	int n = 0;
	for (int i = 0; i < k->nweights; i++)
		n += weight_consts(k, i, tmp);
	return n;
}

int
emu_kernel_const(const struct emu_kernel *k, int i, struct emu_const *out)
{
	struct emu_const tmp[EMU_MAX_CONSTS_PER_WEIGHT];
	for (int w = 0; w < k->nweights && i >= 0; w++) {
		int n = weight_consts(k, w, tmp);
		if (i < n) {
			*out = tmp[i];
			return 0;
		}
		i -= n;
	}
	return -1;
}

size_t
emu_kernel_borrowed(const struct emu_kernel *k)
{
	struct emu_const c[EMU_MAX_CONSTS_PER_WEIGHT];
	size_t n = 0;
	for (int i = 0; i < k->nweights; i++)
		if (k->weights[i].borrowed)
			for (int j = 0, m = weight_consts(k, i, c); j < m; j++)
				n += c[j].bytes;
	return n;
}

// a borrowed weight's copies (emu_kernel_copy)
struct moved {
	int wi;
	void *panels, *qpanels, *lpanels; // in the context's arena
	uint16_t *scale, *lut;            // alloc64, as a compiled int8 or 4-bit weight's
};

struct emu_copy {
	struct emu *e;
	int n;
	struct moved m[];
};

void
emu_copy_free(struct emu_copy *c)
{
	if (!c)
		return;
	for (int i = 0; i < c->n; i++) {
		ad_huge_arena_release(c->e->panels, c->m[i].panels);
		ad_huge_arena_release(c->e->panels, c->m[i].qpanels);
		ad_huge_arena_release(c->e->panels, c->m[i].lpanels);
		free(c->m[i].scale);
		free(c->m[i].lut);
	}
	free(c);
}

// n bytes from src to dst, pace(arg) before each piece
static int
copy_paced(void *dst, const void *src, size_t n, int (*pace)(void *), void *arg)
{
	for (size_t o = 0; o < n; o += EMU_COPY_PIECE) {
		if (pace && pace(arg))
			return -1;
		memcpy((char *)dst + o, (const char *)src + o, n - o < EMU_COPY_PIECE ? n - o : EMU_COPY_PIECE);
	}
	return 0;
}

struct emu_copy *
emu_kernel_copy(const struct emu_kernel *k, int (*pace)(void *arg), void *arg, char *err)
{
	struct emu_copy *c = calloc(1, sizeof *c + (size_t)k->nweights * sizeof c->m[0]);
	if (!c) {
		ad_err(err, "emu: out of memory");
		return NULL;
	}
	c->e = k->e;
	for (int i = 0; i < k->nweights; i++) {
		const struct weight *w = &k->weights[i];
		if (!w->borrowed)
			continue;
		struct moved *m = &c->m[c->n++];
		m->wi = i;
		if (w->lpanels) {
			size_t lb = emu_l4_panel_bytes(w->cout, w->cin);
			size_t tb = (w->cout + EMU_L4_QUAD_ROWS - 1) / EMU_L4_QUAD_ROWS * 16 * sizeof(uint16_t);
			size_t sb = (w->cout + PANEL - 1) / PANEL * PANEL * sizeof(uint16_t);
			m->lpanels = ad_huge_arena_alloc(k->e->panels, lb);
			m->lut = alloc64(tb);
			m->scale = alloc64(sb);
			if (!m->lpanels || !m->lut || !m->scale) {
				ad_err(err, "emu: out of memory for a copy of %zu x %zu 4-bit weights", w->cout,
				       w->cin);
				goto fail;
			}
			memcpy(m->lut, w->lut, tb);
			memcpy(m->scale, w->scale, sb);
			if (copy_paced(m->lpanels, w->lpanels, lb, pace, arg))
				goto stopped;
		} else if (w->qpanels) {
			size_t qb = emu_i8_panel_bytes(w->cout, w->cin);
			size_t sb = (w->cout + PANEL - 1) / PANEL * PANEL * sizeof(uint16_t);
			m->qpanels = ad_huge_arena_alloc(k->e->panels, qb);
			m->scale = alloc64(sb);
			if (!m->qpanels || !m->scale) {
				ad_err(err, "emu: out of memory for a copy of %zu x %zu int8 weights", w->cout, w->cin);
				goto fail;
			}
			memcpy(m->scale, w->scale, sb);
			if (copy_paced(m->qpanels, w->qpanels, qb, pace, arg))
				goto stopped;
		} else if (w->panels) {
			size_t pb = emu_panel_bytes(w->cout, w->cin);
			if (!(m->panels = ad_huge_arena_alloc(k->e->panels, pb))) {
				ad_err(err, "emu: out of memory for a copy of %zu x %zu weights", w->cout, w->cin);
				goto fail;
			}
			if (copy_paced(m->panels, w->panels, pb, pace, arg))
				goto stopped;
		}
	}
	return c;
stopped:
	ad_err(err, "emu: the copy was stopped");
fail:
	emu_copy_free(c);
	return NULL;
}

void
emu_kernel_adopt(struct emu_kernel *k, struct emu_copy *c)
{
	if (!c)
		return;
	for (int i = 0; i < c->n; i++) {
		struct weight *w = &k->weights[c->m[i].wi];
		if (c->m[i].lpanels) {
			w->lpanels = c->m[i].lpanels;
			w->lut = c->m[i].lut;
			w->scale = c->m[i].scale;
		} else if (c->m[i].qpanels) {
			w->qpanels = c->m[i].qpanels;
			w->scale = c->m[i].scale;
		} else if (c->m[i].panels) {
			w->panels = c->m[i].panels;
		}
		w->borrowed = 0;
	}
	free(c);
}

void
emu_kernel_free(struct emu_kernel *k)
{
	if (!k)
		return;
	for (int i = 0; i < k->nweights; i++) {
		struct weight *w = &k->weights[i];
		if (w->panels)
			k->e->weight_bytes -= emu_panel_bytes(w->cout, w->cin);
		if (w->qpanels)
			k->e->weight_bytes -= emu_i8_panel_bytes(w->cout, w->cin);
		if (w->lpanels)
			k->e->weight_bytes -= emu_l4_panel_bytes(w->cout, w->cin);
		if (w->borrowed)
			continue;
		ad_huge_arena_release(k->e->panels, w->panels);
		ad_huge_arena_release(k->e->panels, w->qpanels);
		ad_huge_arena_release(k->e->panels, w->lpanels);
		free(w->scale);
		free(w->lut);
	}
	free(k->weights);
	free(k->bufs);
	free(k->steps);
	free(k->in);
	free(k->out);
	free(k);
}

int
emu_ninputs(const struct emu_kernel *k)
{
	return k->nin;
}

int
emu_noutputs(const struct emu_kernel *k)
{
	return k->nout;
}

const char *
emu_input_name(const struct emu_kernel *k, int i)
{
	return i >= 0 && i < k->nin ? k->in[i].name : NULL;
}

const char *
emu_output_name(const struct emu_kernel *k, int i)
{
	return i >= 0 && i < k->nout ? k->out[i].name : NULL;
}

const struct ane_layout *
emu_input_layout(const struct emu_kernel *k, int i)
{
	return i >= 0 && i < k->nin ? &k->in[i].layout : NULL;
}

const struct ane_layout *
emu_output_layout(const struct emu_kernel *k, int i)
{
	return i >= 0 && i < k->nout ? &k->out[i].layout : NULL;
}

size_t
emu_width(const struct emu_kernel *k)
{
	return k->width;
}

size_t
emu_input_capacity(const struct emu_kernel *k)
{
	return k->in_cap;
}

size_t
emu_output_capacity(const struct emu_kernel *k)
{
	return k->out_cap;
}

uint64_t
emu_weight_bytes(const struct emu_kernel *k)
{
	return k->weight_bytes;
}

int
emu_nblobfiles(const struct emu_kernel *k)
{
	return k->nweights;
}

size_t
emu_act_bytes(const struct emu_kernel *k)
{
	return k->act_bytes;
}

// ---------------------------------------------------------------------------
// eval

struct conv_job {
	const uint16_t *panels;
	const int8_t *qpanels;  // int8 weights (then panels is NULL)
	const uint8_t *lpanels; // 4-bit palettised weights (then panels is NULL)
	const uint16_t *lut;
	const uint16_t *scale;
	size_t cout, cin, ncols;
	const float *x, *xp; // xp: x packed for the AVX-512 tiles (or x)
	const uint8_t *surf; // x's surface, when x is left unfilled (bufdesc)
	size_t ps;
	uint16_t *i8wide; // int8, AVX2, wide: worker w's scratch at w * PSTEP * cin
	float *wide;      // AVX-512, wide: worker w's scratch at w * X512_WIDE_FLOATS(cin) (conv512w)
	float *y;
	size_t npanels;
	size_t unit, ntasks; // panel task u: whole units of panels, see task_panel
	// int8, many columns: each panel task's columns in cg groups (task t:
	// panel task t / cg, column group t % cg; see col_at)
	size_t cg;
	size_t streams; // AVX-512, one column: panels at once
	int simd;
	int x512_i8; // int8 on AVX-512 over xp packed (emu_conv_i8_x512); cg in whole blocks
	int x512_l4; // 4-bit on AVX-512 over xp packed, wide (emu_conv_l4_x512)
	// one column from DRAM: task t's range ranges[t], in units, taken a
	// step at a time, the rest open to stealing (see steal_task)
	struct steal_range *ranges;
	size_t step;
	uint64_t *steals; // atomic: the context's count
};

// task t's first panel: the units shared as evenly as whole units allow,
// so no task is a remainder that leaves a thread idle at the end
static size_t
task_panel(const struct conv_job *j, size_t t)
{
	size_t nunits = (j->npanels + j->unit - 1) / j->unit;
	size_t p = nunits * t / j->ntasks * j->unit;
	return p < j->npanels ? p : j->npanels;
}

// column group g's first column: the columns shared as evenly as whole
// blocks of six (the AVX-512 int8 tiles' widest) allow
static size_t
col_at(const struct conv_job *j, size_t g)
{
	return g >= j->cg ? j->ncols : j->ncols * g / j->cg / 6 * 6;
}

// panels [p0, p1) of column group g
static void
conv_range(struct conv_job *j, size_t p0, size_t p1, size_t g, int worker)
{
	if (j->lpanels) {
#ifdef AD_FP16_X86
		if (j->x512_l4 && emu_conv_l4_x512(j->lpanels, j->lut, j->scale, j->cout, j->cin, j->xp, j->ncols, j->y,
		                                   p0, p1, j->wide + (size_t)worker * X512_WIDE_FLOATS(j->cin)) == 0)
			return;
#endif
		emu_conv_l4_at(j->simd - EMU_SIMD_REF, j->lpanels, j->lut, j->scale, j->cout, j->cin, j->x, j->ncols,
		               j->y, p0, p1);
		return;
	}
	if (j->qpanels) {
		// the context's path (already capped at the CPU's) for int8 too
#ifdef AD_FP16_X86
		if (j->x512_i8) { // column group g: whole blocks of the packed x
			size_t nb = emu_x512_blocks(j->ncols);
			emu_conv_i8_x512(j->qpanels, j->scale, j->cout, j->cin, j->xp, j->ncols, j->y, p0, p1,
			                 nb * g / j->cg, nb * (g + 1) / j->cg,
			                 j->wide ? j->wide + (size_t)worker * X512_WIDE_FLOATS(j->cin) : NULL);
			return;
		}
#endif
		size_t c0 = col_at(j, g), nc = col_at(j, g + 1) - c0;
		const float *x = j->x + c0 * j->cin;
		float *y = j->y + c0 * j->cout;
#ifdef AD_FP16_X86
		if (j->i8wide) {
			emu_conv_i8_wide(j->qpanels, j->scale, j->cout, j->cin, x, nc, y, p0, p1,
			                 j->i8wide + (size_t)worker * PSTEP * j->cin);
			return;
		}
#endif
		emu_conv_i8_at(j->simd - EMU_SIMD_REF, j->qpanels, j->scale, j->cout, j->cin, x, nc, y, p0, p1);
		return;
	}
	conv_level(j->simd, j->panels, j->cout, j->cin, j->x, j->xp, j->ncols, j->y, p0, p1, j->streams,
	           j->wide ? j->wide + (size_t)worker * X512_WIDE_FLOATS(j->cin) : NULL);
}

// A one-column conv from DRAM: each thread streams one range, and the
// thread done first would wait for the other, which may have started
// late or run slower. In the Qwen2.5-0.5B decode pass on an Intel Xeon VM
// (an instrumented pool, not kept) the caller waited at the end of 35-50%
// of the convs, 4-7% of its time in them; one thread there streams only
// half of what two do, so that wait is lost bandwidth. So a task takes
// its range from the front a step at a time, and a task with nothing left
// takes the back half of what another has not yet taken: the caller's
// wait fell to 2-4%, decode +4% (docs/RESULTS.md). On AMD Zen 4, where
// one thread pulls most of the bandwidth, two such schemes measured no
// gain (RESULTS.md) and it is off by default there (emu_opts.steal). On
// Zen 5 one thread reads 23-24 GB/s of the 35-50 two read, and stealing
// (with the longer prefetch, emu_prefetch_steps) took the SmolLM2-135M
// Q8_0 decode pass from 26-28 to 27-30 GB/s. Every unit is computed whole
// by one thread: the bits do not change.
struct steal_range {
	uint64_t lohi; // atomic: first unit not taken << 32 | end
	char pad[56];
};

static inline uint64_t
lohi(uint64_t lo, uint64_t hi)
{
	return lo << 32 | hi;
}

static void
steal_task(struct conv_job *j, size_t t, int worker)
{
	struct steal_range *me = &j->ranges[t];
	for (;;) {
		uint64_t v = __atomic_load_n(&me->lohi, __ATOMIC_ACQUIRE);
		uint64_t lo = v >> 32, hi = (uint32_t)v;
		if (lo < hi) {
			uint64_t nl = hi - lo > j->step ? lo + j->step : hi;
			if (!__atomic_compare_exchange_n(&me->lohi, &v, lohi(nl, hi), 0, __ATOMIC_ACQ_REL,
			                                 __ATOMIC_ACQUIRE))
				continue;
			size_t p1 = nl * j->unit;
			conv_range(j, lo * j->unit, p1 < j->npanels ? p1 : j->npanels, 0, worker);
			continue;
		}
		// the range with the most left, if two units or more
		size_t best = j->ntasks;
		uint64_t bv = 0, bleft = 1;
		for (size_t i = 0; i < j->ntasks; i++) {
			uint64_t w = __atomic_load_n(&j->ranges[i].lohi, __ATOMIC_ACQUIRE);
			uint64_t left = (uint32_t)w > (w >> 32) ? (uint32_t)w - (w >> 32) : 0;
			if (i != t && left > bleft) {
				best = i;
				bv = w;
				bleft = left;
			}
		}
		if (best == j->ntasks)
			return;
		uint64_t mid = (bv >> 32) + bleft / 2;
		if (!__atomic_compare_exchange_n(&j->ranges[best].lohi, &bv, lohi(bv >> 32, mid), 0, __ATOMIC_ACQ_REL,
		                                 __ATOMIC_ACQUIRE))
			continue;
		// empty, so no one steals from it meanwhile
		__atomic_store_n(&me->lohi, lohi(mid, (uint32_t)bv), __ATOMIC_RELEASE);
		__atomic_add_fetch(j->steals, 1, __ATOMIC_RELAXED);
	}
}

static void
conv_task(void *arg, size_t t, int worker)
{
	struct conv_job *j = arg;
	if (j->ranges) {
		steal_task(j, t, worker);
		return;
	}
	size_t g = t % j->cg;
	t /= j->cg;
	size_t p0 = task_panel(j, t), p1 = task_panel(j, t + 1);
	if (p0 < p1)
		conv_range(j, p0, p1, g, worker);
}

#ifdef AD_FP16_X86
static void
pack_task(void *arg, size_t t, int worker)
{
	struct conv_job *j = arg;
	x512_pack(j->x, j->surf, j->ps, j->cin, j->ncols, (float *)j->xp, t, t + 1);
}
#endif

// *buf holds at least n elements of size elem (64-byte aligned, on
// present pages: a wide conv writes all of it; its contents are not kept
// when it grows); -1 when out of memory
static int
grow64(void **buf, size_t *cap, size_t n, size_t elem)
{
	if (n <= *cap)
		return 0;
	void *b = NULL;
	if (posix_memalign(&b, 64, n * elem))
		return -1;
	ad_prefault(b, n * elem);
	free(*buf);
	*buf = b;
	*cap = n;
	return 0;
}

// below this many multiply-adds a conv runs on the calling thread alone
#define PAR_MIN_MACS (1u << 18)
// a conv of WIDE_COLS columns or more (a prefill chunk's) in WIDE_TASKS
// tasks a thread (as the panels, and for int8 the columns, allow): the
// thread done first waits for one small task of the other's at most. 64
// columns, two threads, against 4 or 8 tasks a thread, weights in the
// caches: fp16 +5-13% (576x576 .. 4864x896), int8 on AVX-512 +4-13%, int8
// widened on AVX2 +7-10% (576 and 896 rows); 32 a thread no better. Fewer
// columns (a decode batch, a speculative verify) read their weights at
// the memory's pace: a few long tasks a thread, each one stream
#define WIDE_COLS 16
#define WIDE_TASKS 16
// a stealing conv's step (steal_task): an eighth of a range, at least this
#define STEAL_STEP_MIN (128u << 10)

static int
run_conv(struct emu_kernel *k, const struct step *s, size_t ncols, char *err)
{
	struct emu *e = k->e;
	struct conv_job j = {
		.panels = k->weights[s->weight].panels,
		.qpanels = k->weights[s->weight].qpanels,
		.lpanels = k->weights[s->weight].lpanels,
		.lut = k->weights[s->weight].lut,
		.scale = k->weights[s->weight].scale,
		.cout = s->cout,
		.cin = s->cin,
		.ncols = ncols,
		.x = k->bufs[s->a].data,
		.surf = k->bufs[s->a].surf,
		.ps = k->bufs[s->a].ps,
		.y = k->bufs[s->y].data,
		.npanels = (s->cout + PANEL - 1) / PANEL,
		.simd = e->simd,
	};
	j.xp = j.x;
	int par = (uint64_t)s->cout * s->cin * ncols >= PAR_MIN_MACS && e->nthreads > 1 && (int)ncols >= e->par_cols;

	// whole tiles per task (for one column 4 panels on AVX2, 8 on AVX-512,
	// or 1 when the weights come from DRAM; for more, the AVX2 tiles take 3x2
	// and 2x3, the AVX-512 ones up to 4, 3 or 2 panels): a task of 7 panels
	// would end in a 1-panel tile with half the FMA chains
	size_t unit = ncols == 1 ? 4 : 6;
#ifdef AD_FP16_X86
	// the AVX-512 fp16 tiles read x packed per column block, and so do the
	// int8 ones from EMU_I8_X512_COLS columns on (emu_conv_i8_x512); the
	// narrower int8 tiles read it as it is
	j.x512_i8 = e->simd == EMU_SIMD_AVX512 && j.qpanels && ncols >= EMU_I8_X512_COLS;
	// and the 4-bit ones once the call is wide (widened once, as int8's)
	j.x512_l4 = e->simd == EMU_SIMD_AVX512 && j.lpanels && emu_x512_blocks(ncols) >= X512_WIDE_BLOCKS;
	if (e->simd == EMU_SIMD_AVX512 && ncols > 1 && (!j.lpanels || j.x512_l4) && (!j.qpanels || j.x512_i8)) {
		size_t n = ncols * s->cin;
		if (grow64((void **)&e->xpack, &e->xpack_cap, n, sizeof(float)))
			return ad_err(err, "emu: out of memory for %zu packed activations", n);
		j.xp = e->xpack;
		size_t nb, base, extra;
		col_blocks(ncols, X512_COLS, &nb, &base, &extra);
		if (nb >= X512_WIDE_BLOCKS) {
			size_t nw = (size_t)e->nthreads * X512_WIDE_FLOATS(s->cin);
			if (grow64((void **)&e->wide, &e->wide_cap, nw, sizeof(float)))
				return ad_err(err, "emu: out of memory for %zu widened weights", nw);
			j.wide = e->wide;
		}
		if (par)
			ad_pool_run(e->pool, pack_task, &j, nb);
		else
			for (size_t b = 0; b < nb; b++)
				pack_task(&j, b, 0);
		unit = x512_mp(ncols);
	}
	if (e->simd == EMU_SIMD_AVX2 && j.qpanels && ncols >= EMU_I8_WIDE_COLS) {
		size_t n = (size_t)e->nthreads * PSTEP * s->cin;
		if (grow64((void **)&e->i8wide, &e->i8wide_cap, n, sizeof(uint16_t)))
			return ad_err(err, "emu: out of memory for %zu widened weights", n);
		j.i8wide = e->i8wide;
	}
	j.streams = 1;
	if (e->llc && e->weight_bytes <= e->llc / 2)
		j.streams = X512_COL_WARM;
	if (ncols == 1 && j.streams == 1)
		unit = PAIR; // whole pairs: a task's stream unbroken
	else if (e->simd == EMU_SIMD_AVX512 && ncols == 1)
		unit = j.streams;
#endif
	if (j.lpanels)
		unit = 4; // whole quads of 4-bit panels (emu-l4.c): one stream per task
	else if (j.qpanels && !j.wide)
		unit = j.i8wide ? PAIR
		                : 4; // whole quads of int8 panels (emu-i8.c): one stream per task; widened: pairs
	// a few tasks per thread even out the tail; one column from DRAM takes
	// one range per thread: a single stream each, whose prefetchers ramp
	// up once per conv, not four times (decode, 3 alternations: Qwen2.5
	// F16 22.4 against 21.9 tok/s, SmolLM2 F16 61.5 against 58.4), the
	// pool's workers being awake between the convs of a call (POOL_SPIN_NS);
	// its tail is evened out by stealing instead (steal_task)
	size_t ntasks = 1, nunits = (j.npanels + unit - 1) / unit;
	// A wide call over widened weights (conv512w: a prefill chunk's)
	// takes one range a thread as well, shared by stealing: each thread
	// then goes through its panels in order, each group prefetching the
	// next, and writes the same rows of y at every call, which the
	// output's scatter, split the same way (planar.c), reads on the same
	// thread. In WIDE_TASKS tasks a thread, claimed as they come, the rows
	// moved between the cores from one job to the next: one thread ran
	// SmolLM2's FFN up at 0.90 of its peak, two at 0.72-0.74 of theirs.
	// bench-emu -p avx512 -q on a Zen 5, two runs of 8 rounds alternating:
	// SmolLM2 FFN up 0.73 -> 0.755 and 0.725 -> 0.77 of the FMA peak,
	// Qwen2.5 FFN up 0.83 -> 0.88 and 0.825 -> 0.875, its down and
	// SmolLM2's LM head even; the eval of SmolLM2's FFN up alone ~373 ->
	// ~345 us (10 pairs). Every unit is still computed whole by one
	// thread: the bits do not change.
	const int wide_ranges = e->steal && par && j.wide && nunits >= 2 * (size_t)e->nthreads;
	if (par)
		ntasks = (size_t)e->nthreads * (wide_ranges                    ? 1
		                                : ncols >= WIDE_COLS           ? WIDE_TASKS
		                                : ncols == 1 && j.streams == 1 ? 1
		                                                               : 4);
	if (ntasks > nunits)
		ntasks = nunits;
	j.unit = unit;
	j.ntasks = ntasks;
	// int8 tiles of a quad: a conv of few quads (576 rows: 9) also shares
	// out its columns, in groups of 12 or more, up to WIDE_TASKS a thread
	j.cg = 1;
	if (par && j.qpanels && !j.i8wide && !j.wide && ncols >= WIDE_COLS)
		while (ntasks * j.cg < (size_t)e->nthreads * WIDE_TASKS && ncols / (j.cg + 1) >= 12)
			j.cg++;
	// one range a thread, from DRAM or wide: shared by stealing (steal_task)
	if (e->steal && par && (ncols == 1 || wide_ranges) && j.cg == 1 && ntasks == (size_t)e->nthreads &&
	    ntasks > 1) {
		if (!e->ranges && posix_memalign((void **)&e->ranges, 64, (size_t)e->nthreads * sizeof *e->ranges))
			return ad_err(err, "emu: out of memory for %d ranges", e->nthreads);
		size_t unit_bytes = j.lpanels ? unit * PANEL * s->cin / 2 : unit * PANEL * s->cin * (j.qpanels ? 1 : 2);
		size_t per = (nunits + ntasks - 1) / ntasks, min_step = (STEAL_STEP_MIN + unit_bytes - 1) / unit_bytes;
		if (wide_ranges) // compute-bound: steps of an eighth, however small
			min_step = 1;
		j.step = (per + 7) / 8 > min_step ? (per + 7) / 8 : min_step;
		for (size_t t = 0; t < ntasks; t++)
			e->ranges[t].lohi = lohi(nunits * t / ntasks, nunits * (t + 1) / ntasks);
		j.ranges = e->ranges;
		j.steals = &e->steals;
	}
	ad_pool_run(e->pool, conv_task, &j, ntasks * j.cg);
	return 0;
}

static void
run_elementwise(struct emu_kernel *k, const struct step *s, size_t n)
{
	float *y = k->bufs[s->y].data;
	const float *a = k->bufs[s->a].data;
	const float *b = s->b >= 0 ? k->bufs[s->b].data : NULL;
	// the scalar operand is itself an fp16 constant on the device
	float sc = round16(s->scalar);
	switch (s->op) {
	case S_ADD:
		for (size_t i = 0; i < n; i++)
			y[i] = a[i] + (b ? b[i] : sc);
		break;
	case S_MUL:
		for (size_t i = 0; i < n; i++)
			y[i] = a[i] * (b ? b[i] : sc);
		break;
	case S_SIGMOID:
		emu_sigmoid(k->e->simd, a, y, n);
		break;
	default:
		break;
	}
	round16_row(y, n);
}

// The FFN's gate: sigmoid (t2 = sigmoid(t0)), mul (t3 = t0 * t2), mul
// (t4 = t3 * t1), where t2 and t3 are read by nothing else. Op by op that
// is five passes over [ncols][inter] fp32 buffers (t0 twice, t2 written and
// read, t3 written and read, t1); fused it is one: t0 and t1 read once, t4
// written once, each value rounded to fp16 after each op as before, split
// over the threads. A step is "read" if a later step or an output uses it.
static int
buf_used_after(const struct emu_kernel *k, int buf, int s)
{
	for (int i = s + 1; i < k->nsteps; i++)
		if (k->steps[i].a == buf || k->steps[i].b == buf)
			return 1;
	for (int i = 0; i < k->nout; i++)
		if (k->out[i].buf == buf)
			return 1;
	return 0;
}

struct gate {
	const float *g, *u; // t0, t1
	float *h;           // t4
	size_t n, per;
	int simd;
};

// b is the other operand of a mul step with operand a (or -1)
static int
other_operand(const struct step *st, int a)
{
	if (st->op != S_MUL || st->b < 0)
		return -1;
	return st->a == a ? st->b : st->b == a ? st->a : -1;
}

// the gate at step s, or 0
static int
gate_at(const struct emu_kernel *k, int s, struct gate *gt)
{
	if (s + 2 >= k->nsteps)
		return 0;
	const struct step *sg = &k->steps[s], *m1 = &k->steps[s + 1], *m2 = &k->steps[s + 2];
	if (sg->op != S_SIGMOID || other_operand(m1, sg->y) != sg->a)
		return 0;
	int u = other_operand(m2, m1->y);
	// t1 must not be one of the dropped intermediates
	if (u < 0 || u == sg->y || u == m1->y || m2->y == sg->y || m2->y == m1->y)
		return 0;
	if (buf_used_after(k, sg->y, s + 2) || buf_used_after(k, m1->y, s + 2))
		return 0;
	if (gt) { // NULL: whether it fuses (layout_bufs)
		gt->g = k->bufs[sg->a].data;
		gt->u = k->bufs[u].data;
		gt->h = k->bufs[m2->y].data;
	}
	return 1;
}

static void
gate_task(void *arg, size_t t, int worker)
{
	struct gate *gt = arg;
	size_t i0 = t * gt->per, i1 = i0 + gt->per > gt->n ? gt->n : i0 + gt->per;
	if (i0 < i1)
		emu_gate(gt->simd, gt->g + i0, gt->u + i0, gt->h + i0, i1 - i0);
}

// below this many values the gate runs on the calling thread alone
#define PAR_MIN_GATE 4096

static void
run_gate(struct emu_kernel *k, struct gate *gt, size_t n)
{
	size_t nt = 1;
	if (n >= PAR_MIN_GATE && k->e->nthreads > 1)
		nt = (size_t)k->e->nthreads * 2;
	gt->n = n;
	gt->simd = k->e->simd;
	gt->per = ((n + nt - 1) / nt + 255) / 256 * 256; // whole 256-value chunks
	nt = (n + gt->per - 1) / gt->per;
	ad_pool_run(k->e->pool, gate_task, gt, nt);
}

// whether buffer buf (an input) is read only by convs that pack it for the
// AVX-512 tiles, so they can pack it from its surface: every conv does
// from EMU_I8_X512_COLS columns on (fp16 from 2)
static int
packs_from_surface(const struct emu_kernel *k, int buf, size_t ncols)
{
	if (k->e->simd != EMU_SIMD_AVX512 || ncols < EMU_I8_X512_COLS)
		return 0;
	for (int i = 0; i < k->nsteps; i++) {
		const struct step *st = &k->steps[i];
		if ((st->a == buf || st->b == buf) && (st->op != S_CONV || st->b == buf))
			return 0;
		if (st->op == S_CONV && st->a == buf && k->weights[st->weight].l4)
			return 0; // the 4-bit kernels read x as it is
	}
	for (int i = 0; i < k->nout; i++)
		if (k->out[i].buf == buf)
			return 0;
	return 1;
}

// the evaluation, its input from the surfaces or from host rows x_in, its
// output to the surfaces or to host rows y_out (one input and one output)
static int
eval_io(struct emu_kernel *k, const void *const *in, void *const *out, const float *x_in, size_t in_ld, float *y_out,
        size_t out_ld, size_t ncols, char *err)
{
	if (ncols == 0)
		ncols = k->width;
	if (ncols > k->width)
		return ad_err(err, "emu: %zu columns, the program is %zu wide", ncols, k->width);
	struct emu *e = k->e;
	if (k->act_bytes > e->act_cap) {
		float *a = alloc64(k->act_bytes);
		if (!a)
			return ad_err(err, "emu: out of memory for %zu bytes of activations", k->act_bytes);
		free(e->act);
		e->act = a;
		e->act_cap = k->act_bytes;
		ad_ready_clear(&e->act_ready);
	}
	for (int i = 0; i < k->nbufs; i++) {
		k->bufs[i].data = k->bufs[i].unused ? NULL : (float *)((char *)e->act + k->bufs[i].off);
		k->bufs[i].surf = NULL;
	}
	// the columns this eval writes, present before the steps write them: a
	// page's first write fault costs 26-31 us in a VM (hugemem.h), and a
	// first 64-column prefill chunk took ~400 of them here (a kernel's
	// buffers are only as wide as its calls: an LM head's, 64 columns wide,
	// is 12 MB, of which a decode step writes one column)
	for (int i = 0; i < k->nbufs; i++)
		if (!k->bufs[i].unused)
			ad_ready_range(&e->act_ready, e->act, e->act_cap, k->bufs[i].off,
			               ncols * k->bufs[i].channels * sizeof(float));
	if ((x_in && k->nin != 1) || (y_out && k->nout != 1))
		return ad_err(err, "emu: host rows need a kernel of one input and one output (%d, %d)", k->nin,
		              k->nout);
	for (int i = 0; i < k->nin; i++) {
		struct bufdesc *b = &k->bufs[k->in[i].buf];
		const size_t C = k->in[i].layout.channels;
		if (x_in) {
			// the values a surface would hold: rounded to fp16
			for (size_t j = 0; j < ncols; j++) {
				memcpy(b->data + j * b->channels, x_in + j * in_ld, C * sizeof(float));
				round16_row(b->data + j * b->channels, C);
			}
			continue;
		}
		if (!in || !in[i])
			return ad_err(err, "emu: input %d (%s) has no surface", i, k->in[i].name);
		if (packs_from_surface(k, k->in[i].buf, ncols)) {
			b->surf = in[i];
			b->ps = k->in[i].layout.plane_stride;
			continue;
		}
		emu_gather(k->e, &k->in[i].layout, in[i], b->data, ncols, b->channels);
	}
	for (int i = 0; i < k->nout && !y_out; i++)
		if (!out || !out[i])
			return ad_err(err, "emu: output %d (%s) has no surface", i, k->out[i].name);
	for (int s = 0; s < k->nsteps; s++) {
		const struct step *st = &k->steps[s];
		struct gate gt;
		if (st->op == S_CONV) {
			if (run_conv(k, st, ncols, err) < 0)
				return -1;
		} else if (!k->e->no_fuse && gate_at(k, s, &gt)) {
			run_gate(k, &gt, ncols * k->bufs[st->y].channels);
			s += 2;
		} else
			run_elementwise(k, st, ncols * k->bufs[st->y].channels);
	}
	for (int i = 0; i < k->nout; i++) {
		struct bufdesc *b = &k->bufs[k->out[i].buf];
		if (!y_out) {
			emu_scatter(k->e, &k->out[i].layout, out[i], b->data, ncols, b->channels);
			continue;
		}
		// what a gather of the surface would read back: the fp16 values
		const size_t C = k->out[i].layout.channels;
		for (size_t j = 0; j < ncols; j++) {
			memcpy(y_out + j * out_ld, b->data + j * b->channels, C * sizeof(float));
			round16_row(y_out + j * out_ld, C);
		}
	}
	return 0;
}

int
emu_eval(struct emu_kernel *k, const void *const *in, void *const *out, size_t ncols, char *err)
{
	return eval_io(k, in, out, NULL, 0, NULL, 0, ncols, err);
}

int
emu_eval_host(struct emu_kernel *k, const void *in, void *out, const float *x_in, size_t in_ld, float *y_out,
              size_t out_ld, size_t ncols, char *err)
{
	if ((x_in && in_ld < (size_t)emu_input_layout(k, 0)->channels) ||
	    (y_out && out_ld < (size_t)emu_output_layout(k, 0)->channels))
		return ad_err(err, "emu: host rows of %zu and %zu floats, the kernel has %zu and %zu channels", in_ld,
		              out_ld, emu_input_layout(k, 0)->channels, emu_output_layout(k, 0)->channels);
	return eval_io(k, &in, &out, x_in, in_ld, y_out, out_ld, ncols, err);
}
