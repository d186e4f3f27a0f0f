// test-mil: the generated MIL text, byte for byte against the seed
// dialect's documented examples, and the builder's error paths.
#include <stdint.h>
#include <string.h>

#include "err.h"
#include "mil.h"
#include "t.h"

#pragma GCC diagnostic ignored "-Wformat-zero-length" // CHECK without a message

static void
check_golden(const char *file, char *text)
{
	char path[512];
	size_t n;
	snprintf(path, sizeof path, "%s/ane/%s", T_DATA, file);
	char *want = t_read_file(path, &n);
	REQUIRE(want, "cannot read %s", path);
	REQUIRE(text);
	CHECK(strlen(text) == n, "%s: %zu bytes, golden %zu", file, strlen(text), n);
	CHECK(!strcmp(text, want), "%s differs:\n%s", file, text);
	free(want);
	free(text);
}

static void
test_golden_proj(void)
{
	char err[AD_ERRLEN];
	check_golden("proj_8x4_w1.mil", ane_mil_proj(8, 4, 1, err));
}

static void
test_golden_qkv(void)
{
	char err[AD_ERRLEN];
	// fused QKV: one conv hidden 4 -> q_dim + 2 kv_dim = 12
	check_golden("qkv_4x12_w32.mil", ane_mil_proj(4, 12, 32, err));
}

static void
test_golden_ffn(void)
{
	char err[AD_ERRLEN];
	check_golden("ffn_h4_i6_w32.mil", ane_mil_ffn(4, 6, 32, err));
}

// int8 weights: constexpr_affine_dequantize in the attribute form, two
// BLOBFILEs per weight, per-channel scales; and the weight-format names
static void
test_golden_int8(void)
{
	char err[AD_ERRLEN];
	check_golden("proj_8x4_w1_int8.mil", ane_mil_proj_w(8, 4, 1, ANE_W_INT8, err));
	check_golden("ffn_h4_i6_w32_int8.mil", ane_mil_ffn_w(4, 6, 32, ANE_W_INT8, err));
	// fp16 through the _w forms is the seed text
	check_golden("proj_8x4_w1.mil", ane_mil_proj_w(8, 4, 1, ANE_W_FP16, err));
	check_golden("ffn_h4_i6_w32.mil", ane_mil_ffn_w(4, 6, 32, ANE_W_FP16, err));
	enum ane_wfmt f = ANE_W_FP16;
	CHECK(ane_wfmt_parse("int8", &f) == 0 && f == ANE_W_INT8);
	CHECK(ane_wfmt_parse("fp16", &f) == 0 && f == ANE_W_FP16);
	CHECK(ane_wfmt_parse("int4", &f) < 0 && ane_wfmt_parse(NULL, &f) < 0 && ane_wfmt_parse("", &f) < 0);
	CHECK(!strcmp(ane_wfmt_name(ANE_W_INT8), "int8") && !strcmp(ane_wfmt_name(ANE_W_FP16), "fp16"));
	CHECK(ane_wfmt_bytes(ANE_W_INT8, 4, 8) == 40 && ane_wfmt_bytes(ANE_W_FP16, 4, 8) == 64);
	// 8 int8 convs = 16 BLOBFILEs: the limit; 9 are refused
	for (int n = 8; n <= 9; n++) {
		struct ane_mil m;
		static const char *const out[] = {"o0"};
		ane_mil_init(&m);
		ane_mil_input(&m, "i0", 4, 1);
		char y[8];
		for (int k = 0; k < n; k++) {
			snprintf(y, sizeof y, k == n - 1 ? "o0" : "t%d", k);
			ane_mil_conv_i8(&m, y, k ? "t0" : "i0", 4, 4, 1, 64, 64);
		}
		char *t = ane_mil_finish(&m, out, 1, err);
		if (n == 8)
			CHECK(t, "%s", err);
		else
			CHECK(!t && strstr(err, "18 BLOBFILE consts, the ANE accepts at most 16"), "%s", err);
		free(t);
	}
}

// 4-bit palettised weights: constexpr_lut_to_dense (iOS18: uint4 indices,
// a table of 16 for each 64 rows or one for all) then
// constexpr_blockwise_shift_scale, three BLOBFILEs per weight
static void
test_golden_lut4(void)
{
	char err[AD_ERRLEN];
	check_golden("proj_8x4_w1_lut4.mil", ane_mil_proj_w(8, 4, 1, ANE_W_LUT4, err));
	check_golden("ffn_h4_i6_w32_lut4.mil", ane_mil_ffn_w(4, 6, 32, ANE_W_LUT4, err));
	enum ane_wfmt f = ANE_W_FP16;
	CHECK(ane_wfmt_parse("lut4", &f) == 0 && f == ANE_W_LUT4 && !strcmp(ane_wfmt_name(ANE_W_LUT4), "lut4"));
	CHECK(ane_wfmt_parse("LUT4", &f) < 0 && ane_wfmt_parse("lut", &f) < 0);
	// indices, one table (4 rows: not a multiple of 64), scales; then 128
	// rows: two tables
	CHECK(ane_wfmt_bytes(ANE_W_LUT4, 4, 8) == 16 + 32 + 8, "%llu",
	      (unsigned long long)ane_wfmt_bytes(ANE_W_LUT4, 4, 8));
	CHECK(ane_wfmt_bytes(ANE_W_LUT4, 128, 7) == 448 + 64 + 256);
	CHECK(ane_mil_l4_tables(4) == 1 && ane_mil_l4_tables(128) == 2 && ane_mil_l4_tables(4864) == 76 &&
	      ane_mil_l4_tables(172) == 1);
	char *s = ane_mil_proj_w(7, 128, 1, ANE_W_LUT4, err);
	REQUIRE(s, "%s", err);
	CHECK(strstr(s,
	             "indices = tensor<uint4, [128, 7, 1, 1]>(BLOBFILE(path = string(\"@model_path/weights/w.bin\"), "
	             "offset = uint64(64)))"));
	// 448 bytes of indices, then the tables' chunk, then the scales'
	CHECK(strstr(s,
	             "lut = tensor<fp16, [2, 1, 1, 1, 16, 1]>(BLOBFILE(path = string(\"@model_path/weights/w.bin\"), "
	             "offset = uint64(576)))"));
	CHECK(strstr(s, "scale = tensor<fp16, [128, 1, 1, 1]>(BLOBFILE(path = string(\"@model_path/weights/w.bin\"), "
	                "offset = uint64(704)))"));
	free(s);
	// 5 convs = 15 BLOBFILEs: within the limit; 6 are refused
	for (int n = 5; n <= 6; n++) {
		struct ane_mil m;
		static const char *const out[] = {"o0"};
		ane_mil_init(&m);
		ane_mil_input(&m, "i0", 4, 1);
		char y[8];
		for (int k = 0; k < n; k++) {
			snprintf(y, sizeof y, k == n - 1 ? "o0" : "t%d", k);
			ane_mil_conv_l4(&m, y, k ? "t0" : "i0", 4, 4, 1, 64, 64, 64);
		}
		char *t = ane_mil_finish(&m, out, 1, err);
		if (n == 5)
			CHECK(t, "%s", err);
		else
			CHECK(!t && strstr(err, "18 BLOBFILE consts, the ANE accepts at most 16"), "%s", err);
		free(t);
	}
}

// the seed's own substring checks, and balanced braces
static void
test_seed_substrings(void)
{
	char err[AD_ERRLEN];
	char *s = ane_mil_proj(8, 4, 1, err);
	REQUIRE(s);
	CHECK(strstr(s, "program(1.3)"));
	CHECK(strstr(s, "tensor<fp16, [1, 8, 1, 1]> i0"));
	CHECK(strstr(s, "tensor<fp16, [4, 8, 1, 1]> w0"));
	CHECK(strstr(s, "offset = uint64(64)"));
	CHECK(strstr(s, "} -> (o0);"));
	int depth = 0, minus = 0;
	for (char *p = s; *p; p++) {
		depth += *p == '{';
		depth -= *p == '}';
		minus |= depth < 0;
	}
	CHECK(depth == 0 && !minus);
	CHECK(s[strlen(s) - 1] == '\n' && s[strlen(s) - 2] == '}');
	free(s);

	struct ane_mil m;
	const char *out[] = {"o0"};
	ane_mil_init(&m);
	ane_mil_input(&m, "i0", 4, 1);
	ane_mil_input(&m, "i1", 4, 1);
	ane_mil_add(&m, "o0", "i0", "i1", 4, 1);
	s = ane_mil_finish(&m, out, 1, err);
	REQUIRE(s, "%s", err);
	CHECK(strstr(s, "tensor<fp16, [1, 4, 1, 1]> i0, tensor<fp16, [1, 4, 1, 1]> i1"));
	CHECK(strstr(s, "add(x = i0, y = i1)[name = string(\"o0\")]"));
	free(s);
}

// the fused FFN's offsets at the seed's probe size: G = inter * hidden * 2
static void
test_ffn_offsets(void)
{
	char err[AD_ERRLEN];
	char *s = ane_mil_ffn(576, 1536, 64, err);
	REQUIRE(s, "%s", err);
	CHECK(strstr(s, "offset = uint64(64)"));
	CHECK(strstr(s, "offset = uint64(1769600)"));
	CHECK(strstr(s, "offset = uint64(3539136)"));
	CHECK(strstr(s, "tensor<fp16, [576, 1536, 1, 1]> w2"));
	CHECK(strstr(s, "t3 = mul(x = t0, y = t2)"));
	CHECK(strstr(s, "t4 = mul(x = t3, y = t1)"));
	CHECK(strstr(
		s,
		"o0 = conv(dilations = c_dilations, groups = c_groups, pad = c_pad, pad_type = c_pad_type, strides = c_strides, weight = w2, x = t4)"));
	free(s);
}

static void
test_head_chunks(void)
{
	CHECK(ane_head_chunk_rows(2304, 256000) == 116508);
	CHECK(ane_head_nchunks(2304, 256000) == 3);
	CHECK(ane_head_chunk_rows(896, 151936) == 151936);
	CHECK(ane_head_nchunks(896, 151936) == 1);
	CHECK(ane_head_chunk_rows(576, 49152) == 49152);
	CHECK(ane_head_chunk_rows(1536, 262144) == 174762);
	CHECK(ane_head_nchunks(1536, 262144) == 2);
	// no chunk's blob exceeds the target
	CHECK((uint64_t)ane_head_chunk_rows(2304, 256000) * 2304 * 2 <= ANE_HEAD_TARGET_BYTES);
	CHECK(ane_head_chunk_rows(0, 10) == 0);
	// a huge hidden still gives one row per kernel
	CHECK(ane_head_chunk_rows(1 << 29, 10) == 1);
}

static void
test_errors(void)
{
	char err[AD_ERRLEN];
	err[0] = 0;
	CHECK(!ane_mil_proj(0, 4, 1, err));
	CHECK(strstr(err, "channels 0 out of range"), "%s", err);
	CHECK(!ane_mil_ffn(4, 6, -1, err));
	CHECK(strstr(err, "width"), "%s", err);

	struct ane_mil m;
	const char *out[] = {"o0"};
	ane_mil_init(&m);
	ane_mil_input(&m, "i0", 4, 1);
	ane_mil_add(&m, "o 0", "i0", "i0", 4, 1);
	CHECK(!ane_mil_finish(&m, out, 1, err));
	CHECK(strstr(err, "bad MIL name"), "%s", err);

	// 17 weight consts exceed the ANE's budget
	ane_mil_init(&m);
	ane_mil_input(&m, "i0", 4, 1);
	char prev[16] = "i0", cur[16];
	for (int i = 0; i < 17; i++) {
		snprintf(cur, sizeof cur, "t%d", i);
		ane_mil_conv(&m, cur, prev, 4, 4, 1, 64 + (uint64_t)i * 96);
		memcpy(prev, cur, sizeof cur);
	}
	const char *o16[] = {"t16"};
	CHECK(!ane_mil_finish(&m, o16, 1, err));
	CHECK(strstr(err, "17 BLOBFILE consts"), "%s", err);

	// no inputs, no ops
	ane_mil_init(&m);
	ane_mil_add(&m, "o0", "a", "b", 4, 1);
	CHECK(!ane_mil_finish(&m, out, 1, err));
	CHECK(strstr(err, "no inputs"), "%s", err);
	ane_mil_init(&m);
	ane_mil_input(&m, "i0", 4, 1);
	CHECK(!ane_mil_finish(&m, out, 1, err));
	CHECK(strstr(err, "no ops"), "%s", err);
	// inputs after ops
	ane_mil_init(&m);
	ane_mil_input(&m, "i0", 4, 1);
	ane_mil_sigmoid(&m, "o0", "i0", 4, 1);
	ane_mil_input(&m, "i1", 4, 1);
	CHECK(!ane_mil_finish(&m, out, 1, err));
	CHECK(strstr(err, "after the first op"), "%s", err);
}

int
main(void)
{
	T_RUN(test_golden_proj);
	T_RUN(test_golden_qkv);
	T_RUN(test_golden_ffn);
	T_RUN(test_golden_int8);
	T_RUN(test_golden_lut4);
	T_RUN(test_seed_substrings);
	T_RUN(test_ffn_offsets);
	T_RUN(test_head_chunks);
	T_RUN(test_errors);
	return t_done();
}
