// dequant.c - ggml block formats to float32.
//
// Each decoder follows ggml's dequantize_row_<type> in the order of its float
// operations, so results match bit for bit (tests/data/dequant). Blocks are
// read byte-wise: GGUF gives no alignment guarantee beyond the tensor start.
#include "dequant.h"

#include <string.h>

#include "fp16.h"

static inline float
rd_fp16(const uint8_t *p)
{
	return ad_fp16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

static inline uint32_t
rd_u32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void
deq_f32(const uint8_t *restrict x, float *restrict y, int64_t n)
{
	memcpy(y, x, (size_t)n * 4);
}

static void
deq_f16(const uint8_t *restrict x, float *restrict y, int64_t n)
{
	// the row converter reads uint16_t; copy through an aligned chunk if needed
	if (((uintptr_t)x & 1) == 0) {
		ad_fp16_to_f32_row((const uint16_t *)(const void *)x, y, (size_t)n);
		return;
	}
	for (int64_t i = 0; i < n; i++)
		y[i] = rd_fp16(x + 2 * i);
}

static void
deq_bf16(const uint8_t *restrict x, float *restrict y, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		y[i] = ad_bf16_to_f32((uint16_t)(x[2 * i] | x[2 * i + 1] << 8));
}

static void
deq_q4_0(const uint8_t *restrict x, float *restrict y, int64_t nb)
{
	for (int64_t b = 0; b < nb; b++, x += 18, y += 32) {
		float d = rd_fp16(x);
		const uint8_t *qs = x + 2;
		for (int j = 0; j < 16; j++)
			y[j] = (float)((qs[j] & 15) - 8) * d;
		for (int j = 0; j < 16; j++)
			y[j + 16] = (float)((qs[j] >> 4) - 8) * d;
	}
}

static void
deq_q4_1(const uint8_t *restrict x, float *restrict y, int64_t nb)
{
	for (int64_t b = 0; b < nb; b++, x += 20, y += 32) {
		float d = rd_fp16(x), m = rd_fp16(x + 2);
		const uint8_t *qs = x + 4;
		for (int j = 0; j < 16; j++)
			y[j] = (float)(qs[j] & 15) * d + m;
		for (int j = 0; j < 16; j++)
			y[j + 16] = (float)(qs[j] >> 4) * d + m;
	}
}

static void
deq_q5_0(const uint8_t *restrict x, float *restrict y, int64_t nb)
{
	for (int64_t b = 0; b < nb; b++, x += 22, y += 32) {
		float d = rd_fp16(x);
		uint32_t qh = rd_u32(x + 2);
		const uint8_t *qs = x + 6;
		for (int j = 0; j < 16; j++) {
			int h0 = (qh >> j) & 1, h1 = (qh >> (j + 16)) & 1;
			y[j] = (float)(((qs[j] & 15) | h0 << 4) - 16) * d;
			y[j + 16] = (float)(((qs[j] >> 4) | h1 << 4) - 16) * d;
		}
	}
}

static void
deq_q5_1(const uint8_t *restrict x, float *restrict y, int64_t nb)
{
	for (int64_t b = 0; b < nb; b++, x += 24, y += 32) {
		float d = rd_fp16(x), m = rd_fp16(x + 2);
		uint32_t qh = rd_u32(x + 4);
		const uint8_t *qs = x + 8;
		for (int j = 0; j < 16; j++) {
			int h0 = (qh >> j) & 1, h1 = (qh >> (j + 16)) & 1;
			y[j] = (float)((qs[j] & 15) | h0 << 4) * d + m;
			y[j + 16] = (float)((qs[j] >> 4) | h1 << 4) * d + m;
		}
	}
}

static void
deq_q8_0(const uint8_t *restrict x, float *restrict y, int64_t nb)
{
	for (int64_t b = 0; b < nb; b++, x += 34, y += 32) {
		float d = rd_fp16(x);
		const int8_t *qs = (const int8_t *)(x + 2);
		for (int j = 0; j < 32; j++)
			y[j] = (float)qs[j] * d;
	}
}

// Q8_1: d (fp16), s = d * sum(qs) (fp16, for dot products; not needed
// here), 32 int8. ggml itself has no dequantisation of it (only a
// quantiser): the value is d * q, as for Q8_0.
static void
deq_q8_1(const uint8_t *restrict x, float *restrict y, int64_t nb)
{
	for (int64_t b = 0; b < nb; b++, x += 36, y += 32) {
		float d = rd_fp16(x);
		const int8_t *qs = (const int8_t *)(x + 4);
		for (int j = 0; j < 32; j++)
			y[j] = (float)qs[j] * d;
	}
}

static void
deq_q2_k(const uint8_t *restrict x, float *restrict y, int64_t nb)
{
	for (int64_t b = 0; b < nb; b++, x += 84) {
		const uint8_t *sc = x, *q = x + 16;
		float d = rd_fp16(x + 80), dmin = rd_fp16(x + 82);
		int is = 0;
		for (int h = 0; h < 2; h++, q += 32) {
			for (int shift = 0; shift < 8; shift += 2) {
				for (int half = 0; half < 2; half++) {
					uint8_t s = sc[is++];
					float dl = d * (float)(s & 15), ml = dmin * (float)(s >> 4);
					for (int l = 16 * half; l < 16 * half + 16; l++)
						*y++ = dl * (float)((q[l] >> shift) & 3) - ml;
				}
			}
		}
	}
}

static void
deq_q3_k(const uint8_t *restrict x, float *restrict y, int64_t nb)
{
	for (int64_t b = 0; b < nb; b++, x += 110) {
		const uint8_t *hm = x, *q = x + 32, *s = x + 96;
		float d = rd_fp16(x + 108);
		int8_t scale[16];
		for (int j = 0; j < 16; j++) {
			int lo = j < 8 ? s[j] & 15 : s[j - 8] >> 4;
			int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
			scale[j] = (int8_t)((lo | hi << 4) - 32);
		}
		int is = 0;
		uint8_t m = 1;
		for (int h = 0; h < 2; h++, q += 32) {
			for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
				for (int half = 0; half < 2; half++) {
					float dl = d * (float)scale[is++];
					for (int l = 16 * half; l < 16 * half + 16; l++) {
						int v = ((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4);
						*y++ = dl * (float)v;
					}
				}
			}
		}
	}
}

// the 6-bit scale and min of sub-block j in the 12 packed bytes of Q4_K/Q5_K
static inline void
scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
	if (j < 4) {
		*sc = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*sc = (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4);
		*m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
	}
}

// the scales and mins of sub-blocks j and j + 1 of a Q4_K or Q5_K block
static inline void
k4_pair(int j, const uint8_t *scales, float d, float dmin, float *d1, float *m1, float *d2, float *m2)
{
	uint8_t sc, m;
	scale_min_k4(j, scales, &sc, &m);
	*d1 = d * (float)sc, *m1 = dmin * (float)m;
	scale_min_k4(j + 1, scales, &sc, &m);
	*d2 = d * (float)sc, *m2 = dmin * (float)m;
}

static void
deq_q4_k(const uint8_t *restrict x, float *restrict y, int64_t nb)
{
	for (int64_t b = 0; b < nb; b++, x += 144) {
		float d = rd_fp16(x), dmin = rd_fp16(x + 2);
		const uint8_t *scales = x + 4, *q = x + 16;
		for (int j = 0; j < 8; j += 2, q += 32) {
			float d1, m1, d2, m2;
			k4_pair(j, scales, d, dmin, &d1, &m1, &d2, &m2);
			for (int l = 0; l < 32; l++)
				*y++ = d1 * (float)(q[l] & 15) - m1;
			for (int l = 0; l < 32; l++)
				*y++ = d2 * (float)(q[l] >> 4) - m2;
		}
	}
}

static void
deq_q5_k(const uint8_t *restrict x, float *restrict y, int64_t nb)
{
	for (int64_t b = 0; b < nb; b++, x += 176) {
		float d = rd_fp16(x), dmin = rd_fp16(x + 2);
		const uint8_t *scales = x + 4, *qh = x + 16, *q = x + 48;
		uint8_t u1 = 1, u2 = 2;
		for (int j = 0; j < 8; j += 2, q += 32, u1 <<= 2, u2 <<= 2) {
			float d1, m1, d2, m2;
			k4_pair(j, scales, d, dmin, &d1, &m1, &d2, &m2);
			for (int l = 0; l < 32; l++)
				*y++ = d1 * (float)((q[l] & 15) + (qh[l] & u1 ? 16 : 0)) - m1;
			for (int l = 0; l < 32; l++)
				*y++ = d2 * (float)((q[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
		}
	}
}

static void
deq_q6_k(const uint8_t *restrict x, float *restrict y, int64_t nb)
{
	for (int64_t b = 0; b < nb; b++, x += 210) {
		const int8_t *sc = (const int8_t *)(x + 192);
		float d = rd_fp16(x + 208);
		for (int h = 0; h < 2; h++) {
			const uint8_t *qh = x + 128 + 32 * h;
			for (int p = 0; p < 4; p++) {
				const uint8_t *ql = x + 64 * h + 32 * (p & 1);
				int lshift = p < 2 ? 0 : 4, hshift = 2 * p;
				for (int half = 0; half < 2; half++) {
					float dl = d * (float)sc[8 * h + 2 * p + half];
					for (int l = 16 * half; l < 16 * half + 16; l++) {
						int q = (((ql[l] >> lshift) & 15) | ((qh[l] >> hshift) & 3) << 4) - 32;
						*y++ = dl * (float)q;
					}
				}
			}
		}
	}
}

static void
deq_q8_k(const uint8_t *restrict x, float *restrict y, int64_t nb)
{
	for (int64_t b = 0; b < nb; b++, x += 292, y += 256) {
		float d;
		memcpy(&d, x, 4);
		const int8_t *qs = (const int8_t *)(x + 4);
		for (int j = 0; j < 256; j++)
			y[j] = d * (float)qs[j];
	}
}

// IQ4_NL and IQ4_XS: 4-bit indices into ggml's non-linear table (its
// kvalues_iq4nl), low nibbles the first 16 values of 32, high the last 16
static const int8_t iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static void
deq_iq4_nl(const uint8_t *restrict x, float *restrict y, int64_t nb)
{
	for (int64_t b = 0; b < nb; b++, x += 18, y += 32) {
		const float d = rd_fp16(x);
		const uint8_t *qs = x + 2;
		for (int j = 0; j < 16; j++) {
			y[j] = d * iq4nl_values[qs[j] & 0xf];
			y[j + 16] = d * iq4nl_values[qs[j] >> 4];
		}
	}
}

// a super-block of 256: fp16 d, then 6-bit scales (high 2 bits of the eight
// in a u16, low 4 in four bytes), then the 128 bytes of indices
static void
deq_iq4_xs(const uint8_t *restrict x, float *restrict y, int64_t nb)
{
	for (int64_t b = 0; b < nb; b++, x += 136) {
		const float d = rd_fp16(x);
		const unsigned scales_h = (unsigned)x[2] | (unsigned)x[3] << 8;
		const uint8_t *scales_l = x + 4, *qs = x + 8;
		for (int ib = 0; ib < 8; ib++, qs += 16, y += 32) {
			const int ls = ((scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | (((scales_h >> 2 * ib) & 3) << 4);
			const float dl = d * (float)(ls - 32);
			for (int j = 0; j < 16; j++) {
				y[j] = dl * iq4nl_values[qs[j] & 0xf];
				y[j + 16] = dl * iq4nl_values[qs[j] >> 4];
			}
		}
	}
}

// MXFP4 (OCP microscaling): an E8M0 exponent, then 4-bit e2m1 values, held
// doubled as ggml holds them with half the scale
static const int8_t fp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static float
e8m0_half(uint8_t e)
{
	// 2^(e - 128): e of 0 and 1 are subnormal
	uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
	float f;
	memcpy(&f, &bits, 4);
	return f;
}

static void
deq_mxfp4(const uint8_t *restrict x, float *restrict y, int64_t nb)
{
	for (int64_t b = 0; b < nb; b++, x += 17, y += 32) {
		const float d = e8m0_half(x[0]);
		const uint8_t *qs = x + 1;
		for (int j = 0; j < 16; j++) {
			y[j] = fp4_values[qs[j] & 0xf] * d;
			y[j + 16] = fp4_values[qs[j] >> 4] * d;
		}
	}
}

int
ad_dequant(uint32_t type, const void *src, float *dst, int64_t n, char *err)
{
	const char *name = ad_type_name(type);
	if (!ad_type_supported(type)) {
		if (name)
			return ad_err(err, "dequant: type %s is not supported", name);
		return ad_err(err, "dequant: unknown type id %u", type);
	}
	int64_t bs = ad_type_block_size(type);
	if (n < 0 || n % bs)
		return ad_err(err, "dequant: %s: %lld values is not a multiple of the block size %lld", name,
		              (long long)n, (long long)bs);
	const uint8_t *x = src;
	int64_t nb = n / bs;
	switch (type) {
	case AD_TYPE_F32:
		deq_f32(x, dst, n);
		break;
	case AD_TYPE_F16:
		deq_f16(x, dst, n);
		break;
	case AD_TYPE_BF16:
		deq_bf16(x, dst, n);
		break;
	case AD_TYPE_Q4_0:
		deq_q4_0(x, dst, nb);
		break;
	case AD_TYPE_Q4_1:
		deq_q4_1(x, dst, nb);
		break;
	case AD_TYPE_Q5_0:
		deq_q5_0(x, dst, nb);
		break;
	case AD_TYPE_Q5_1:
		deq_q5_1(x, dst, nb);
		break;
	case AD_TYPE_Q8_0:
		deq_q8_0(x, dst, nb);
		break;
	case AD_TYPE_Q8_1:
		deq_q8_1(x, dst, nb);
		break;
	case AD_TYPE_Q2_K:
		deq_q2_k(x, dst, nb);
		break;
	case AD_TYPE_Q3_K:
		deq_q3_k(x, dst, nb);
		break;
	case AD_TYPE_Q4_K:
		deq_q4_k(x, dst, nb);
		break;
	case AD_TYPE_Q5_K:
		deq_q5_k(x, dst, nb);
		break;
	case AD_TYPE_Q6_K:
		deq_q6_k(x, dst, nb);
		break;
	case AD_TYPE_Q8_K:
		deq_q8_k(x, dst, nb);
		break;
	case AD_TYPE_IQ4_NL:
		deq_iq4_nl(x, dst, nb);
		break;
	case AD_TYPE_IQ4_XS:
		deq_iq4_xs(x, dst, nb);
		break;
	case AD_TYPE_MXFP4:
		deq_mxfp4(x, dst, nb);
		break;
	default:
		return ad_err(err, "dequant: type %s is not supported", name);
	}
	return 0;
}
