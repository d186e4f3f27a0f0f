// emu-l4.c - the emu's conv kernels over 4-bit palettised weights (emu.h,
// "4-bit palettised weights"): MIL's constexpr_lut_to_dense with a table of
// 16 values for each group of 64 output rows, then one scale per row.
//
// Weights stay half a byte each: an index into the table of its row's
// quad (rows 64g .. 64g+63). The quads follow one another, each
// ceil(cin / 2) lines of 64 bytes; line l of a quad holds steps 2l and
// 2l + 1, as 16 little-endian u32 words: word d, nibble j (bits 4j .. 4j+3)
// is row 16 (j % 4) + d of the quad at step 2l + j / 4 (an odd cin leaves
// the last line's upper nibbles zero). So a one-column pass over quads
// [g0, g1) reads one sequential stream, and one 64-byte load gives eight
// panel steps: a word's low four bits are what vpermps reads as an index,
// so a shift right by 4j is all a step needs before its lookup (on AVX-512
// one vpermps of the table per 16 weights: no widening, no masking).
// Rows past cout have index 0.
// Three kernels compute the same bits:
//   emu_conv_l4_ref     plain C
//   emu_conv_l4_avx2    AVX2 + FMA (+ F16C for the final rounding): a
//                       16-entry table is two 8-entry permutes and a blend
//   emu_conv_l4_avx512  AVX-512 F: one vpermps looks up a panel's step
// picked at run time by emu_conv_l4_fast (cpuid; no -march flag needed).
//
// Numerics, shared by all three: output (o, j) is
//   acc = 0; for i = 0 .. cin-1: acc = fma(lut[o / 64][q[o][i]], x[j][i], acc)
//   y[j][o] = fp16(scale[o] * acc)        (fp32 product, then fp16 rounding)
// as the int8 kernels (emu-i8.c) with the table's value for the int8 one.
// The table's values are fp16, so exact in fp32, and the chain's order
// depends on neither the blocking, the number of columns nor the threads:
// the kernels agree bit for bit, and a column gives the same bits alone
// (decode) or among others (prefill).
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"
#include "fp16.h"

#define PANEL 16
#define QUAD 4               // panels a quad
#define QROWS (QUAD * PANEL) // rows a quad
#define LINE 64              // bytes of a line: two steps of a quad
#define NCOLS 6              // columns a tile at most
_Static_assert(QROWS == EMU_L4_QUAD_ROWS, "emu.h's quad rows");

// bytes of one quad
static inline size_t
quad_bytes(size_t cin)
{
	return (cin + 1) / 2 * LINE;
}

size_t
emu_l4_panel_bytes(size_t cout, size_t cin)
{
	return (cout + QROWS - 1) / QROWS * quad_bytes(cin);
}

// where row r (of its quad) at step i sits: byte, and the shift in it
static inline size_t
nib_at(size_t r, size_t i, unsigned *sh)
{
	const size_t j = r / PANEL + 4 * (i & 1), d = r % PANEL;
	*sh = 4 * (unsigned)(j & 1);
	return (i / 2) * LINE + 4 * d + j / 2;
}

void
emu_l4_pack(const uint8_t *q, size_t cout, size_t cin, uint8_t *panels)
{
	size_t nq = (cout + QROWS - 1) / QROWS;
	memset(panels, 0, nq * quad_bytes(cin));
	for (size_t g = 0; g < nq; g++)
		for (size_t r = 0; r < QROWS && g * QROWS + r < cout; r++) {
			uint8_t *dst = panels + g * quad_bytes(cin);
			for (size_t i = 0; i < cin; i++) {
				unsigned sh;
				size_t at = nib_at(r, i, &sh);
				dst[at] |= (uint8_t)((q[(g * QROWS + r) * cin + i] & 15u) << sh);
			}
		}
}

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "emu_l4_pack_quads stores the words as they are");

void
emu_l4_pack_quads(const uint8_t *packed, size_t cout, size_t cin, uint8_t *panels, size_t g0, size_t g1)
{
	if (cin % 2 == 0) {
		// every row starts on a byte, whose two nibbles are the row's steps
		// 2l and 2l + 1: word d of line l gathers byte l of rows d, 16 + d,
		// 32 + d and 48 + d, their low nibbles at bits 4j, their high ones
		// 16 bits up (the first start of Qwen2.5-0.5B with --weights lut4
		// spent 14% of its time in the loop below)
		const size_t half = cin / 2;
		for (size_t g = g0; g < g1; g++) {
			uint32_t *dst = (uint32_t *)(void *)(panels + g * quad_bytes(cin));
			for (size_t d = 0; d < PANEL; d++) {
				const uint8_t *src[QUAD];
				for (size_t k = 0; k < QUAD; k++) {
					size_t o = g * QROWS + k * PANEL + d;
					src[k] = o < cout ? packed + o * half : NULL;
				}
				for (size_t l = 0; l < half; l++) {
					uint32_t v = 0;
					for (unsigned k = 0; k < QUAD; k++) {
						uint32_t b = src[k] ? src[k][l] : 0;
						v |= (b & 15u) << (4 * k) | (b >> 4) << (4 * k + 16);
					}
					dst[l * PANEL + d] = v; // little-endian words (emu.h)
				}
			}
		}
		return;
	}
	memset(panels + g0 * quad_bytes(cin), 0, (g1 - g0) * quad_bytes(cin));
	for (size_t g = g0; g < g1; g++)
		for (size_t r = 0; r < QROWS && g * QROWS + r < cout; r++) {
			uint8_t *dst = panels + g * quad_bytes(cin);
			for (size_t i = 0, e = (g * QROWS + r) * cin; i < cin; i++, e++) {
				unsigned sh;
				size_t at = nib_at(r, i, &sh);
				dst[at] |= (uint8_t)(((packed[e / 2] >> (4 * (e & 1))) & 15u) << sh);
			}
		}
}

static inline float
round16(float v)
{
	return ad_fp16_to_f32(ad_f32_to_fp16(v));
}

void
emu_conv_l4_ref(const uint8_t *panels, const uint16_t *lut, const uint16_t *scale, size_t cout, size_t cin,
                const float *x, size_t ncols, float *y, size_t p0, size_t p1)
{
	for (size_t p = p0; p < p1; p++) {
		const size_t g = p / QUAD, k = p % QUAD;
		const uint8_t *w = panels + g * quad_bytes(cin);
		float t[16]; // the quad's table as the fp32 values looked up (exact)
		ad_fp16_to_f32_row_ref(lut + g * 16, t, 16);
		for (size_t j = 0; j < ncols; j++) {
			const float *xj = x + j * cin;
			float acc[PANEL] = {0};
			for (size_t i = 0; i < cin; i++)
				for (size_t r = 0; r < PANEL; r++) {
					unsigned sh;
					size_t at = nib_at(k * PANEL + r, i, &sh);
					acc[r] = fmaf(t[(w[at] >> sh) & 15u], xj[i], acc[r]);
				}
			for (size_t r = 0; r < PANEL && p * PANEL + r < cout; r++)
				y[j * cout + p * PANEL + r] = round16(ad_fp16_to_f32(scale[p * PANEL + r]) * acc[r]);
		}
	}
}

#ifdef AD_FP16_X86
#include <immintrin.h>

// The driver of both SIMD kernels: panels [p0, p1) quad by quad, a whole
// quad as one tile (quad_fn) and a part of one a panel at a time
// (panel_fn), by blocks of up to NCOLS columns. One column prefetches its
// stream into L2, ahead bytes on (emu_prefetch_steps lines).
typedef void quad_fn(const uint8_t *w, size_t cin, const float *t, const float *x, float *y, size_t cout, size_t left,
                     const uint16_t *sc, size_t ahead);
typedef void panel_fn(const uint8_t *w, size_t cin, unsigned k, const float *t, const float *x, float *y, size_t cout,
                      size_t left, const uint16_t *sc, size_t ahead);

static void
drive(quad_fn *const *quads, panel_fn *const *pans, const uint8_t *panels, const uint16_t *lut, const uint16_t *scale,
      size_t cout, size_t cin, const float *x, size_t ncols, float *y, size_t p0, size_t p1)
{
	const size_t ahead = ncols == 1 ? emu_prefetch_steps(1) * 64 : 0; // bytes
	for (size_t g = p0 / QUAD; g * QUAD < p1; g++) {
		const size_t a = p0 > g * QUAD ? p0 : g * QUAD, b = p1 < (g + 1) * QUAD ? p1 : (g + 1) * QUAD;
		const uint8_t *w = panels + g * quad_bytes(cin);
		float t[16]; // (F16C: the scalar widening of 16 a quad cost 3% of a pass)
		ad_fp16_to_f32_row_f16c(lut + g * 16, t, 16);
		for (size_t c0 = 0; c0 < ncols; c0 += NCOLS) {
			const size_t nc = ncols - c0 < NCOLS ? ncols - c0 : NCOLS;
			const float *xc = x + c0 * cin;
			if (a == g * QUAD && b == (g + 1) * QUAD) {
				quads[nc](w, cin, t, xc, y + c0 * cout + a * PANEL, cout, cout - a * PANEL,
				          scale + a * PANEL, ahead);
				continue;
			}
			for (size_t p = a; p < b; p++)
				pans[nc](w, cin, (unsigned)(p % QUAD), t, xc, y + c0 * cout + p * PANEL, cout,
				         cout - p * PANEL, scale + p * PANEL, ahead);
		}
	}
}

// ---- AVX2: a panel's step is two ymm (rows 0-7, 8-15: a line's words 0-7
// and 8-15)
#define T2 __attribute__((target("avx2,fma,f16c")))

// t[a nibble of each word] for 8 words, the words shifted right by sr (the
// nibble to the low bits) and left by sl (its top bit to the sign): two
// 8-entry permutes (their index the low three bits), the sign picks
T2 static inline __attribute__((always_inline)) __m256
look2(__m256 tlo, __m256 thi, __m256i v, __m128i sr, __m128i sl)
{
	__m256i idx = _mm256_srl_epi32(v, sr);
	__m256 lo = _mm256_permutevar8x32_ps(tlo, idx), hi = _mm256_permutevar8x32_ps(thi, idx);
	return _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_sll_epi32(v, sl)));
}

// the sums of one panel (two ymm a column) times their rows' scales,
// rounded to fp16; rows from left on are not written
T2 static inline __attribute__((always_inline)) void
store2(float *y, size_t cout, size_t left, const uint16_t *sc, const __m256 *acc, const int nc)
{
	__m256 slo = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)sc));
	__m256 shi = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sc + 8)));
#pragma GCC unroll 6
	for (int c = 0; c < nc; c++) {
		__m256 lo = _mm256_mul_ps(slo, acc[2 * c]), hi = _mm256_mul_ps(shi, acc[2 * c + 1]);
		lo = _mm256_cvtph_ps(_mm256_cvtps_ph(lo, _MM_FROUND_TO_NEAREST_INT));
		hi = _mm256_cvtph_ps(_mm256_cvtps_ph(hi, _MM_FROUND_TO_NEAREST_INT));
		float *dst = y + (size_t)c * cout;
		if (left >= PANEL) {
			_mm256_storeu_ps(dst, lo);
			_mm256_storeu_ps(dst + 8, hi);
		} else {
			float tmp[PANEL];
			_mm256_storeu_ps(tmp, lo);
			_mm256_storeu_ps(tmp + 8, hi);
			memcpy(dst, tmp, left * sizeof(float));
		}
	}
}

// step i of one panel (the nibble sr / sl pick of the line's words v0, v1) into acc
T2 static inline __attribute__((always_inline)) void
step2(__m256 tlo, __m256 thi, __m256i v0, __m256i v1, __m128i sr, __m128i sl, const float *x, size_t cin, size_t i,
      __m256 *acc, const int nc)
{
	__m256 lo = look2(tlo, thi, v0, sr, sl), hi = look2(tlo, thi, v1, sr, sl);
#pragma GCC unroll 6
	for (int c = 0; c < nc; c++) {
		__m256 b = _mm256_broadcast_ss(x + (size_t)c * cin + i);
		acc[2 * c] = _mm256_fmadd_ps(lo, b, acc[2 * c]);
		acc[2 * c + 1] = _mm256_fmadd_ps(hi, b, acc[2 * c + 1]);
	}
}

// panel k of the quad at w by nc columns: step i is nibble k + 4 (i % 2)
// of line i / 2's words
T2 static inline __attribute__((always_inline)) void
panel2(const uint8_t *w, size_t cin, unsigned k, const float *t, const float *x, float *y, size_t cout, size_t left,
       const uint16_t *sc, size_t ahead, const int nc)
{
	const int nta = emu_prefetch_nta(1);
	const __m256 tlo = _mm256_loadu_ps(t), thi = _mm256_loadu_ps(t + 8);
	const __m128i sr0 = _mm_cvtsi32_si128((int)(4 * k)), sr1 = _mm_cvtsi32_si128((int)(4 * k + 16));
	const __m128i sl0 = _mm_cvtsi32_si128((int)(28 - 4 * k)), sl1 = _mm_cvtsi32_si128((int)(12 - 4 * k));
	__m256 acc[2 * NCOLS];
#pragma GCC unroll 12
	for (int a = 0; a < 2 * nc; a++)
		acc[a] = _mm256_setzero_ps();
	for (size_t i = 0; i < cin; i += 2) {
		const uint8_t *s = w + i / 2 * LINE;
		if (ahead)
			emu_prefetch_line(s + ahead, nta);
		__m256i v0 = _mm256_loadu_si256((const __m256i *)s), v1 = _mm256_loadu_si256((const __m256i *)(s + 32));
		step2(tlo, thi, v0, v1, sr0, sl0, x, cin, i, acc, nc);
		if (i + 1 < cin) // (an odd cin's last line holds one step)
			step2(tlo, thi, v0, v1, sr1, sl1, x, cin, i + 1, acc, nc);
	}
	store2(y, cout, left, sc, acc, nc);
}

#define PANEL2(NC)                                                                                                     \
	T2 static void p2_##NC(const uint8_t *w, size_t cin, unsigned k, const float *t, const float *x, float *y,     \
	                       size_t cout, size_t left, const uint16_t *sc, size_t ahead)                             \
	{                                                                                                              \
		panel2(w, cin, k, t, x, y, cout, left, sc, ahead, NC);                                                 \
	}
PANEL2(1)
PANEL2(2)
PANEL2(3)
PANEL2(4)
PANEL2(5)
PANEL2(6)

// a whole quad on AVX2: its four panels one after the other (the
// accumulators of four panels by several columns do not fit 16 ymm)
#define QUAD2(NC)                                                                                                      \
	T2 static void q2_##NC(const uint8_t *w, size_t cin, const float *t, const float *x, float *y, size_t cout,    \
	                       size_t left, const uint16_t *sc, size_t ahead)                                          \
	{                                                                                                              \
		for (unsigned k = 0; k < QUAD && k * PANEL < left; k++)                                                \
			panel2(w, cin, k, t, x, y + k * PANEL, cout, left - k * PANEL, sc + k * PANEL, ahead, NC);     \
	}
QUAD2(1)
QUAD2(2)
QUAD2(3)
QUAD2(4)
QUAD2(5)
QUAD2(6)

static quad_fn *const quads2[NCOLS + 1] = {NULL, q2_1, q2_2, q2_3, q2_4, q2_5, q2_6};
static panel_fn *const pans2[NCOLS + 1] = {NULL, p2_1, p2_2, p2_3, p2_4, p2_5, p2_6};

T2 void
emu_conv_l4_avx2(const uint8_t *panels, const uint16_t *lut, const uint16_t *scale, size_t cout, size_t cin,
                 const float *x, size_t ncols, float *y, size_t p0, size_t p1)
{
	drive(quads2, pans2, panels, lut, scale, cout, cin, x, ncols, y, p0, p1);
}

// ---- AVX-512: a panel's step is one zmm, looked up by one vpermps
#define T5 __attribute__((target("avx512f,avx2,fma,f16c")))

T5 static inline __attribute__((always_inline)) void
store5(float *y, size_t cout, size_t left, const uint16_t *sc, const __m512 *acc, const int mp, const int nc)
{
#pragma GCC unroll 4
	for (int p = 0; p < mp; p++) {
		if ((size_t)p * PANEL >= left)
			break;
		__m512 s = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(sc + p * PANEL)));
		size_t l = left - (size_t)p * PANEL;
		__mmask16 m = l >= PANEL ? (__mmask16)0xffff : (__mmask16)((1u << l) - 1);
#pragma GCC unroll 6
		for (int c = 0; c < nc; c++) {
			__m512 v = _mm512_mul_ps(s, acc[p * nc + c]);
			v = _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
			_mm512_mask_storeu_ps(y + (size_t)c * cout + (size_t)p * PANEL, m, v);
		}
	}
}

// nibble j of the line's words: step i + j / 4 of panel j % 4, into acc
T5 static inline __attribute__((always_inline)) void
step5(__m512 tab, __m512i v, int j, const float *x, size_t cin, size_t i, __m512 *acc, int p, const int nc)
{
	__m512 wv = _mm512_permutexvar_ps(j ? _mm512_srli_epi32(v, 4 * j) : v, tab);
#pragma GCC unroll 6
	for (int c = 0; c < nc; c++)
		acc[p * nc + c] = _mm512_fmadd_ps(wv, _mm512_set1_ps(x[(size_t)c * cin + i]), acc[p * nc + c]);
}

// a whole quad by nc columns: a line's 64 bytes looked up eight times
T5 static inline __attribute__((always_inline)) void
quad5(const uint8_t *w, size_t cin, const float *t, const float *x, float *y, size_t cout, size_t left,
      const uint16_t *sc, size_t ahead, const int nc)
{
	const int nta = emu_prefetch_nta(1);
	const __m512 tab = _mm512_loadu_ps(t);
	__m512 acc[QUAD * NCOLS];
#pragma GCC unroll 24
	for (int a = 0; a < QUAD * nc; a++)
		acc[a] = _mm512_setzero_ps();
	size_t i = 0;
	for (; i + 1 < cin; i += 2) {
		const uint8_t *s = w + i / 2 * LINE;
		if (ahead)
			emu_prefetch_line(s + ahead, nta);
		__m512i v = _mm512_loadu_si512(s);
#pragma GCC unroll 4
		for (int p = 0; p < QUAD; p++)
			step5(tab, v, p, x, cin, i, acc, p, nc);
#pragma GCC unroll 4
		for (int p = 0; p < QUAD; p++)
			step5(tab, v, p + 4, x, cin, i + 1, acc, p, nc);
	}
	if (i < cin) {
		__m512i v = _mm512_loadu_si512(w + i / 2 * LINE);
#pragma GCC unroll 4
		for (int p = 0; p < QUAD; p++)
			step5(tab, v, p, x, cin, i, acc, p, nc);
	}
	store5(y, cout, left, sc, acc, QUAD, nc);
}

// panel k of the quad at w by nc columns
T5 static inline __attribute__((always_inline)) void
panel5(const uint8_t *w, size_t cin, unsigned k, const float *t, const float *x, float *y, size_t cout, size_t left,
       const uint16_t *sc, size_t ahead, const int nc)
{
	const int nta = emu_prefetch_nta(1);
	const __m512 tab = _mm512_loadu_ps(t);
	const __m128i c0 = _mm_cvtsi32_si128((int)(4 * k)), c1 = _mm_cvtsi32_si128((int)(4 * k + 16));
	__m512 acc[NCOLS];
#pragma GCC unroll 6
	for (int a = 0; a < nc; a++)
		acc[a] = _mm512_setzero_ps();
	for (size_t i = 0; i < cin; i++) {
		const uint8_t *s = w + i / 2 * LINE;
		if (ahead && !(i & 1))
			emu_prefetch_line(s + ahead, nta);
		__m512i v = _mm512_loadu_si512(s);
		__m512 wv = _mm512_permutexvar_ps(_mm512_srl_epi32(v, i & 1 ? c1 : c0), tab);
#pragma GCC unroll 6
		for (int c = 0; c < nc; c++)
			acc[c] = _mm512_fmadd_ps(wv, _mm512_set1_ps(x[(size_t)c * cin + i]), acc[c]);
	}
	store5(y, cout, left, sc, acc, 1, nc);
}

#define TILES5(NC)                                                                                                     \
	T5 static void q5_##NC(const uint8_t *w, size_t cin, const float *t, const float *x, float *y, size_t cout,    \
	                       size_t left, const uint16_t *sc, size_t ahead)                                          \
	{                                                                                                              \
		quad5(w, cin, t, x, y, cout, left, sc, ahead, NC);                                                     \
	}                                                                                                              \
	T5 static void p5_##NC(const uint8_t *w, size_t cin, unsigned k, const float *t, const float *x, float *y,     \
	                       size_t cout, size_t left, const uint16_t *sc, size_t ahead)                             \
	{                                                                                                              \
		panel5(w, cin, k, t, x, y, cout, left, sc, ahead, NC);                                                 \
	}
TILES5(1)
TILES5(2)
TILES5(3)
TILES5(4)
TILES5(5)
TILES5(6)

static quad_fn *const quads5[NCOLS + 1] = {NULL, q5_1, q5_2, q5_3, q5_4, q5_5, q5_6};
static panel_fn *const pans5[NCOLS + 1] = {NULL, p5_1, p5_2, p5_3, p5_4, p5_5, p5_6};

T5 void
emu_conv_l4_avx512(const uint8_t *panels, const uint16_t *lut, const uint16_t *scale, size_t cout, size_t cin,
                   const float *x, size_t ncols, float *y, size_t p0, size_t p1)
{
	drive(quads5, pans5, panels, lut, scale, cout, cin, x, ncols, y, p0, p1);
}
void
emu_conv_l4_at(int isa, const uint8_t *panels, const uint16_t *lut, const uint16_t *scale, size_t cout, size_t cin,
               const float *x, size_t ncols, float *y, size_t p0, size_t p1)
{
	if (isa > emu_i8_isa())
		isa = emu_i8_isa();
	if (isa >= 2)
		emu_conv_l4_avx512(panels, lut, scale, cout, cin, x, ncols, y, p0, p1);
	else if (isa == 1)
		emu_conv_l4_avx2(panels, lut, scale, cout, cin, x, ncols, y, p0, p1);
	else
		emu_conv_l4_ref(panels, lut, scale, cout, cin, x, ncols, y, p0, p1);
}
#else
void
emu_conv_l4_avx2(const uint8_t *panels, const uint16_t *lut, const uint16_t *scale, size_t cout, size_t cin,
                 const float *x, size_t ncols, float *y, size_t p0, size_t p1)
{
	emu_conv_l4_ref(panels, lut, scale, cout, cin, x, ncols, y, p0, p1);
}

void
emu_conv_l4_avx512(const uint8_t *panels, const uint16_t *lut, const uint16_t *scale, size_t cout, size_t cin,
                   const float *x, size_t ncols, float *y, size_t p0, size_t p1)
{
	emu_conv_l4_ref(panels, lut, scale, cout, cin, x, ncols, y, p0, p1);
}

void
emu_conv_l4_at(int isa, const uint8_t *panels, const uint16_t *lut, const uint16_t *scale, size_t cout, size_t cin,
               const float *x, size_t ncols, float *y, size_t p0, size_t p1)
{
	(void)isa;
	emu_conv_l4_ref(panels, lut, scale, cout, cin, x, ncols, y, p0, p1);
}
#endif

void
emu_conv_l4_fast(const uint8_t *panels, const uint16_t *lut, const uint16_t *scale, size_t cout, size_t cin,
                 const float *x, size_t ncols, float *y, size_t p0, size_t p1)
{
	emu_conv_l4_at(emu_i8_isa(), panels, lut, scale, cout, cin, x, ncols, y, p0, p1);
}
