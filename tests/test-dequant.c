// test-dequant: fp16/bf16 conversions and every block type against ggml.
#include <math.h>
#include <stdint.h>

#include "dequant.h"
#include "fp16.h"
#include "t.h"

#pragma GCC diagnostic ignored "-Wformat-zero-length" // CHECK without a message

// fp16 -> f32 worked out independently, in double arithmetic
static double
fp16_value(uint16_t h)
{
	int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
	double v;
	if (exp == 31)
		v = man ? NAN : INFINITY;
	else if (exp == 0)
		v = ldexp(man, -24);
	else
		v = ldexp(1024 + man, exp - 25);
	return sign ? -v : v;
}

static void
test_fp16_to_f32_all(void)
{
	int bad = 0;
	for (uint32_t h = 0; h < 65536; h++) {
		float f = ad_fp16_to_f32((uint16_t)h);
		double want = fp16_value((uint16_t)h);
		if (isnan(want)) {
			uint32_t u = ad_f32_bits(f);
			// quiet NaN with the sign and payload kept
			if (!isnan(f) || (u >> 31) != (h >> 15) || !(u & 0x400000) ||
			    ((u >> 13) & 0x1ff) != (h & 0x1ff))
				bad++;
		} else if ((double)f != want || !!signbit(f) != (int)(h >> 15)) {
			bad++;
		}
	}
	CHECK(bad == 0, "%d fp16 values decode wrongly", bad);
}

static void
test_fp16_roundtrip_all(void)
{
	int bad = 0;
	for (uint32_t h = 0; h < 65536; h++) {
		uint16_t back = ad_f32_to_fp16(ad_fp16_to_f32((uint16_t)h));
		uint16_t want = (uint16_t)h;
		if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff))
			want |= 0x200; // NaN comes back quiet
		if (back != want)
			bad++;
	}
	CHECK(bad == 0, "%d fp16 values do not survive f32 and back", bad);
}

// the nearest half to v, ties to even, checked by brute force over neighbours
static int
is_correct_rounding(float f, uint16_t h)
{
	double v = f;
	if (isnan(v))
		return (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
	if (fabs(v) >= 65520.0)
		return h == (v < 0 ? 0xfc00 : 0x7c00);
	double got = fp16_value(h);
	if (isinf(got) || (signbit(got) != signbit(v)))
		return 0;
	uint16_t mag = h & 0x7fff;
	double err = fabs(got - v);
	// the neighbours one ulp away must be no closer; on a tie h must be even
	for (int d = -1; d <= 1; d += 2) {
		int nm = (int)mag + d;
		if (nm < 0 || nm > 0x7bff)
			continue;
		double other = fp16_value((uint16_t)((h & 0x8000) | nm));
		double oerr = fabs(other - v);
		if (oerr < err || (oerr == err && (mag & 1)))
			return 0;
	}
	return 1;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t
next_u32(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

static void
test_f32_to_fp16_rounding(void)
{
	int bad = 0;
	// every half, the midpoints to its neighbours and one ulp either side
	for (uint32_t h = 0; h < 0x7c00; h++) {
		float a = ad_fp16_to_f32((uint16_t)h), b = ad_fp16_to_f32((uint16_t)(h + 1));
		float mid = (float)(((double)a + (double)b) / 2);
		float probes[] = {a, mid, nextafterf(mid, 0), nextafterf(mid, INFINITY), -mid};
		for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++)
			if (!is_correct_rounding(probes[i], ad_f32_to_fp16(probes[i])))
				bad++;
	}
	// random bit patterns over the whole f32 range
	for (int i = 0; i < 1000000; i++) {
		float f = ad_bits_f32(next_u32());
		if (!is_correct_rounding(f, ad_f32_to_fp16(f)))
			bad++;
	}
	CHECK(bad == 0, "%d float32 values round wrongly", bad);
	CHECK(ad_f32_to_fp16(65519.0f) == 0x7bff);
	CHECK(ad_f32_to_fp16(65520.0f) == 0x7c00);
	CHECK(ad_f32_to_fp16(-INFINITY) == 0xfc00);
	CHECK(ad_f32_to_fp16(ldexpf(1, -25)) == 0);
	CHECK(ad_f32_to_fp16(nextafterf(ldexpf(1, -25), 1)) == 1);
	CHECK(ad_f32_to_fp16(-0.0f) == 0x8000);
}

static void
test_bf16(void)
{
	CHECK(ad_f32_to_bf16(1.0f) == 0x3f80);
	// ties to even: 1 + 2^-8 sits halfway between 0x3f80 and 0x3f81
	CHECK(ad_f32_to_bf16(ad_bits_f32(0x3f808000)) == 0x3f80);
	CHECK(ad_f32_to_bf16(ad_bits_f32(0x3f818000)) == 0x3f82);
	CHECK(ad_f32_to_bf16(ad_bits_f32(0x3f808001)) == 0x3f81);
	CHECK(ad_f32_to_bf16(ad_bits_f32(0x7f800001)) == 0x7fc0); // quiet NaN
	CHECK(ad_f32_to_bf16(ad_bits_f32(0xff800000)) == 0xff80);
	int bad = 0;
	for (uint32_t h = 0; h < 65536; h++) {
		float f = ad_bf16_to_f32((uint16_t)h);
		if (ad_f32_bits(f) != h << 16)
			bad++;
		uint16_t back = ad_f32_to_bf16(f);
		uint16_t want = (uint16_t)h;
		if ((h & 0x7f80) == 0x7f80 && (h & 0x7f))
			want |= 64;
		if (back != want)
			bad++;
	}
	CHECK(bad == 0, "%d bf16 values wrong", bad);
}

static void
test_rows_fast_vs_ref(void)
{
	enum { N = 65536 + 13 };
	static uint16_t h[N], h1[N], h2[N];
	static float f[N], f1[N], f2[N];
	for (uint32_t i = 0; i < N; i++)
		h[i] = (uint16_t)i;
	ad_fp16_to_f32_row(h, f1, N);
	ad_fp16_to_f32_row_ref(h, f2, N);
	CHECK(memcmp(f1, f2, sizeof f1) == 0, "fp16->f32 rows differ");
	for (uint32_t i = 0; i < N; i++) {
		uint32_t u = next_u32();
		// half the probes in the fp16 range, where rounding matters
		if (i & 1)
			u = (u & 0x80ffffff) | ((0x30 + (u >> 24) % 0x18) << 24 & 0x7f000000);
		f[i] = ad_bits_f32(u);
	}
	f[0] = ad_fp16_to_f32(0x3c01) + ldexpf(1, -11); // a tie
	ad_f32_to_fp16_row(f, h1, N);
	ad_f32_to_fp16_row_ref(f, h2, N);
	CHECK(memcmp(h1, h2, sizeof h1) == 0, "f32->fp16 rows differ");
#ifdef AD_FP16_X86
	fprintf(stderr, "  f16c fast path %s\n", ad_have_f16c() ? "used" : "not available");
#endif
}

static const char *types[] = {
	"F16",  "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1",   "Q8_0",   "Q8_1",  "Q2_K",
	"Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ4_NL", "IQ4_XS", "MXFP4",
};

static uint32_t
type_id(const char *name)
{
	for (uint32_t t = 0; t < AD_TYPE_COUNT; t++)
		if (ad_type_name(t) && !strcmp(ad_type_name(t), name))
			return t;
	return UINT32_MAX;
}

static void
test_fixtures(void)
{
	enum { ROWS = 4, COLS = 512, N = ROWS * COLS };
	char path[512], err[AD_ERRLEN];
	for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
		uint32_t t = type_id(types[k]);
		REQUIRE(t != UINT32_MAX, "%s", types[k]);
		size_t nbin, nf32, row;
		snprintf(path, sizeof path, "%s/dequant/%s.bin", T_DATA, types[k]);
		uint8_t *bin = t_read_file(path, &nbin);
		snprintf(path, sizeof path, "%s/dequant/%s.f32", T_DATA, types[k]);
		float *want = t_read_file(path, &nf32);
		REQUIRE(bin && want, "%s: fixture missing", types[k]);
		REQUIRE(ad_type_row_bytes(t, COLS, &row) == 0);
		CHECK(nbin == ROWS * row && nf32 == N * 4, "%s: fixture sizes", types[k]);

		// whole buffer at once, and row by row
		static float got[N];
		memset(got, 0xff, sizeof got);
		CHECK(ad_dequant(t, bin, got, N, err) == 0, "%s: %s", types[k], err);
		int bad = 0;
		for (int i = 0; i < N; i++)
			if (!(got[i] == want[i]) || !!signbit(got[i]) != !!signbit(want[i]))
				bad++;
		CHECK(bad == 0, "%s: %d of %d values differ from ggml", types[k], bad, N);
		memset(got, 0xff, sizeof got);
		for (int r = 0; r < ROWS; r++)
			CHECK(ad_dequant(t, bin + r * row, got + r * COLS, COLS, err) == 0);
		CHECK(memcmp(got, want, sizeof got) == 0 || bad, "%s: row by row differs", types[k]);

		// a corrupted first block must change the output of that block
		size_t bb = ad_type_block_bytes(t);
		int64_t bs = ad_type_block_size(t);
		uint8_t *bad_bin = malloc(nbin);
		memcpy(bad_bin, bin, nbin);
		for (size_t i = 0; i < bb; i++)
			bad_bin[i] ^= 0x5a;
		static float got2[N];
		CHECK(ad_dequant(t, bad_bin, got2, N, err) == 0);
		int changed = 0;
		int64_t span = bs < 32 ? 32 : bs;
		for (int64_t i = 0; i < span; i++)
			changed += ad_f32_bits(got2[i]) != ad_f32_bits(want[i]);
		CHECK(changed > 0, "%s: corrupting a block changed nothing", types[k]);
		CHECK(memcmp(got2 + span, want + span, (N - span) * 4) == 0,
		      "%s: corrupting block 0 changed later blocks", types[k]);

		// odd start address: blocks carry no alignment guarantee
		uint8_t *shifted = malloc(nbin + 1);
		memcpy(shifted + 1, bin, nbin);
		CHECK(ad_dequant(t, shifted + 1, got2, N, err) == 0);
		CHECK(memcmp(got2, want, sizeof got2) == 0 || bad, "%s: unaligned source differs", types[k]);
		free(shifted);
		free(bad_bin);
		free(bin);
		free(want);
	}
}

static void
test_f32_passthrough(void)
{
	size_t n;
	float *src = t_read_file(T_DATA "/dequant/source.f32", &n);
	REQUIRE(src && n == 8192);
	static float got[2048];
	char err[AD_ERRLEN];
	CHECK(ad_dequant(AD_TYPE_F32, src, got, 2048, err) == 0);
	CHECK(memcmp(got, src, n) == 0);
	free(src);
}

static void
test_errors(void)
{
	char err[AD_ERRLEN] = "";
	uint8_t buf[1024] = {0};
	float out[256];
	CHECK(ad_dequant(AD_TYPE_Q8_1, buf, out, 33, err) == -1); // not whole blocks
	CHECK(strstr(err, "Q8_1") != NULL && strstr(err, "32") != NULL, "%s", err);
	CHECK(ad_dequant(16, buf, out, 256, err) == -1); // IQ2_XXS: named, not decoded
	CHECK(strstr(err, "IQ2_XXS") != NULL && strstr(err, "not supported"), "%s", err);
	CHECK(ad_dequant(40, buf, out, 64, err) == -1); // NVFP4
	CHECK(strstr(err, "NVFP4") != NULL, "%s", err);
	CHECK(ad_dequant(AD_TYPE_IQ4_XS, buf, out, 32, err) == -1); // a super-block is 256
	CHECK(strstr(err, "IQ4_XS") != NULL && strstr(err, "256") != NULL, "%s", err);
	CHECK(ad_dequant(AD_TYPE_I32, buf, out, 4, err) == -1);
	CHECK(strstr(err, "I32") != NULL, "%s", err);
	CHECK(ad_dequant(999, buf, out, 32, err) == -1);
	CHECK(strstr(err, "999") != NULL, "%s", err);
	CHECK(ad_dequant(AD_TYPE_Q4_K, buf, out, 100, err) == -1);
	CHECK(strstr(err, "Q4_K") != NULL && strstr(err, "256") != NULL, "%s", err);
	CHECK(ad_dequant(AD_TYPE_Q4_0, buf, out, -32, err) == -1);
	CHECK(ad_dequant(AD_TYPE_Q4_0, buf, out, 0, NULL) == 0);
}

int
main(void)
{
	T_RUN(test_fp16_to_f32_all);
	T_RUN(test_fp16_roundtrip_all);
	T_RUN(test_f32_to_fp16_rounding);
	T_RUN(test_bf16);
	T_RUN(test_rows_fast_vs_ref);
	T_RUN(test_fixtures);
	T_RUN(test_f32_passthrough);
	T_RUN(test_errors);
	return t_done();
}
