// test-safetensors: reader, shard sets and writer, including malformed files.
#include <stdint.h>
#include <sys/stat.h>

#include "fp16.h"
#include "safetensors.h"
#include "t.h"
#include "wtype.h"

#pragma GCC diagnostic ignored "-Wformat-zero-length" // CHECK without a message

static char *
tmp_path(const char *name)
{
	static char buf[4][512];
	static int k;
	char *p = buf[k++ & 3];
	snprintf(p, 512, "%s/%s", t_tmpdir(), name);
	return p;
}

static float a_f32[6] = {1, -2, 3.5f, 0, 1e-3f, -7};
static uint16_t b_f16[4], c_bf16[3];
static float d_scalar = 42;

static void
make_file(const char *path)
{
	for (int i = 0; i < 4; i++)
		b_f16[i] = ad_f32_to_fp16((float)i - 1.5f);
	for (int i = 0; i < 3; i++)
		c_bf16[i] = ad_f32_to_bf16((float)i * 0.25f);
	struct st_wtensor t[] = {
		{"model.a", AD_TYPE_F32, 2, {2, 3}, a_f32}, {"b", AD_TYPE_F16, 2, {4, 1}, b_f16},
		{"c.bf", AD_TYPE_BF16, 1, {3}, c_bf16},     {"scalar", AD_TYPE_F32, 0, {0}, &d_scalar},
		{"empty", AD_TYPE_F32, 2, {0, 5}, NULL},
	};
	char err[AD_ERRLEN];
	REQUIRE(st_write(path, t, 5, err) == 0, "%s", err);
}

static void
test_roundtrip(void)
{
	char err[AD_ERRLEN];
	const char *path = tmp_path("rt.safetensors");
	make_file(path);
	struct st_file f;
	REQUIRE(st_open(&f, path, err) == 0, "%s", err);
	CHECK(f.n_tensors == 5);
	const struct st_tensor *a = st_find(&f, "model.a");
	REQUIRE(a != NULL);
	CHECK(a->type == AD_TYPE_F32 && !strcmp(a->dtype, "F32"));
	CHECK(a->n_dims == 2 && a->shape[0] == 2 && a->shape[1] == 3 && a->nelem == 6);
	CHECK(a->nbytes == 24 && memcmp(a->data, a_f32, 24) == 0);
	CHECK(st_tensor_check(a, err) == 0);
	const struct st_tensor *b = st_find(&f, "b");
	REQUIRE(b != NULL);
	CHECK(b->type == AD_TYPE_F16 && b->nbytes == 8 && memcmp(b->data, b_f16, 8) == 0);
	const struct st_tensor *c = st_find(&f, "c.bf");
	REQUIRE(c != NULL);
	CHECK(c->type == AD_TYPE_BF16 && c->n_dims == 1 && memcmp(c->data, c_bf16, 6) == 0);
	const struct st_tensor *s = st_find(&f, "scalar");
	REQUIRE(s != NULL);
	CHECK(s->n_dims == 0 && s->nelem == 1 && memcmp(s->data, &d_scalar, 4) == 0);
	const struct st_tensor *e = st_find(&f, "empty");
	REQUIRE(e != NULL);
	CHECK(e->nelem == 0 && e->nbytes == 0);
	CHECK(st_find(&f, "nope") == NULL);
	CHECK(st_find(&f, "__metadata__") == NULL);
	// the header is padded so the data starts 8-aligned
	CHECK((a->offset & 7) == 0 || (b->offset & 7) == 0 || (c->offset & 7) == 0);
	st_close(&f);
	st_close(&f); // twice is harmless
}

// a buffer: 8-byte length, the header text, then ndata bytes of data
static uint8_t *
mk(const char *header, size_t ndata, size_t *size)
{
	size_t h = strlen(header);
	*size = 8 + h + ndata;
	uint8_t *p = calloc(1, *size);
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)((uint64_t)h >> (8 * i));
	memcpy(p + 8, header, h);
	return p;
}

static void
expect_error(const char *header, size_t ndata, const char *want)
{
	size_t size;
	uint8_t *p = mk(header, ndata, &size);
	char err[AD_ERRLEN] = "";
	struct st_file f;
	int rc = st_parse(&f, p, size, "x.safetensors", err);
	CHECK(rc == -1, "accepted: %s", header);
	CHECK(strstr(err, want) != NULL, "error \"%s\" lacks \"%s\"", err, want);
	CHECK(f.n_tensors == 0 && f.tensors == NULL);
	if (rc == 0)
		st_close(&f);
	free(p);
}

static void
expect_ok(const char *header, size_t ndata)
{
	size_t size;
	uint8_t *p = mk(header, ndata, &size);
	char err[AD_ERRLEN] = "";
	struct st_file f;
	CHECK(st_parse(&f, p, size, "x.safetensors", err) == 0, "%s: %s", header, err);
	st_close(&f);
	free(p);
}

static void
test_malformed(void)
{
	const char *T = "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
	expect_ok(T, 8);
	expect_ok(
		"{\"__metadata__\":{\"format\":\"pt\"},\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}   ",
		8);
	expect_ok("{}", 0);
	expect_error("[1,2]", 0, "start with '{'");
	expect_error("{\"t\":", 0, "not valid JSON");
	expect_error("{\"t\":{}} x", 0, "junk after");
	expect_error("{\"t\":1}", 0, "\"t\": entry is not an object");
	expect_error("{\"t\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "\"dtype\" missing");
	expect_error("{\"t\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype \"Q4\"");
	expect_error("{\"t\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8, "\"shape\"");
	expect_error("{\"t\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "shape[0]");
	expect_error("{\"t\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", 8, "shape[0]");
	expect_error("{\"t\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
	             "dimensions");
	expect_error("{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 8,
	             "overflow");
	expect_error("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, "data_offsets");
	expect_error("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "backwards");
	expect_error("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "past the data");
	expect_error("{\"t\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "needs 12");
	expect_error("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
	             "\"u\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
	             12, "overlaps");
	expect_error("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "unused bytes");
	expect_error(T, 12, "after the last tensor");
	expect_error("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
	             "\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
	             8, "twice");

	// other dtypes are indexed, and named when used
	size_t size;
	uint8_t *p = mk("{\"ids\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}", 16, &size);
	struct st_file f;
	char err[AD_ERRLEN];
	REQUIRE(st_parse(&f, p, size, "x", err) == 0, "%s", err);
	const struct st_tensor *t = st_find(&f, "ids");
	REQUIRE(t != NULL);
	CHECK(st_tensor_check(t, err) == -1 && strstr(err, "I64") && strstr(err, "ids"), "%s", err);
	st_close(&f);
	free(p);

	// header length fields
	uint8_t small[7] = {0};
	CHECK(st_parse(&f, small, sizeof small, "x", err) == -1 && strstr(err, "too short"), "%s", err);
	uint8_t big[16] = {0, 0, 0, 0, 0, 0, 0, 1, '{', '}'};
	CHECK(st_parse(&f, big, sizeof big, "x", err) == -1 && strstr(err, "out of range"), "%s", err);
	uint8_t past[16] = {100, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
	CHECK(st_parse(&f, past, sizeof past, "x", err) == -1 && strstr(err, "past the end"), "%s", err);
}

static void
test_truncated_and_flipped(void)
{
	char err[AD_ERRLEN];
	const char *path = tmp_path("full.safetensors");
	make_file(path);
	size_t n;
	uint8_t *full = t_read_file(path, &n);
	REQUIRE(full && n > 16);
	// every proper prefix is refused (copied so that ASan sees overreads)
	int accepted = 0;
	for (size_t len = 0; len < n; len++) {
		uint8_t *p = malloc(len ? len : 1);
		memcpy(p, full, len);
		struct st_file f;
		if (st_parse(&f, p, len, "x", err) == 0) {
			accepted++;
			st_close(&f);
		}
		free(p);
	}
	CHECK(accepted == 0, "%d truncated files accepted", accepted);
	// also through the file path
	const char *tp = tmp_path("trunc.safetensors");
	FILE *fp = fopen(tp, "wb");
	fwrite(full, 1, n - 1, fp);
	fclose(fp);
	struct st_file f;
	CHECK(st_open(&f, tp, err) == -1 && strstr(err, "trunc.safetensors"), "%s", err);
	CHECK(st_open(&f, tmp_path("does-not-exist"), err) == -1 && strstr(err, "does-not-exist"));

	// single-byte corruptions anywhere in the header: error or success, no crash
	uint64_t rng = 12345;
	for (int k = 0; k < 20000; k++) {
		uint8_t *p = malloc(n);
		memcpy(p, full, n);
		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		size_t at = (size_t)(rng >> 33) % (n < 400 ? n : 400);
		p[at] = (uint8_t)(rng >> 20);
		if (st_parse(&f, p, n, "x", err) == 0) {
			for (int64_t i = 0; i < f.n_tensors; i++) // every view inside the buffer
				CHECK((const uint8_t *)f.tensors[i].data + f.tensors[i].nbytes <= p + n);
			st_close(&f);
		}
		free(p);
	}
	free(full);
}

static void
write_shard(const char *dir, const char *file, const char *const *names, int n, float base)
{
	struct st_wtensor t[8];
	static float vals[64];
	for (int i = 0; i < n; i++) {
		vals[i * 2] = base + (float)i;
		vals[i * 2 + 1] = -base - (float)i;
		t[i] = (struct st_wtensor){names[i], AD_TYPE_F32, 1, {2}, &vals[i * 2]};
	}
	char path[512], err[AD_ERRLEN];
	snprintf(path, sizeof path, "%s/%s", dir, file);
	REQUIRE(st_write(path, t, n, err) == 0, "%s", err);
}

static const char *
mkdir_tmp(const char *name)
{
	char *p = tmp_path(name);
	mkdir(p, 0755);
	return p;
}

static void
test_sets(void)
{
	char err[AD_ERRLEN];
	struct st_set s;
	const char *s1[] = {"x.0", "x.1"}, *s2[] = {"y.0", "y.1", "y.2"};

	// no index: every *.safetensors in name order
	const char *d = mkdir_tmp("plain");
	write_shard(d, "b.safetensors", s2, 3, 100);
	write_shard(d, "a.safetensors", s1, 2, 10);
	REQUIRE(st_set_open(&s, d, err) == 0, "%s", err);
	CHECK(s.n_files == 2 && s.n_tensors == 5 && !s.has_index);
	const struct st_tensor *t = st_set_find(&s, "y.2");
	REQUIRE(t != NULL);
	CHECK(t->file == 1 && ((const float *)t->data)[0] == 102);
	t = st_set_find(&s, "x.1");
	REQUIRE(t != NULL);
	CHECK(t->file == 0 && ((const float *)t->data)[1] == -11);
	CHECK(st_set_find(&s, "z") == NULL);
	st_set_close(&s);
	st_set_close(&s);

	// with an index; a stray file that it does not name is not opened
	d = mkdir_tmp("indexed");
	write_shard(d, "model-00001-of-00002.safetensors", s1, 2, 10);
	write_shard(d, "model-00002-of-00002.safetensors", s2, 3, 100);
	write_shard(d, "stray.safetensors", s1, 2, 0);
	const char *names[] = {"x.0", "y.0", "x.1", "y.1", "y.2"};
	const char *files[] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
	                       "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
	                       "model-00002-of-00002.safetensors"};
	char ip[512];
	snprintf(ip, sizeof ip, "%s/model.safetensors.index.json", d);
	REQUIRE(st_write_index(ip, names, files, 5, 40, err) == 0, "%s", err);
	REQUIRE(st_set_open(&s, d, err) == 0, "%s", err);
	CHECK(s.n_files == 2 && s.n_tensors == 5 && s.has_index);
	t = st_set_find(&s, "x.0");
	CHECK(t && t->file == 0 && ((const float *)t->data)[0] == 10);
	st_set_close(&s);

	// index naming the wrong shard for a tensor
	files[0] = "model-00002-of-00002.safetensors";
	REQUIRE(st_write_index(ip, names, files, 5, 40, err) == 0);
	CHECK(st_set_open(&s, d, err) == -1 && strstr(err, "x.0"), "%s", err);
	// index naming a missing file
	files[0] = "missing.safetensors";
	REQUIRE(st_write_index(ip, names, files, 5, 40, err) == 0);
	CHECK(st_set_open(&s, d, err) == -1 && strstr(err, "missing.safetensors"), "%s", err);
	// index escaping the directory
	files[0] = "../plain/a.safetensors";
	REQUIRE(st_write_index(ip, names, files, 5, 40, err) == 0);
	CHECK(st_set_open(&s, d, err) == -1 && strstr(err, "not a file name"), "%s", err);
	// index that is not JSON
	FILE *fp = fopen(ip, "wb");
	fputs("{\"weight_map\": [", fp);
	fclose(fp);
	CHECK(st_set_open(&s, d, err) == -1 && strstr(err, "weight_map"), "%s", err);
	CHECK(s.n_files == 0 && s.files == NULL);

	// a tensor in two shards
	d = mkdir_tmp("dup");
	write_shard(d, "a.safetensors", s1, 2, 10);
	write_shard(d, "b.safetensors", s1, 1, 10);
	CHECK(st_set_open(&s, d, err) == -1 && strstr(err, "x.0") && strstr(err, "both"), "%s", err);

	// a bad shard is named
	d = mkdir_tmp("bad");
	write_shard(d, "a.safetensors", s1, 2, 10);
	snprintf(ip, sizeof ip, "%s/b.safetensors", d);
	fp = fopen(ip, "wb");
	fputs("garbage!garbage!", fp);
	fclose(fp);
	CHECK(st_set_open(&s, d, err) == -1 && strstr(err, "b.safetensors"), "%s", err);

	// nothing there
	d = mkdir_tmp("empty");
	CHECK(st_set_open(&s, d, err) == -1 && strstr(err, "no model.safetensors.index.json"), "%s", err);
	CHECK(st_set_open(&s, tmp_path("nonexistent"), err) == -1);
}

int
main(void)
{
	T_RUN(test_roundtrip);
	T_RUN(test_malformed);
	T_RUN(test_truncated_and_flipped);
	T_RUN(test_sets);
	return t_done();
}
