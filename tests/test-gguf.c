// test-gguf.c - the GGUF reader on real files, writer round trips, and
// malformed input: every truncation and a set of targeted hostile patches.
//
// `test-gguf --write-corpus DIR` writes the fuzzer's seed files instead.
#include "gguf.h"
#include "wtype.h"
#include "t.h"

// CHECK without a message expands to fprintf(stderr, "")
#pragma GCC diagnostic ignored "-Wformat-zero-length"

#include <dirent.h>
#include <stdint.h>

static char err[AD_ERRLEN];

static int
has(const char *s, const char *sub)
{
	return strstr(s, sub) != NULL;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t
rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 11);
}

// --- real files ---------------------------------------------------------------

static void
test_stories260k(void)
{
	struct gguf *g = gguf_open(T_DATA "/stories260K/stories260K.gguf", err);
	REQUIRE(g, "%s", err);
	CHECK(gguf_version(g) == 3);
	CHECK(gguf_alignment(g) == 32);
	CHECK(gguf_n_kv(g) == 19, "%lld", (long long)gguf_n_kv(g));

	struct gguf_str s;
	CHECK(gguf_get_str(g, "general.architecture", &s) == 0 && gguf_str_eq(s, "llama"));
	uint32_t u;
	CHECK(gguf_get_u32(g, "llama.embedding_length", &u) == 0 && u == 64);
	CHECK(gguf_get_u32(g, "llama.block_count", &u) == 0 && u == 5);
	CHECK(gguf_get_u32(g, "llama.feed_forward_length", &u) == 0 && u == 172);
	CHECK(gguf_get_u32(g, "tokenizer.ggml.seperator_token_id", &u) == 0 && u == UINT32_MAX);
	int64_t i64;
	CHECK(gguf_get_i64(g, "llama.attention.head_count_kv", &i64) == 0 && i64 == 4);
	float f;
	CHECK(gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f) == 0 && f == 1e-5f);
	CHECK(gguf_get_u32(g, "llama.no_such_key", &u) == -1);
	CHECK(gguf_find_key(g, "general.name") >= 0);
	CHECK(gguf_find_key(g, "general.nam") == -1);

	struct gguf_arr a;
	REQUIRE(gguf_get_arr(g, "tokenizer.ggml.tokens", &a) == 0);
	CHECK(a.type == GGUF_TYPE_STRING && a.n == 512);
	CHECK(gguf_arr_str(&a, 0, &s) == 0 && gguf_str_eq(s, "<unk>"));
	CHECK(gguf_arr_str(&a, 300, &s) == 0 && gguf_str_eq(s, "\xe2\x96\x81ha"));
	CHECK(gguf_arr_str(&a, 512, &s) == -1);
	CHECK(gguf_arr_i64(&a, 0, &i64) == -1);
	REQUIRE(gguf_get_arr(g, "tokenizer.ggml.scores", &a) == 0);
	CHECK(a.type == GGUF_TYPE_FLOAT32 && a.n == 512);
	CHECK(gguf_arr_f32(&a, 300, &f) == 0 && f == -41.0f);
	REQUIRE(gguf_get_arr(g, "tokenizer.ggml.token_type", &a) == 0);
	CHECK(gguf_arr_i64(&a, 300, &i64) == 0 && i64 == 1);

	CHECK(gguf_n_tensors(g) == 48);
	const struct gguf_tensor *t = gguf_find_tensor(g, "token_embd.weight");
	REQUIRE(t);
	CHECK(t->n_dims == 2 && t->ne[0] == 64 && t->ne[1] == 512 && t->ne[2] == 1 && t->ne[3] == 1);
	CHECK(t->type == AD_TYPE_F32 && t->nbytes == 64 * 512 * 4 && t->offset == 0);
	t = gguf_find_tensor(g, "blk.4.ffn_down.weight");
	REQUIRE(t);
	CHECK(t->ne[0] == 172 && t->ne[1] == 64 && t->nbytes == 172 * 64 * 4);
	t = gguf_find_tensor(g, "output_norm.weight");
	REQUIRE(t);
	CHECK(t->n_dims == 1 && t->ne[0] == 64 && t->ne[1] == 1);
	CHECK(gguf_find_tensor(g, "blk.5.ffn_down.weight") == NULL);
	CHECK(gguf_tensor_at(g, 48) == NULL && gguf_tensor_at(g, -1) == NULL);

	// the buffer path hands out pointers into the caller's bytes, with the
	// same contents as the mapping
	size_t n;
	uint8_t *raw = t_read_file(T_DATA "/stories260K/stories260K.gguf", &n);
	REQUIRE(raw && n == gguf_file_size(g));
	struct gguf *m = gguf_open_memory(raw, n, err);
	REQUIRE(m, "%s", err);
	for (int64_t k = 0; k < gguf_n_tensors(g); k++) {
		const struct gguf_tensor *x = gguf_tensor_at(g, k), *y = gguf_tensor_at(m, k);
		CHECK((const uint8_t *)y->data >= raw && (const uint8_t *)y->data + y->nbytes <= raw + n);
		CHECK((size_t)((const uint8_t *)y->data - raw) % 32 == 0);
		CHECK(x->nbytes == y->nbytes && memcmp(x->data, y->data, x->nbytes) == 0, "%s", x->name);
	}
	// the last tensor ends at the end of the file (after padding)
	t = gguf_tensor_at(m, 47);
	CHECK((const uint8_t *)t->data + t->nbytes + 31 >= raw + n);
	gguf_close(m);
	free(raw);
	gguf_close(g);
}

static void
test_v1_refused(void)
{
	err[0] = 0;
	struct gguf *g = gguf_open(T_DATA "/stories260K/tinyllamas-stories-260k-f32.gguf", err);
	CHECK(!g);
	CHECK(has(err, "v1") && has(err, "32-bit counts") && has(err, "unsupported"), "%s", err);
	CHECK(has(err, "tinyllamas-stories-260k-f32.gguf"), "%s", err);
	gguf_close(g);
}

static void
test_q8_0_ragged_refused(void)
{
	err[0] = 0;
	struct gguf *g = gguf_open(T_DATA "/stories260K/tinyllamas-stories-260k-q8_0.gguf", err);
	CHECK(!g);
	CHECK(has(err, "ffn_down.weight") && has(err, "172") && has(err, "not a multiple") && has(err, "Q8_0"), "%s",
	      err);
	CHECK(has(err, "offset"), "%s", err);
	gguf_close(g);
}

static void
test_all_models_open(void)
{
	DIR *d = opendir(T_DATA "/models");
	REQUIRE(d);
	int count = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		size_t len = strlen(e->d_name);
		if (len < 5 || strcmp(e->d_name + len - 5, ".gguf") != 0)
			continue;
		char path[1024];
		snprintf(path, sizeof path, "%s/models/%s", T_DATA, e->d_name);
		struct gguf *g = gguf_open(path, err);
		CHECK(g, "%s", err);
		if (!g)
			continue;
		count++;
		struct gguf_str s;
		CHECK(gguf_get_str(g, "general.architecture", &s) == 0, "%s", path);
		CHECK(gguf_n_tensors(g) > 0, "%s", path);
		for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
			const struct gguf_tensor *t = gguf_tensor_at(g, i);
			CHECK(t->offset % gguf_alignment(g) == 0);
			CHECK(gguf_find_tensor(g, t->name) == t);
		}
		// the same bytes through the buffer path
		size_t n;
		void *buf = t_read_file(path, &n);
		struct gguf *m = gguf_open_memory(buf, n, err);
		CHECK(m && gguf_n_tensors(m) == gguf_n_tensors(g) && gguf_n_kv(m) == gguf_n_kv(g), "%s", err);
		gguf_close(m);
		free(buf);
		gguf_close(g);
	}
	closedir(d);
	CHECK(count >= 10, "only %d models", count);
}

static void
test_open_errors(void)
{
	err[0] = 0;
	CHECK(!gguf_open(T_DATA "/no/such.gguf", err));
	CHECK(has(err, "no/such.gguf"), "%s", err);
	err[0] = 0;
	CHECK(!gguf_open(T_DATA "/models", err));
	CHECK(has(err, "not a regular file"), "%s", err);
	err[0] = 0;
	CHECK(!gguf_open(T_DATA "/stories260K/tok512.bin", err));
	CHECK(has(err, "not a GGUF"), "%s", err);
	char path[512];
	snprintf(path, sizeof path, "%s/empty.gguf", t_tmpdir());
	FILE *f = fopen(path, "wb");
	REQUIRE(f);
	fclose(f);
	err[0] = 0;
	CHECK(!gguf_open(path, err));
	CHECK(has(err, "not a GGUF"), "%s", err);
	CHECK(!gguf_open_memory(NULL, 0, err));
	CHECK(!gguf_open_memory("GGU", 3, err));
	gguf_close(NULL);
}

// --- writer round trips -------------------------------------------------------

static void
test_roundtrip_values(void)
{
	struct gguf_writer *w = gguf_writer_new();
	REQUIRE(w);
	uint8_t u8 = 200;
	int8_t i8 = -100;
	uint16_t u16 = 60000;
	int16_t i16 = -30000;
	int64_t i64 = -5000000000ll;
	double f64 = 0.1;
	uint8_t bl = 1;
	gguf_writer_val(w, "v.u8", GGUF_TYPE_UINT8, &u8);
	gguf_writer_val(w, "v.i8", GGUF_TYPE_INT8, &i8);
	gguf_writer_val(w, "v.u16", GGUF_TYPE_UINT16, &u16);
	gguf_writer_val(w, "v.i16", GGUF_TYPE_INT16, &i16);
	gguf_writer_u32(w, "v.u32", 4000000000u);
	gguf_writer_i32(w, "v.i32", -2000000000);
	gguf_writer_f32(w, "v.f32", 1.5f);
	gguf_writer_val(w, "v.bool", GGUF_TYPE_BOOL, &bl);
	gguf_writer_bool(w, "v.false", 0);
	gguf_writer_str(w, "v.str", "hello");
	gguf_writer_str(w, "v.empty", "");
	gguf_writer_u64(w, "v.u64", UINT64_MAX);
	gguf_writer_val(w, "v.i64", GGUF_TYPE_INT64, &i64);
	gguf_writer_val(w, "v.f64", GGUF_TYPE_FLOAT64, &f64);
	gguf_writer_u32(w, "v.replaced", 1);
	gguf_writer_u32(w, "v.replaced", 2);

	// arrays of every scalar type: element i is i*3-5 in the type
	for (int t = 0; t < GGUF_TYPE_COUNT; t++) {
		if (t == GGUF_TYPE_STRING || t == GGUF_TYPE_ARRAY)
			continue;
		uint8_t data[7 * 8];
		for (int i = 0; i < 7; i++) {
			int64_t v = i * 3 - 5;
			uint8_t *p =
				data + i * (t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_INT8 || t == GGUF_TYPE_BOOL ? 1
			                    : t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_INT16                    ? 2
			                    : t == GGUF_TYPE_UINT32 || t == GGUF_TYPE_INT32 || t == GGUF_TYPE_FLOAT32
			                            ? 4
			                            : 8);
			switch (t) {
			case GGUF_TYPE_UINT8:
			case GGUF_TYPE_INT8: {
				int8_t x = (int8_t)v;
				memcpy(p, &x, 1);
				break;
			}
			case GGUF_TYPE_BOOL: {
				uint8_t x = (uint8_t)(i & 1);
				memcpy(p, &x, 1);
				break;
			}
			case GGUF_TYPE_UINT16:
			case GGUF_TYPE_INT16: {
				int16_t x = (int16_t)v;
				memcpy(p, &x, 2);
				break;
			}
			case GGUF_TYPE_UINT32:
			case GGUF_TYPE_INT32: {
				int32_t x = (int32_t)v;
				memcpy(p, &x, 4);
				break;
			}
			case GGUF_TYPE_FLOAT32: {
				float x = (float)v;
				memcpy(p, &x, 4);
				break;
			}
			case GGUF_TYPE_FLOAT64: {
				double x = (double)v;
				memcpy(p, &x, 8);
				break;
			}
			default:
				memcpy(p, &v, 8);
				break;
			}
		}
		char key[32];
		snprintf(key, sizeof key, "a.%d", t);
		gguf_writer_arr(w, key, (enum gguf_vtype)t, data, 7);
	}
	const char *words[] = {"a", "", "\xe2\x96\x81the", "longer string here"};
	gguf_writer_arr_str(w, "a.str", words, 4);
	// past several of the reader's index strides (gguf.c: every 16th)
	char many_buf[53][16];
	const char *many[53];
	for (int j = 0; j < 53; j++) {
		snprintf(many_buf[j], sizeof many_buf[j], "%.*s%d", j % 7, "xxxxxxx", j);
		many[j] = j % 11 == 3 ? "" : many_buf[j];
	}
	gguf_writer_arr_str(w, "a.many_str", many, 53);
	gguf_writer_arr(w, "a.empty", GGUF_TYPE_INT32, NULL, 0);

	// [[ "x", "yz" ], [], [ "w" ]]
	struct gguf_warr *nested = gguf_warr_new(GGUF_TYPE_ARRAY);
	struct gguf_warr *s1 = gguf_warr_new(GGUF_TYPE_STRING);
	gguf_warr_push_str(s1, "x");
	gguf_warr_push_str(s1, "yz");
	gguf_warr_push_arr(nested, s1);
	gguf_warr_push_arr(nested, gguf_warr_new(GGUF_TYPE_STRING));
	struct gguf_warr *s3 = gguf_warr_new(GGUF_TYPE_STRING);
	gguf_warr_push_str(s3, "w");
	gguf_warr_push_arr(nested, s3);
	gguf_writer_warr(w, "a.nested_str", nested);
	// [[[ 1, 2 ], [ 3 ]], [[ -4 ]]] of int32
	struct gguf_warr *deep = gguf_warr_new(GGUF_TYPE_ARRAY);
	int32_t vals[] = {1, 2, 3, -4};
	struct gguf_warr *m1 = gguf_warr_new(GGUF_TYPE_ARRAY), *m2 = gguf_warr_new(GGUF_TYPE_ARRAY);
	struct gguf_warr *l1 = gguf_warr_new(GGUF_TYPE_INT32), *l2 = gguf_warr_new(GGUF_TYPE_INT32),
			 *l3 = gguf_warr_new(GGUF_TYPE_INT32);
	gguf_warr_push(l1, &vals[0]);
	gguf_warr_push(l1, &vals[1]);
	gguf_warr_push(l2, &vals[2]);
	gguf_warr_push(l3, &vals[3]);
	gguf_warr_push_arr(m1, l1);
	gguf_warr_push_arr(m1, l2);
	gguf_warr_push_arr(m2, l3);
	gguf_warr_push_arr(deep, m1);
	gguf_warr_push_arr(deep, m2);
	gguf_writer_warr(w, "a.deep", deep);

	size_t n;
	void *buf = gguf_writer_bytes(w, &n);
	REQUIRE(buf);
	gguf_writer_free(w);
	struct gguf *g = gguf_open_memory(buf, n, err);
	REQUIRE(g, "%s", err);
	CHECK(gguf_version(g) == 3 && gguf_n_tensors(g) == 0);

	uint32_t u;
	int64_t i;
	float f;
	int b;
	struct gguf_str s;
	CHECK(gguf_get_u32(g, "v.u8", &u) == 0 && u == 200);
	CHECK(gguf_get_i64(g, "v.i8", &i) == 0 && i == -100);
	CHECK(gguf_get_u32(g, "v.i8", &u) == -1);
	CHECK(gguf_get_u32(g, "v.u16", &u) == 0 && u == 60000);
	CHECK(gguf_get_i64(g, "v.i16", &i) == 0 && i == -30000);
	CHECK(gguf_get_u32(g, "v.u32", &u) == 0 && u == 4000000000u);
	CHECK(gguf_get_i64(g, "v.i32", &i) == 0 && i == -2000000000);
	CHECK(gguf_get_f32(g, "v.f32", &f) == 0 && f == 1.5f);
	CHECK(gguf_get_i64(g, "v.f32", &i) == -1);
	CHECK(gguf_get_bool(g, "v.bool", &b) == 0 && b == 1);
	CHECK(gguf_get_bool(g, "v.false", &b) == 0 && b == 0);
	CHECK(gguf_get_u32(g, "v.bool", &u) == -1, "bool is not an integer");
	CHECK(gguf_get_bool(g, "v.u8", &b) == -1);
	CHECK(gguf_get_str(g, "v.str", &s) == 0 && gguf_str_eq(s, "hello") && !gguf_str_eq(s, "hell"));
	CHECK(gguf_get_str(g, "v.empty", &s) == 0 && s.len == 0 && gguf_str_eq(s, ""));
	u = 77;
	CHECK(gguf_get_u32(g, "v.u64", &u) == -1 && u == 77, "nothing written on failure");
	CHECK(gguf_get_i64(g, "v.u64", &i) == -1);
	CHECK(gguf_get_i64(g, "v.i64", &i) == 0 && i == -5000000000ll);
	CHECK(gguf_get_f32(g, "v.f64", &f) == 0 && f == 0.1f);
	CHECK(gguf_get_u32(g, "v.replaced", &u) == 0 && u == 2);
	CHECK(gguf_get_str(g, "v.u32", &s) == -1);

	int64_t k = gguf_find_key(g, "v.i16");
	REQUIRE(k >= 0);
	CHECK(!strcmp(gguf_kv_key(g, k), "v.i16") && gguf_kv_type(g, k) == GGUF_TYPE_INT16);
	CHECK(gguf_kv_key(g, gguf_n_kv(g)) == NULL && gguf_kv_type(g, -1) == GGUF_TYPE_COUNT);
	CHECK(gguf_kv_i64(g, k, &i) == 0 && i == -30000);
	CHECK(gguf_kv_u32(g, -1, &u) == -1);

	struct gguf_arr a, sub, leaf;
	for (int t = 0; t < GGUF_TYPE_COUNT; t++) {
		if (t == GGUF_TYPE_STRING || t == GGUF_TYPE_ARRAY)
			continue;
		char key[32];
		snprintf(key, sizeof key, "a.%d", t);
		REQUIRE(gguf_get_arr(g, key, &a) == 0, "%s", key);
		CHECK(a.type == (enum gguf_vtype)t && a.n == 7, "%s", key);
		for (uint64_t j = 0; j < 7; j++) {
			int64_t want = (int64_t)j * 3 - 5;
			if (t == GGUF_TYPE_BOOL) {
				CHECK(a.data[j] == (j & 1));
				CHECK(gguf_arr_i64(&a, j, &i) == -1);
			} else if (t == GGUF_TYPE_FLOAT32 || t == GGUF_TYPE_FLOAT64) {
				CHECK(gguf_arr_f32(&a, j, &f) == 0 && f == (float)want, "%s[%d]", key, (int)j);
			} else if (t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_UINT32) {
				int bits = t == GGUF_TYPE_UINT8 ? 8 : t == GGUF_TYPE_UINT16 ? 16 : 32;
				int64_t wu = want & (((int64_t)1 << bits) - 1);
				CHECK(gguf_arr_i64(&a, j, &i) == 0 && i == wu, "%s[%d]=%lld", key, (int)j,
				      (long long)i);
			} else if (t == GGUF_TYPE_UINT64) {
				int r = gguf_arr_i64(&a, j, &i);
				CHECK(want < 0 ? r == -1 : (r == 0 && i == want), "%s[%d]", key, (int)j);
			} else {
				CHECK(gguf_arr_i64(&a, j, &i) == 0 && i == want, "%s[%d]", key, (int)j);
			}
		}
		CHECK(gguf_arr_i64(&a, 7, &i) == -1 && gguf_arr_f32(&a, 7, &f) == -1);
		CHECK(gguf_arr_str(&a, 0, &s) == -1 && gguf_arr_sub(&a, 0, &sub) == -1);
	}
	REQUIRE(gguf_get_arr(g, "a.str", &a) == 0);
	CHECK(a.type == GGUF_TYPE_STRING && a.n == 4);
	for (uint64_t j = 0; j < 4; j++)
		CHECK(gguf_arr_str(&a, j, &s) == 0 && gguf_str_eq(s, words[j]));
	// every element of a longer one, out of order, and one past its end
	REQUIRE(gguf_get_arr(g, "a.many_str", &a) == 0);
	CHECK(a.type == GGUF_TYPE_STRING && a.n == 53);
	for (uint64_t m = 0; m < 53; m++) {
		uint64_t j = (m * 31 + 5) % 53;
		CHECK(gguf_arr_str(&a, j, &s) == 0 && gguf_str_eq(s, many[j]), "a.many_str[%d]", (int)j);
	}
	CHECK(gguf_arr_str(&a, 53, &s) == -1);
	REQUIRE(gguf_get_arr(g, "a.empty", &a) == 0);
	CHECK(a.type == GGUF_TYPE_INT32 && a.n == 0 && gguf_arr_i64(&a, 0, &i) == -1);

	REQUIRE(gguf_get_arr(g, "a.nested_str", &a) == 0);
	CHECK(a.type == GGUF_TYPE_ARRAY && a.n == 3);
	CHECK(gguf_arr_sub(&a, 0, &sub) == 0 && sub.type == GGUF_TYPE_STRING && sub.n == 2);
	CHECK(gguf_arr_str(&sub, 1, &s) == 0 && gguf_str_eq(s, "yz"));
	CHECK(gguf_arr_sub(&a, 1, &sub) == 0 && sub.n == 0);
	CHECK(gguf_arr_sub(&a, 2, &sub) == 0 && gguf_arr_str(&sub, 0, &s) == 0 && gguf_str_eq(s, "w"));
	CHECK(gguf_arr_sub(&a, 3, &sub) == -1 && gguf_arr_str(&a, 0, &s) == -1);

	REQUIRE(gguf_get_arr(g, "a.deep", &a) == 0);
	CHECK(a.n == 2);
	CHECK(gguf_arr_sub(&a, 0, &sub) == 0 && sub.type == GGUF_TYPE_ARRAY && sub.n == 2);
	CHECK(gguf_arr_sub(&sub, 1, &leaf) == 0 && leaf.type == GGUF_TYPE_INT32 && leaf.n == 1);
	CHECK(gguf_arr_i64(&leaf, 0, &i) == 0 && i == 3);
	CHECK(gguf_arr_sub(&a, 1, &sub) == 0 && gguf_arr_sub(&sub, 0, &leaf) == 0);
	CHECK(gguf_arr_i64(&leaf, 0, &i) == 0 && i == -4);

	gguf_close(g);
	free(buf);
}

// a small model with one tensor of every sizable type
static struct gguf_writer *
every_type_writer(uint32_t align, int *n_types)
{
	struct gguf_writer *w = gguf_writer_new();
	if (align)
		gguf_writer_set_alignment(w, align);
	gguf_writer_str(w, "general.architecture", "test");
	*n_types = 0;
	for (uint32_t type = 0; type < AD_TYPE_COUNT; type++) {
		int64_t blk = ad_type_block_size(type);
		if (blk == 0)
			continue;
		int64_t ne[3] = {2 * blk, 3, 2};
		size_t nb;
		if (ad_type_row_bytes(type, ne[0], &nb))
			return NULL;
		nb *= 6;
		uint8_t *data = malloc(nb);
		for (size_t j = 0; j < nb; j++)
			data[j] = (uint8_t)rnd();
		char name[64];
		snprintf(name, sizeof name, "t.%s", ad_type_name(type));
		int rc = gguf_writer_tensor(w, name, type, 3, ne, data, nb, err);
		free(data);
		if (rc)
			return NULL;
		++*n_types;
	}
	return w;
}

static void
test_roundtrip_tensors(void)
{
	uint32_t aligns[] = {0, 64, 1};
	for (int ai = 0; ai < 3; ai++) {
		rng = 12345;
		int nt;
		struct gguf_writer *w = every_type_writer(aligns[ai], &nt);
		REQUIRE(w, "%s", err);
		CHECK(nt >= 18, "%d", nt);
		char path[512];
		snprintf(path, sizeof path, "%s/types%d.gguf", t_tmpdir(), ai);
		REQUIRE(gguf_writer_save(w, path, err) == 0, "%s", err);
		size_t n;
		uint8_t *mem = gguf_writer_bytes(w, &n);
		gguf_writer_free(w);
		size_t fn;
		uint8_t *file = t_read_file(path, &fn);
		REQUIRE(mem && file);
		CHECK(n == fn && memcmp(mem, file, n) == 0, "save and bytes agree");
		free(file);

		struct gguf *g = gguf_open(path, err);
		REQUIRE(g, "%s", err);
		size_t align = aligns[ai] ? aligns[ai] : 32;
		CHECK(gguf_alignment(g) == align);
		CHECK(gguf_n_tensors(g) == nt);
		uint32_t u;
		CHECK(aligns[ai] ? gguf_get_u32(g, "general.alignment", &u) == 0 && u == align
		                 : gguf_find_key(g, "general.alignment") == -1);
		rng = 12345;
		const uint8_t *first = gguf_tensor_at(g, 0)->data;
		CHECK((size_t)(first - (const uint8_t *)0) % align == 0 || align > 4096,
		      "data section aligned in the mapping");
		for (int64_t k = 0; k < gguf_n_tensors(g); k++) {
			const struct gguf_tensor *t = gguf_tensor_at(g, k);
			int64_t blk = ad_type_block_size(t->type);
			CHECK(t->n_dims == 3 && t->ne[0] == 2 * blk && t->ne[1] == 3 && t->ne[2] == 2 && t->ne[3] == 1,
			      "%s", t->name);
			CHECK(t->offset % align == 0, "%s", t->name);
			char name[64];
			snprintf(name, sizeof name, "t.%s", ad_type_name(t->type));
			CHECK(!strcmp(t->name, name));
			int same = 1;
			for (size_t j = 0; j < t->nbytes; j++)
				same &= ((const uint8_t *)t->data)[j] == (uint8_t)rnd();
			CHECK(same, "%s bytes", t->name);
		}
		CHECK(gguf_file_size(g) % align == 0, "file ends padded");
		gguf_close(g);

		// v2 has the same layout
		mem[4] = 2;
		g = gguf_open_memory(mem, n, err);
		CHECK(g && gguf_version(g) == 2, "%s", err);
		gguf_close(g);
		free(mem);
	}
}

static void
test_writer_errors(void)
{
	struct gguf_writer *w = gguf_writer_new();
	float x[64] = {0};
	int64_t ne[4] = {8, 8, 1, 1};
	CHECK(gguf_writer_tensor(w, "a", AD_TYPE_F32, 2, ne, x, 8 * 8 * 4, err) == 0, "%s", err);
	CHECK(gguf_writer_tensor(w, "a", AD_TYPE_F32, 2, ne, x, 8 * 8 * 4, err) == -1 && has(err, "twice"), "%s", err);
	CHECK(gguf_writer_tensor(w, "b", AD_TYPE_F32, 2, ne, x, 100, err) == -1 && has(err, "bytes"), "%s", err);
	CHECK(gguf_writer_tensor(w, "c", AD_TYPE_Q8_0, 2, ne, x, 100, err) == -1 && has(err, "multiple"), "%s", err);
	CHECK(gguf_writer_tensor(w, "d", 16, 2, ne, x, 100, err) == -1 && has(err, "IQ2_XXS"), "%s", err);
	CHECK(gguf_writer_tensor(w, "e", 99, 2, ne, x, 100, err) == -1 && has(err, "unknown"), "%s", err);
	CHECK(gguf_writer_tensor(w, "f", AD_TYPE_F32, 5, ne, x, 100, err) == -1 && has(err, "dimensions"), "%s", err);
	int64_t neg[2] = {8, -1};
	CHECK(gguf_writer_tensor(w, "g", AD_TYPE_F32, 2, neg, x, 100, err) == -1 && has(err, "dimension 1"), "%s", err);
	size_t n;
	void *b = gguf_writer_bytes(w, &n);
	CHECK(b != NULL);
	free(b);
	gguf_writer_set_alignment(w, 48);
	b = gguf_writer_bytes(w, &n);
	CHECK(b == NULL && n == 0, "bad alignment poisons the writer");
	char path[512];
	snprintf(path, sizeof path, "%s/poisoned.gguf", t_tmpdir());
	CHECK(gguf_writer_save(w, path, err) == -1 && has(err, "invalid"), "%s", err);
	gguf_writer_free(w);

	w = gguf_writer_new();
	struct gguf_warr *a = gguf_warr_new(GGUF_TYPE_INT32);
	gguf_warr_push_str(a, "not an int");
	gguf_writer_warr(w, "k", a);
	CHECK(gguf_writer_bytes(w, &n) == NULL, "mismatched push poisons the writer");
	gguf_writer_free(w);

	w = gguf_writer_new();
	CHECK(gguf_writer_save(w, "/nonexistent-dir/x.gguf", err) == -1 && has(err, "nonexistent-dir"), "%s", err);
	gguf_writer_free(w);
}

// --- malformed files ----------------------------------------------------------

// a small file: some keys, a nested array, two tensors
static uint8_t *
small_file(size_t *n)
{
	struct gguf_writer *w = gguf_writer_new();
	gguf_writer_str(w, "general.architecture", "llama");
	gguf_writer_u32(w, "general.alignment", 32);
	gguf_writer_u32(w, "llama.block_count", 1);
	const char *toks[] = {"<s>", "a", "bc"};
	gguf_writer_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
	float sc[3] = {0, -1, -2};
	gguf_writer_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, sc, 3);
	struct gguf_warr *nest = gguf_warr_new(GGUF_TYPE_ARRAY);
	struct gguf_warr *in = gguf_warr_new(GGUF_TYPE_STRING);
	gguf_warr_push_str(in, "m");
	gguf_warr_push_arr(nest, in);
	gguf_writer_warr(w, "x.nested", nest);
	float a[16], b[32];
	for (int i = 0; i < 16; i++)
		a[i] = (float)i;
	for (int i = 0; i < 32; i++)
		b[i] = (float)-i;
	int64_t ne_a[2] = {4, 4}, ne_b[1] = {32};
	gguf_writer_tensor(w, "tensor.a", AD_TYPE_F32, 2, ne_a, a, sizeof a, NULL);
	gguf_writer_tensor(w, "tensor.b", AD_TYPE_F32, 1, ne_b, b, sizeof b, NULL);
	uint8_t *buf = gguf_writer_bytes(w, n);
	gguf_writer_free(w);
	return buf;
}

static void
test_every_truncation(void)
{
	size_t n;
	uint8_t *buf = small_file(&n);
	REQUIRE(buf);
	struct gguf *g = gguf_open_memory(buf, n, err);
	REQUIRE(g, "%s", err);
	gguf_close(g);
	int bad = 0;
	for (size_t len = 0; len < n; len++) {
		// an exact-size copy so that the sanitizer sees any over-read
		uint8_t *p = malloc(len ? len : 1);
		memcpy(p, buf, len);
		err[0] = 0;
		g = gguf_open_memory(p, len, err);
		if (g || !err[0]) {
			bad++;
			fprintf(stderr, "prefix %zu: %s\n", len, g ? "opened" : "no message");
		}
		gguf_close(g);
		free(p);
	}
	CHECK(bad == 0, "%d prefixes misbehaved of %zu", bad, n);
	free(buf);
}

// position of the bytes of str (not NUL) in buf
static size_t
find(const uint8_t *buf, size_t n, const char *str)
{
	size_t k = strlen(str);
	for (size_t i = 0; i + k <= n; i++)
		if (!memcmp(buf + i, str, k))
			return i;
	return (size_t)-1;
}

static void
put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void
put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

struct mut {
	const char *what;
	const char *expect1, *expect2; // substrings of the error
};

// expect_err opens the patched copy and checks the error
static void
expect_err(const uint8_t *p, size_t n, const char *what, const char *e1, const char *e2)
{
	uint8_t *q = malloc(n);
	memcpy(q, p, n);
	err[0] = 0;
	struct gguf *g = gguf_open_memory(q, n, err);
	if (getenv("T_SHOW_ERRORS"))
		fprintf(stderr, "  %-24s %s\n", what, err);
	CHECK(!g, "%s: opened", what);
	CHECK(has(err, e1) && (!e2 || has(err, e2)), "%s: got '%s'", what, err);
	CHECK(!strchr(err, '\n'), "%s: one line", what);
	gguf_close(g);
	free(q);
}

static void
test_hostile(void)
{
	size_t n;
	uint8_t *orig = small_file(&n), *b = malloc(n);
	REQUIRE(orig && b);
#define FRESH() memcpy(b, orig, n)
	size_t tn_a = find(orig, n, "tensor.a"), tn_b = find(orig, n, "tensor.b");
	size_t k_arch = find(orig, n, "general.architecture");
	size_t k_align = find(orig, n, "general.alignment");
	size_t k_tok = find(orig, n, "tokenizer.ggml.tokens");
	size_t k_nest = find(orig, n, "x.nested");
	REQUIRE(tn_a != (size_t)-1 && tn_b != (size_t)-1 && k_arch == 32 && k_align != (size_t)-1);
	// tensor.a info: name(8) n_dims@+8 ne0@+12 ne1@+20 type@+28 offset@+32
	size_t a_dims = tn_a + 8, a_ne0 = a_dims + 4, a_ne1 = a_ne0 + 8, a_type = a_ne1 + 8, a_off = a_type + 4;
	size_t b_off = tn_b + 8 + 4 + 8 + 4;

	FRESH();
	memcpy(b, "GGUX", 4);
	expect_err(b, n, "magic", "not a GGUF", NULL);
	FRESH();
	put32(b + 4, 0x03000000);
	expect_err(b, n, "big-endian", "big-endian", NULL);
	FRESH();
	memcpy(b, "FUGG", 4);
	expect_err(b, n, "big-endian magic", "big-endian", NULL);
	FRESH();
	put32(b + 4, 1);
	expect_err(b, n, "v1", "v1 (32-bit counts)", NULL);
	FRESH();
	put32(b + 4, 4);
	expect_err(b, n, "v4", "version 4", NULL);
	FRESH();
	put64(b + 8, UINT64_MAX);
	expect_err(b, n, "huge tensor count", "tensor count", "offset 8");
	FRESH();
	put64(b + 16, (uint64_t)1 << 40);
	expect_err(b, n, "huge key count", "key count", "offset 16");
	FRESH();
	put64(b + 16, 7);
	expect_err(b, n, "one key more", "offset", NULL);
	FRESH();
	put64(b + 24, UINT64_MAX - 3);
	expect_err(b, n, "huge key length", "length", "offset 24");
	FRESH();
	put64(b + k_arch + 20 + 4, (uint64_t)1 << 62);
	expect_err(b, n, "huge string value", "general.architecture", "length");
	FRESH();
	put32(b + k_arch + 20, 13);
	expect_err(b, n, "unknown value type", "unknown value type 13", "general.architecture");
	FRESH();
	b[k_arch + 3] = '\n';
	put32(b + k_arch + 20, 13);
	expect_err(b, n, "newline in key", "key 'gen?ral.architecture'", "unknown value type");
	FRESH();
	b[k_arch + 3] = 0;
	expect_err(b, n, "NUL in key", "NUL", "offset 24");
	// two keys of equal length made equal
	FRESH();
	memcpy(b + find(orig, n, "llama.block_count"), "general.alignment", 17);
	expect_err(b, n, "duplicate key", "duplicate key 'general.alignment'", "offsets");
	FRESH();
	put32(b + k_align + 17 + 4, 48);
	expect_err(b, n, "alignment 48", "general.alignment", "power of two");
	FRESH();
	put32(b + k_align + 17 + 4, 0);
	expect_err(b, n, "alignment 0", "general.alignment", "power of two");
	FRESH();
	put32(b + k_align + 17, GGUF_TYPE_INT32);
	expect_err(b, n, "alignment type", "general.alignment", "not uint32");
	FRESH();
	put32(b + k_align + 17 + 4, 1u << 30);
	expect_err(b, n, "alignment past the end", "past the end", NULL);
	// tokenizer.ggml.tokens: type(4) elem type(4) count(8)
	size_t tok_n = k_tok + 21 + 4 + 4;
	FRESH();
	put64(b + tok_n, (uint64_t)1 << 61);
	expect_err(b, n, "huge array count", "tokenizer.ggml.tokens", "claims");
	FRESH();
	put32(b + k_tok + 21 + 4, 77);
	expect_err(b, n, "unknown element type", "unknown array element type 77", NULL);
	FRESH();
	put64(b + tok_n + 8, UINT64_MAX);
	expect_err(b, n, "huge array string", "tokenizer.ggml.tokens", "length");
	FRESH();
	put64(b + k_nest + 8 + 4 + 4, UINT64_MAX / 2);
	expect_err(b, n, "huge nested count", "x.nested", "claims");
	FRESH();
	put32(b + a_dims, 5);
	expect_err(b, n, "n_dims 5", "tensor 'tensor.a'", "5 dimensions");
	FRESH();
	put32(b + a_dims, UINT32_MAX);
	expect_err(b, n, "n_dims huge", "tensor 'tensor.a'", "dimensions");
	FRESH();
	put64(b + a_ne1, 0);
	expect_err(b, n, "zero dim", "tensor 'tensor.a' dimension 1", "positive");
	FRESH();
	put64(b + a_ne0, (uint64_t)-4);
	expect_err(b, n, "negative dim", "tensor 'tensor.a' dimension 0", "-4");
	FRESH();
	put64(b + a_ne0, (uint64_t)1 << 40);
	put64(b + a_ne1, (uint64_t)1 << 40);
	expect_err(b, n, "element count overflow", "tensor 'tensor.a'", "overflows");
	FRESH();
	put64(b + a_ne0, (uint64_t)1 << 62);
	put64(b + a_ne1, 1);
	expect_err(b, n, "byte size overflow", "tensor 'tensor.a'", "overflows");
	FRESH();
	put64(b + a_ne0, (uint64_t)1 << 20);
	expect_err(b, n, "data past the end", "tensor 'tensor.a'", "outside the file");
	FRESH();
	put32(b + a_type, 99);
	expect_err(b, n, "unknown type", "tensor 'tensor.a'", "unknown type id 99");
	FRESH();
	put32(b + a_type, 16);
	expect_err(b, n, "IQ type", "tensor 'tensor.a'", "IQ2_XXS");
	FRESH();
	put32(b + a_type, 39);
	expect_err(b, n, "MXFP4", "tensor 'tensor.a'", "MXFP4");
	FRESH();
	put32(b + a_type, AD_TYPE_Q4_K);
	expect_err(b, n, "block multiple", "tensor 'tensor.a'", "not a multiple of the block size 256");
	FRESH();
	put64(b + a_off, (uint64_t)1 << 40);
	expect_err(b, n, "offset past end", "tensor 'tensor.a'", "outside the file");
	FRESH();
	put64(b + a_off, UINT64_MAX - 31);
	expect_err(b, n, "offset wraps", "tensor 'tensor.a'", "outside the file");
	FRESH();
	put64(b + a_off, 4);
	expect_err(b, n, "misaligned offset", "tensor 'tensor.a'", "alignment");
	FRESH();
	put64(b + b_off, 32);
	expect_err(b, n, "overlap", "overlaps", NULL);
	FRESH();
	memcpy(b + tn_b, "tensor.a", 8);
	expect_err(b, n, "duplicate tensor", "duplicate tensor name 'tensor.a'", NULL);
	FRESH();
	put64(b + tn_a - 8, 1u << 30);
	expect_err(b, n, "huge tensor name", "tensor name", "length");
	// the last tensor's data cut off (the file shortened by its padding + 1)
	expect_err(orig, n - 1, "last tensor cut", "tensor 'tensor.b'", "outside the file");
#undef FRESH
	free(b);
	free(orig);
}

// nesting beyond the bound, built by hand
static void
test_deep_nesting(void)
{
	uint8_t buf[1024];
	size_t n = 0;
	memcpy(buf, "GGUF", 4);
	put32(buf + 4, 3);
	put64(buf + 8, 0);
	put64(buf + 16, 1);
	put64(buf + 24, 1);
	buf[32] = 'k';
	n = 33;
	put32(buf + n, GGUF_TYPE_ARRAY);
	n += 4;
	for (int d = 0; d < 40; d++) {
		put32(buf + n, GGUF_TYPE_ARRAY);
		put64(buf + n + 4, 1);
		n += 12;
	}
	put32(buf + n, GGUF_TYPE_UINT8);
	put64(buf + n + 4, 0);
	n += 12;
	expect_err(buf, n, "deep nesting", "nested deeper", "key 'k'");

	// 7 levels is fine
	n = 37;
	for (int d = 0; d < 7; d++) {
		put32(buf + n, GGUF_TYPE_ARRAY);
		put64(buf + n + 4, 1);
		n += 12;
	}
	put32(buf + n, GGUF_TYPE_UINT8);
	put64(buf + n + 4, 1);
	n += 12;
	buf[n++] = 42;
	struct gguf *g = gguf_open_memory(buf, n, err);
	REQUIRE(g, "%s", err);
	struct gguf_arr a;
	REQUIRE(gguf_get_arr(g, "k", &a) == 0);
	for (int d = 0; d < 7; d++)
		REQUIRE(gguf_arr_sub(&a, 0, &a) == 0);
	int64_t v;
	CHECK(a.type == GGUF_TYPE_UINT8 && gguf_arr_i64(&a, 0, &v) == 0 && v == 42);
	gguf_close(g);
}

// --- the fuzzer's seed corpus -------------------------------------------------

static int
write_corpus(const char *dir)
{
	char path[1024];
	size_t n;
	uint8_t *b;
#define OUT(name, p, len)                                                                                              \
	do {                                                                                                           \
		snprintf(path, sizeof path, "%s/%s", dir, name);                                                       \
		FILE *f_ = fopen(path, "wb");                                                                          \
		if (!f_ || fwrite(p, 1, len, f_) != len) {                                                             \
			perror(path);                                                                                  \
			return 1;                                                                                      \
		}                                                                                                      \
		fclose(f_);                                                                                            \
	} while (0)
	b = small_file(&n);
	OUT("small-two-tensors.gguf", b, n);
	free(b);

	struct gguf_writer *w = gguf_writer_new();
	gguf_writer_str(w, "general.architecture", "x");
	struct gguf_warr *deep = gguf_warr_new(GGUF_TYPE_ARRAY);
	struct gguf_warr *mid = gguf_warr_new(GGUF_TYPE_ARRAY);
	struct gguf_warr *leaf = gguf_warr_new(GGUF_TYPE_INT16);
	int16_t v = -3;
	gguf_warr_push(leaf, &v);
	gguf_warr_push_arr(mid, leaf);
	gguf_warr_push_arr(deep, mid);
	gguf_writer_warr(w, "deep", deep);
	double d = 2.5;
	gguf_writer_val(w, "f64", GGUF_TYPE_FLOAT64, &d);
	gguf_writer_bool(w, "flag", 1);
	gguf_writer_u64(w, "u64", 1ull << 40);
	b = gguf_writer_bytes(w, &n);
	OUT("kv-only-nested.gguf", b, n);
	free(b);
	gguf_writer_free(w);

	// one tiny tensor of every sizable type
	int nt;
	rng = 7;
	w = gguf_writer_new();
	gguf_writer_set_alignment(w, 16);
	for (uint32_t type = 0; type < AD_TYPE_COUNT; type++) {
		int64_t blk = ad_type_block_size(type);
		if (!blk)
			continue;
		size_t nb = ad_type_block_bytes(type);
		uint8_t data[512];
		for (size_t j = 0; j < nb; j++)
			data[j] = (uint8_t)rnd();
		char name[32];
		snprintf(name, sizeof name, "%s", ad_type_name(type));
		gguf_writer_tensor(w, name, type, 1, &blk, data, nb, NULL);
	}
	b = gguf_writer_bytes(w, &n);
	OUT("every-type-one-block.gguf", b, n);
	free(b);
	gguf_writer_free(w);
	(void)nt;
	return 0;
#undef OUT
}

int
main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "--write-corpus"))
		return write_corpus(argv[2]);
	T_RUN(test_stories260k);
	T_RUN(test_v1_refused);
	T_RUN(test_q8_0_ragged_refused);
	T_RUN(test_all_models_open);
	T_RUN(test_open_errors);
	T_RUN(test_roundtrip_values);
	T_RUN(test_roundtrip_tensors);
	T_RUN(test_writer_errors);
	T_RUN(test_every_truncation);
	T_RUN(test_hostile);
	T_RUN(test_deep_nesting);
	return t_done();
}
