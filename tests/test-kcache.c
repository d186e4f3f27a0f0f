// test-kcache.c - the on-disk cache of compiled kernels (ane-worker/kcache.h)
// and the emu API it rests on (emu_kernel_const, emu_compile_packed).
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "build.h"
#include "fp16.h"
#include "gguf.h"
#include "hugemem.h"
#include "kcache.h"
#include "mil.h"
#include "t.h"
#include "wtype.h"

#define MODELS T_DATA "/models/"
#define W 8

static char model_path[512]; // a copy in the scratch directory: touched by the tests
static struct model model;

static uint32_t rng = 777;
static float
frand(void)
{
	rng = rng * 1664525u + 1013904223u;
	return (float)(rng >> 8) / 16777216.0f - 0.5f;
}

static void
copy_file(const char *from, const char *to)
{
	size_t n;
	void *d = t_read_file(from, &n);
	REQUIRE(d, "%s", from);
	FILE *f = fopen(to, "wb");
	REQUIRE(f && fwrite(d, 1, n, f) == n);
	fclose(f);
	free(d);
}

static void
make_dir(char *out, size_t cap, const char *name)
{
	snprintf(out, cap, "%s/%s", t_tmpdir(), name);
	mkdir(out, 0700);
}

static int
count_entries(const char *dir)
{
	char err[AD_ERRLEN];
	return kc_list(dir, NULL, NULL, err);
}

// the one entry's path (there must be exactly one)
static void
entry_path(const char *dir, char *out, size_t cap)
{
	char cmd[600];
	snprintf(cmd, sizeof cmd, "ls %s/*.kc", dir);
	FILE *p = popen(cmd, "r");
	out[0] = 0;
	if (p) {
		if (!fgets(out, (int)cap, p))
			out[0] = 0;
		pclose(p);
	}
	out[strcspn(out, "\n")] = 0;
}

// every kernel's output for the same random input, concatenated
static uint16_t *
outputs(struct ane_set *s, size_t *n)
{
	size_t total = 0;
	for (int i = 0; i < s->plan.n; i++)
		total += ane_kernel_output_capacity(&s->k[i]) / 2;
	uint16_t *all = calloc(total, 2);
	size_t o = 0;
	for (int i = 0; i < s->plan.n && all; i++) {
		struct ane_kernel *k = &s->k[i];
		size_t ni = ane_kernel_input_capacity(k) / 2, no = ane_kernel_output_capacity(k) / 2;
		uint16_t *in = malloc(ni * 2);
		rng = 99 + (uint32_t)i;
		for (size_t j = 0; j < ni; j++)
			in[j] = ad_f32_to_fp16(frand());
		char err[AD_ERRLEN];
		CHECK(ane_eval(k, in, all + o, k->width, err) == 0, "%s", err);
		free(in);
		o += no;
	}
	*n = total;
	return all;
}

static int
build(struct ane_set *s, const char *dir, int width, int split, const char *options, uint64_t max_bytes, int verify)
{
	char err[AD_ERRLEN];
	struct ane_plan_opts po = {.width = width, .split = split};
	struct ane_build_opts bo = {.backend = "emu",
	                            .cache_dir = dir,
	                            .options = options,
	                            .cache_max_bytes = max_bytes,
	                            .cache_verify = verify};
	int rc = ane_set_build(s, &model, &po, &bo, 0, err);
	if (rc)
		fprintf(stderr, "build: %s\n", err);
	return rc;
}

// outputs of a build without the cache: what every cached build must give
static uint16_t *ref_out;
static size_t ref_n;

static void
check_same(struct ane_set *s, const char *what)
{
	size_t n;
	uint16_t *o = outputs(s, &n);
	CHECK(o && n == ref_n && !memcmp(o, ref_out, n * 2), "%s: outputs differ from a compile without the cache",
	      what);
	free(o);
}

static void
test_hit_is_identical(void)
{
	char dir[400];
	make_dir(dir, sizeof dir, "hit");
	struct ane_set s;
	REQUIRE(build(&s, dir, W, 0, "weights=fp16", 0, 0) == 0);
	CHECK(s.start.cache == ANE_CACHE_MISS, "%s", ane_cache_state_name(s.start.cache));
	check_same(&s, "cold compile, stored");
	ane_set_free(&s);
	CHECK(count_entries(dir) == 1);
	for (int verify = 0; verify < 2; verify++) {
		REQUIRE(build(&s, dir, W, 0, "weights=fp16", 0, verify) == 0);
		CHECK(s.start.cache == ANE_CACHE_HIT, "%s", ane_cache_state_name(s.start.cache));
		CHECK(s.cache != NULL && s.start.cache_bytes > 0);
		check_same(&s, verify ? "hit, verified" : "hit");
		// the weights are the mapped file's, not copies
		struct emu_const c;
		REQUIRE(emu_kernel_const(s.k[0].ek, 0, &c) == 0);
		const struct kc_kernel *ck = s.cache ? kc_entry_kernel(s.cache, 0) : NULL;
		CHECK(ck && ck->nconsts > 0 && c.data == ck->consts[0].data,
		      "kernel 0 reads the entry's mapped buffer");
		CHECK(((uintptr_t)c.data & (KC_BUF_ALIGN - 1)) == 0, "a mapped buffer is %d-byte aligned",
		      KC_BUF_ALIGN);
		ane_set_free(&s);
	}
	CHECK(count_entries(dir) == 1);
	// the key names what it was made from
	char p[600];
	entry_path(dir, p, sizeof p);
	size_t n;
	char *f = t_read_file(p, &n);
	REQUIRE(f);
	const char *bid = kc_build_id();
	CHECK(bid[0] != 0);
	int found = 0;
	for (size_t i = 0; i + strlen(bid) < n; i++)
		if (!memcmp(f + i, "build ", 6) && !memcmp(f + i + 6, bid, strlen(bid)))
			found = 1;
	CHECK(found, "the key holds 'build %s'", bid);
#ifdef __linux__
	CHECK(strstr(bid, "gnu-") != NULL, "a GNU build id: %s", bid);
#endif
	free(f);
}

// the 4-bit quantiser as build.h describes it, plainly: layer 0's q, k and
// v rows stacked, each row's scale its largest |w| in fp16, a table for
// each 64 rows from a 1024-bin histogram of w / scale (ane_l4_tables), a
// weight's index its nearest entry (ane_l4_index), packed by emu_l4_pack:
// the qkv kernel's constants must be these, to the bit (the build takes
// both passes on each block of whole tables, this does them over all rows)
static void
test_l4_quantiser(void)
{
	char err[AD_ERRLEN];
	const struct model_tensor *t[3] = {model_find_tensor(&model, "blk.0.attn_q.weight"),
	                                   model_find_tensor(&model, "blk.0.attn_k.weight"),
	                                   model_find_tensor(&model, "blk.0.attn_v.weight")};
	REQUIRE(t[0] && t[1] && t[2]);
	const size_t cin = (size_t)t[0]->ne[0];
	size_t rows = 0;
	for (int p = 0; p < 3; p++) {
		REQUIRE(t[p]->type == AD_TYPE_F32 || t[p]->type == AD_TYPE_F16, "%s: F32 or F16 expected", t[p]->name);
		rows += (size_t)t[p]->ne[1];
	}
	REQUIRE(rows % 64 == 0 && rows > 64, "%zu rows: a table for each 64 expected", rows);
	float *w = malloc(rows * cin * sizeof(float));
	REQUIRE(w);
	for (int p = 0, r = 0; p < 3; r += (int)t[p]->ne[1], p++) {
		size_t nv = (size_t)t[p]->ne[1] * cin;
		if (t[p]->type == AD_TYPE_F32)
			memcpy(w + (size_t)r * cin, t[p]->data, nv * sizeof(float));
		else
			ad_fp16_to_f32_row(t[p]->data, w + (size_t)r * cin, nv);
	}
	const size_t ng = rows / 64, nb = 1024;
	float *sc = calloc((rows + 15) / 16 * 16, sizeof(float)), *tab = malloc(ng * 16 * sizeof(float));
	double *hist = calloc(ng * nb, sizeof(double));
	uint8_t *q = malloc(rows * cin), *want = aligned_alloc(64, emu_l4_panel_bytes(rows, cin));
	REQUIRE(sc && tab && hist && q && want);
	for (size_t r = 0; r < rows; r++) {
		float amax = 0;
		for (size_t i = 0; i < cin; i++)
			amax = fmaxf(amax, fabsf(w[r * cin + i]));
		sc[r] = ad_fp16_to_f32(ad_f32_to_fp16(amax));
		for (size_t i = 0; i < cin && sc[r] > 0; i++) {
			float u = fminf(fmaxf(w[r * cin + i] / sc[r], -1.0f), 1.0f);
			hist[r / 64 * nb + (size_t)((u + 1.0f) * (0.5f * (float)(nb - 1)) + 0.5f)] += 1;
		}
		if (sc[r] == 0)
			hist[r / 64 * nb + nb / 2] += (double)cin;
	}
	for (size_t g = 0; g < ng; g++)
		ane_l4_tables(hist + g * nb, nb, tab + g * 16);
	for (size_t r = 0; r < rows; r++)
		for (size_t i = 0; i < cin; i++)
			q[r * cin + i] =
				(uint8_t)ane_l4_index(tab + r / 64 * 16, sc[r] > 0 ? w[r * cin + i] / sc[r] : 0.0f);
	emu_l4_pack(q, rows, cin, want);

	struct ane_plan_opts po = {.width = W, .weights = ANE_W_LUT4};
	struct ane_build_opts bo = {.backend = "emu"};
	struct ane_set s;
	REQUIRE(ane_set_build(&s, &model, &po, &bo, 0, err) == 0, "%s", err);
	int seen = 0;
	for (int i = 0; i < emu_kernel_nconsts(s.k[0].ek); i++) {
		struct emu_const c;
		REQUIRE(emu_kernel_const(s.k[0].ek, i, &c) == 0);
		if (c.kind == EMU_CONST_L4_PANELS) {
			seen |= 1;
			CHECK(c.bytes == emu_l4_panel_bytes(rows, cin) && !memcmp(c.data, want, c.bytes),
			      "the indices differ from the plain quantiser's");
		} else if (c.kind == EMU_CONST_F16_LUT || c.kind == EMU_CONST_F16_SCALES) {
			// fp16, as the program gives them (the quantiser's values are fp16 ones)
			int lut = c.kind == EMU_CONST_F16_LUT;
			const float *v = lut ? tab : sc;
			size_t n = lut ? ng * 16 : rows, same = 0;
			for (size_t j = 0; j < n && c.bytes >= n * sizeof(uint16_t); j++)
				same += ((const uint16_t *)c.data)[j] == ad_f32_to_fp16(v[j]);
			seen |= lut ? 2 : 4;
			CHECK(same == n, "the %s differ from the plain quantiser's (%zu of %zu)",
			      lut ? "tables" : "scales", n - same, n);
		}
	}
	CHECK(seen == 7, "qkv's constants: %d of indices, tables, scales", seen);
	ane_set_free(&s);
	free(w), free(sc), free(tab), free(hist), free(q), free(want);
}

// a NaN, then an infinity, among a layer's weights (a copy of the model,
// one value of blk.0.attn_q.weight changed): int8 and lut4 kernels are
// refused with the weight named, and nothing is cached
static void
test_bad_weight(void)
{
	char path[600], dir[400], err[AD_ERRLEN];
	snprintf(path, sizeof path, "%s/bad-weight.gguf", t_tmpdir());
	const struct model_tensor *q = model_find_tensor(&model, "blk.0.attn_q.weight");
	REQUIRE(q && (q->type == AD_TYPE_F32 || q->type == AD_TYPE_F16), "blk.0.attn_q.weight: F32 or F16 expected");
	size_t len = 0;
	const uint8_t *map = gguf_file_map(model.gguf, &len, NULL);
	REQUIRE(map);
	const size_t el = q->type == AD_TYPE_F32 ? 4 : 2, at = 3 * (size_t)q->ne[0] + 5; // row 3, weight 5
	const off_t pos = (off_t)((const uint8_t *)q->data - map) + (off_t)(at * el);
	static const char *const what[2] = {"nan", "inf"};
	for (int v = 0; v < 2; v++) {
		copy_file(model_path, path);
		float f = v ? INFINITY : NAN;
		uint16_t h = ad_f32_to_fp16(f);
		int fd = open(path, O_RDWR);
		REQUIRE(fd >= 0);
		REQUIRE(pwrite(fd, el == 4 ? (const void *)&f : (const void *)&h, el, pos) == (ssize_t)el);
		close(fd);
		struct model m2;
		REQUIRE(model_load(&m2, path, err) == 0, "%s", err);
		for (int w = 0; w < 2; w++) {
			enum ane_wfmt wf = w ? ANE_W_LUT4 : ANE_W_INT8;
			make_dir(dir, sizeof dir, w ? "bad-lut4" : "bad-int8");
			struct ane_plan_opts po = {.width = W, .weights = wf};
			struct ane_build_opts bo = {.backend = "emu", .cache_dir = dir};
			struct ane_set s;
			err[0] = 0;
			int rc = ane_set_build(&s, &m2, &po, &bo, 0, err);
			CHECK(rc != 0, "%s weights with a %s weight were built", ane_wfmt_name(wf), what[v]);
			if (rc == 0) {
				ane_set_free(&s);
				continue;
			}
			CHECK(strstr(err, "weight 5 of") && strstr(err, what[v]), "%s, %s: %s", ane_wfmt_name(wf),
			      what[v], err);
			CHECK(count_entries(dir) == 0, "%s: a refused build left a cache entry", ane_wfmt_name(wf));
		}
		model_free(&m2);
	}
}

// int8 kernels: their int8 panels and fp32 scales come back from the entry,
// and every kernel gives the bits of an int8 compile without the cache
static void
test_int8_hit_is_identical(void)
{
	char dir[400], err[AD_ERRLEN];
	make_dir(dir, sizeof dir, "int8");
	struct ane_plan_opts po = {.width = W, .weights = ANE_W_INT8};
	struct ane_build_opts none = {.backend = "emu"};
	struct ane_set s;
	REQUIRE(ane_set_build(&s, &model, &po, &none, 0, err) == 0, "%s", err);
	size_t n8;
	uint16_t *ref8 = outputs(&s, &n8);
	REQUIRE(ref8);
	CHECK(n8 != ref_n || memcmp(ref8, ref_out, n8 * 2), "int8 outputs differ from fp16 ones");
	ane_set_free(&s);
	struct ane_build_opts bo = {.backend = "emu", .cache_dir = dir, .options = "weights=int8"};
	for (int round = 0; round < 2; round++) {
		REQUIRE(ane_set_build(&s, &model, &po, &bo, 0, err) == 0, "%s", err);
		CHECK(s.start.cache == (round ? ANE_CACHE_HIT : ANE_CACHE_MISS), "round %d: %s", round,
		      ane_cache_state_name(s.start.cache));
		size_t n;
		uint16_t *o = outputs(&s, &n);
		CHECK(o && n == n8 && !memcmp(o, ref8, n * 2),
		      "round %d: int8 outputs differ from a compile without the cache", round);
		free(o);
		struct emu_const c0, c1;
		REQUIRE(emu_kernel_const(s.k[0].ek, 0, &c0) == 0 && emu_kernel_const(s.k[0].ek, 1, &c1) == 0);
		CHECK(c0.kind == EMU_CONST_I8_PANELS && c1.kind == EMU_CONST_F16_SCALES, "kinds %d %d", c0.kind,
		      c1.kind);
		ane_set_free(&s);
	}
	CHECK(count_entries(dir) == 1);
	free(ref8);
}

// a miss whose entry is finished in the background: waited for, or by ane_set_free
static void
test_background_store(void)
{
	char dir[400];
	make_dir(dir, sizeof dir, "background");
	char err[AD_ERRLEN];
	for (int round = 0; round < 2; round++) {
		struct ane_set s;
		struct ane_plan_opts po = {.width = W, .split = round};
		_Atomic int stored = -1;
		struct ane_build_opts bo = {.backend = "emu",
		                            .cache_dir = dir,
		                            .options = "weights=fp16",
		                            .cache_background = 1,
		                            .stored = &stored};
		REQUIRE(ane_set_build(&s, &model, &po, &bo, 0, err) == 0, "%s", err);
		CHECK(s.start.cache == ANE_CACHE_MISS);
		if (round == 0) {
			check_same(&s, "serving while the entry is written");
			CHECK(ane_set_cache_wait(&s, NULL) == ANE_CACHE_MISS);
			// every kernel written, then one more for the commit
			CHECK(atomic_load(&stored) == s.plan.n + 1, "stored %d of %d", atomic_load(&stored), s.plan.n);
			CHECK(s.store == NULL && s.start.store_us > 0);
			CHECK(ane_set_cache_wait(&s, NULL) == ANE_CACHE_MISS, "twice");
		}
		ane_set_free(&s); // round 1: waits for the writer itself
		CHECK(count_entries(dir) == round + 1);
		REQUIRE(ane_set_build(&s, &model, &po, &bo, 0, err) == 0, "%s", err);
		CHECK(s.start.cache == ANE_CACHE_HIT && s.store == NULL, "%s", ane_cache_state_name(s.start.cache));
		if (round == 0)
			check_same(&s, "hit after a background store");
		ane_set_free(&s);
	}
}

// the writer paced (ane_build_opts.store_pace): nothing written while the
// pace says wait, the whole entry once it says go, and a hit after it
static _Atomic int pace_go, pace_asked;

static void
count_done(const struct kc_info *in, void *arg)
{
	*(int *)arg += !in->temporary;
}

static int
pace(void *arg)
{
	(void)arg;
	atomic_fetch_add(&pace_asked, 1);
	return atomic_load(&pace_go);
}

static void
test_paced_store(void)
{
	char dir[400];
	make_dir(dir, sizeof dir, "paced");
	char err[AD_ERRLEN];
	struct ane_set s;
	struct ane_plan_opts po = {.width = W};
	_Atomic int stored = 0;
	struct ane_build_opts bo = {.backend = "emu",
	                            .cache_dir = dir,
	                            .options = "weights=fp16",
	                            .cache_background = 1,
	                            .store_pace = pace,
	                            .stored = &stored};
	REQUIRE(ane_set_build(&s, &model, &po, &bo, 0, err) == 0, "%s", err);
	CHECK(s.start.cache == ANE_CACHE_MISS && s.store, "%s", ane_cache_state_name(s.start.cache));
	// the writer asks and waits, the kernels serve meanwhile
	for (int i = 0; i < 500 && atomic_load(&pace_asked) < 3; i++)
		usleep(10000);
	CHECK(atomic_load(&pace_asked) >= 3, "the writer asked its pace %d times", atomic_load(&pace_asked));
	check_same(&s, "serving while the writer waits");
	CHECK(atomic_load(&stored) == 0, "%d kernels written while the pace said wait", atomic_load(&stored));
	int done = 0;
	CHECK(kc_list(dir, count_done, &done, err) == 1 && done == 0, "%d entries finished: %s", done, err);
	atomic_store(&pace_go, 1);
	CHECK(ane_set_cache_wait(&s, NULL) == ANE_CACHE_MISS);
	CHECK(atomic_load(&stored) == s.plan.n + 1, "stored %d of %d", atomic_load(&stored), s.plan.n);
	ane_set_free(&s);
	CHECK(count_entries(dir) == 1);
	REQUIRE(ane_set_build(&s, &model, &po, &bo, 0, err) == 0, "%s", err);
	CHECK(s.start.cache == ANE_CACHE_HIT, "%s", ane_cache_state_name(s.start.cache));
	check_same(&s, "hit after a paced store");
	ane_set_free(&s);
}

static void
test_key_changes_miss(void)
{
	char dir[400];
	make_dir(dir, sizeof dir, "keys");
	struct ane_set s;
	REQUIRE(build(&s, dir, W, 0, "weights=fp16", 0, 0) == 0);
	ane_set_free(&s);
	struct {
		int width, split;
		const char *opt;
		const char *what;
	} v[] = {
		{W * 2, 0, "weights=fp16", "width"},
		{W, 1, "weights=fp16", "split"},
		{W, 0, "weights=int8", "weights type"},
	};
	for (int i = 0; i < 3; i++) {
		REQUIRE(build(&s, dir, v[i].width, v[i].split, v[i].opt, 0, 0) == 0);
		CHECK(s.start.cache == ANE_CACHE_MISS, "%s: %s", v[i].what, ane_cache_state_name(s.start.cache));
		ane_set_free(&s);
		CHECK(count_entries(dir) == 2 + i, "%s", v[i].what);
	}
	// each is a hit again
	for (int i = 0; i < 3; i++) {
		REQUIRE(build(&s, dir, v[i].width, v[i].split, v[i].opt, 0, 0) == 0);
		CHECK(s.start.cache == ANE_CACHE_HIT, "%s again: %s", v[i].what, ane_cache_state_name(s.start.cache));
		ane_set_free(&s);
	}
	// a touched model file: a new mtime
	struct timespec ts[2] = {{.tv_sec = 1000000000, .tv_nsec = 0}, {.tv_sec = 1000000000, .tv_nsec = 0}};
	REQUIRE(utimensat(AT_FDCWD, model_path, ts, 0) == 0);
	REQUIRE(build(&s, dir, W, 0, "weights=fp16", 0, 0) == 0);
	CHECK(s.start.cache == ANE_CACHE_MISS, "touched model: %s", ane_cache_state_name(s.start.cache));
	check_same(&s, "touched model");
	ane_set_free(&s);
	CHECK(count_entries(dir) == 5);
	// the digest sees content too: same size and mtime, other bytes
	char d1[256], d2[256], err[AD_ERRLEN];
	REQUIRE(kc_model_digest(&model, d1, sizeof d1, err) == 0, "%s", err);
	struct model m2;
	char other[600];
	snprintf(other, sizeof other, "%s/other.gguf", t_tmpdir());
	copy_file(model_path, other);
	REQUIRE(model_load(&m2, other, err) == 0, "%s", err);
	REQUIRE(utimensat(AT_FDCWD, other, ts, 0) == 0);
	REQUIRE(kc_model_digest(&m2, d2, sizeof d2, err) == 0, "%s", err);
	CHECK(!strcmp(d1, d2), "a byte-identical copy with the same mtime: the same digest\n%s\n%s", d1, d2);
	model_free(&m2);
	// one byte of a tensor's data changed, size and mtime kept: another digest
	size_t len = 0;
	const uint8_t *map = gguf_file_map(model.gguf, &len, NULL);
	REQUIRE(map);
	const struct model_tensor *big = NULL;
	for (int64_t i = 0; i < model.n_tensors; i++)
		if (model.tensors[i].name && (!big || model.tensors[i].nbytes > big->nbytes))
			big = &model.tensors[i];
	REQUIRE(big);
	off_t pos = (off_t)((const uint8_t *)big->data - map);
	int fd = open(other, O_RDWR);
	REQUIRE(fd >= 0);
	uint8_t b;
	REQUIRE(pread(fd, &b, 1, pos) == 1);
	b ^= 0x5a;
	REQUIRE(pwrite(fd, &b, 1, pos) == 1);
	close(fd);
	REQUIRE(utimensat(AT_FDCWD, other, ts, 0) == 0);
	REQUIRE(model_load(&m2, other, err) == 0, "%s", err);
	REQUIRE(kc_model_digest(&m2, d2, sizeof d2, err) == 0, "%s", err);
	model_free(&m2);
	CHECK(strcmp(d1, d2) != 0, "a changed byte of %s: the same digest %s", big->name, d1);
}

// patch a header field and its checksum (the layout of kcache.c's struct header)
static void
patch_format(const char *path, uint32_t format)
{
	int fd = open(path, O_RDWR);
	REQUIRE(fd >= 0);
	uint8_t h[72];
	REQUIRE(pread(fd, h, sizeof h, 0) == (ssize_t)sizeof h);
	memcpy(h + 8, &format, 4);
	memset(h + 64, 0, 8);
	uint64_t sum = kc_hash(h, sizeof h, 0x6864);
	memcpy(h + 64, &sum, 8);
	REQUIRE(pwrite(fd, h, sizeof h, 0) == (ssize_t)sizeof h);
	close(fd);
}

static void
corrupt_at(const char *path, off_t pos)
{
	int fd = open(path, O_RDWR);
	REQUIRE(fd >= 0);
	uint8_t b;
	REQUIRE(pread(fd, &b, 1, pos) == 1);
	b ^= 0xff;
	REQUIRE(pwrite(fd, &b, 1, pos) == 1);
	close(fd);
}

// a directory of that name holding one fp16 entry, and the entry's path
static void
stored_entry(const char *name, char *dir, size_t dcap, char *p, size_t pcap)
{
	make_dir(dir, dcap, name);
	struct ane_set s;
	REQUIRE(build(&s, dir, W, 0, "weights=fp16", 0, 0) == 0);
	ane_set_free(&s);
	entry_path(dir, p, pcap);
}

// every way a file can be damaged is found before the file is used, and the entry is rebuilt
static void
test_corrupt_rebuilt(void)
{
	char dir[400], p[600];
	stored_entry("corrupt", dir, sizeof dir, p, sizeof p);
	struct ane_set s;
	struct stat st;
	REQUIRE(stat(p, &st) == 0);
	const off_t size = st.st_size;
	enum { TRUNC_HALF, TRUNC_HEADER, EMPTY, MAGIC, HEADER_BYTE, TABLE_BYTE, DATA_START, FORMAT, DATA_MIDDLE, N };
	static const char *const what[N] = {"truncated to half",   "truncated in the header", "empty",
	                                    "bad magic",           "a header byte",           "a table byte",
	                                    "a buffer's 1st byte", "another format",          "a buffer's middle"};
	for (int c = 0; c < N; c++) {
		switch (c) {
		case TRUNC_HALF:
			REQUIRE(truncate(p, size / 2) == 0);
			break;
		case TRUNC_HEADER:
			REQUIRE(truncate(p, 40) == 0);
			break;
		case EMPTY:
			REQUIRE(truncate(p, 0) == 0);
			break;
		case MAGIC:
			corrupt_at(p, 0);
			break;
		case HEADER_BYTE:
			corrupt_at(p, 20);
			break;
		case TABLE_BYTE:
			corrupt_at(p, size - 9);
			break;
		case DATA_START:
			corrupt_at(p, KC_ALIGN);
			break;
		case FORMAT:
			patch_format(p, KC_FORMAT + 1);
			break;
		case DATA_MIDDLE:
			// the first buffer's middle: past its sampled ends, found by verify
			corrupt_at(p, KC_ALIGN + 4 * KC_ALIGN + 7);
			break;
		}
		REQUIRE(build(&s, dir, W, 0, "weights=fp16", 0, c == DATA_MIDDLE) == 0);
		CHECK(s.start.cache == ANE_CACHE_REBUILT, "%s: %s", what[c], ane_cache_state_name(s.start.cache));
		CHECK(s.start.cache_note[0] != 0, "%s: a reason", what[c]);
		check_same(&s, what[c]);
		ane_set_free(&s);
		REQUIRE(build(&s, dir, W, 0, "weights=fp16", 0, 1) == 0);
		CHECK(s.start.cache == ANE_CACHE_HIT, "%s, then: %s", what[c], ane_cache_state_name(s.start.cache));
		check_same(&s, what[c]);
		ane_set_free(&s);
		REQUIRE(stat(p, &st) == 0 && st.st_size == size);
	}
	CHECK(count_entries(dir) == 1);
}

static void
keep_info(const struct kc_info *in, void *arg)
{
	*(struct kc_info *)arg = *in;
}

// the listing tells an entry of another format from a damaged one
static void
test_list_format(void)
{
	char dir[400], p[600], err[AD_ERRLEN];
	stored_entry("listfmt", dir, sizeof dir, p, sizeof p);
	struct kc_info in;
	memset(&in, 0, sizeof in);
	REQUIRE(kc_list(dir, keep_info, &in, err) == 1, "%s", err);
	CHECK(in.valid && in.format == KC_FORMAT, "valid %d format %u", in.valid, in.format);
	patch_format(p, KC_FORMAT + 7);
	memset(&in, 0, sizeof in);
	REQUIRE(kc_list(dir, keep_info, &in, err) == 1, "%s", err);
	CHECK(!in.valid && in.format == KC_FORMAT + 7, "another format: valid %d format %u", in.valid, in.format);
	corrupt_at(p, 0); // the magic
	memset(&in, 0, sizeof in);
	REQUIRE(kc_list(dir, keep_info, &in, err) == 1, "%s", err);
	CHECK(!in.valid && in.format == 0, "no magic: valid %d format %u", in.valid, in.format);
}

// a writer that died mid-write leaves a temporary file that is never used
static void
test_crash_mid_write(void)
{
	char dir[400], p[600];
	make_dir(dir, sizeof dir, "crash");
	struct ane_set s;
	REQUIRE(build(&s, dir, W, 0, "weights=fp16", 0, 0) == 0);
	ane_set_free(&s);
	entry_path(dir, p, sizeof p);
	// a dead process's half-written copy in place of the entry
	pid_t pid = fork();
	if (pid == 0)
		_exit(0);
	REQUIRE(pid > 0 && waitpid(pid, NULL, 0) == pid);
	const char *name = strrchr(p, '/') + 1;
	char tmp[800];
	snprintf(tmp, sizeof tmp, "%s/.%s.tmp.%ld", dir, name, (long)pid);
	REQUIRE(rename(p, tmp) == 0);
	struct stat st;
	REQUIRE(stat(tmp, &st) == 0 && truncate(tmp, st.st_size / 3) == 0);
	CHECK(count_entries(dir) == 1, "listed, as temporary");
	REQUIRE(build(&s, dir, W, 0, "weights=fp16", 0, 0) == 0);
	CHECK(s.start.cache == ANE_CACHE_MISS, "the temporary file is not an entry: %s",
	      ane_cache_state_name(s.start.cache));
	check_same(&s, "after a crash");
	ane_set_free(&s);
	CHECK(access(tmp, F_OK) != 0, "the dead writer's file was removed");
	CHECK(access(p, F_OK) == 0, "the entry is back");
	// a writer of this process that never commits: nothing is found
	struct kc_key key;
	kc_key_init(&key);
	kc_key_add(&key, "test %d", 1);
	char err[AD_ERRLEN];
	REQUIRE(kc_key_finish(&key, err) == 0);
	struct kc_writer *w = kc_writer_new(dir, &key, 1, err);
	REQUIRE(w, "%s", err);
	uint8_t data[100] = {1, 2, 3};
	struct emu_const c = {.weight = 0, .kind = 99, .bytes = sizeof data, .data = data};
	REQUIRE(kc_writer_add(w, 0, 7, &c, 1, err) == 0, "%s", err);
	CHECK(kc_writer_add(w, 0, 7, &c, 1, err) == -1, "a kernel twice");
	struct kc_entry *e;
	CHECK(kc_load(dir, &key, 1, NULL, &e, err) == 0, "uncommitted: no entry");
	kc_writer_abort(w);
	// committed: found, with the bytes and kind as written
	w = kc_writer_new(dir, &key, 1, err);
	REQUIRE(w, "%s", err);
	REQUIRE(kc_writer_add(w, 0, 7, &c, 1, err) == 0, "%s", err);
	REQUIRE(kc_writer_commit(w, 0, err) == 0, "%s", err);
	REQUIRE(kc_load(dir, &key, 1, NULL, &e, err) == 1, "%s", err);
	const struct kc_kernel *k = kc_entry_kernel(e, 0);
	CHECK(k && k->mil_hash == 7 && k->nconsts == 1 && k->consts[0].kind == 99 &&
	      k->consts[0].bytes == sizeof data && !memcmp(k->consts[0].data, data, sizeof data));
	CHECK(kc_load(dir, &key, 2, NULL, &(struct kc_entry *){NULL}, err) == -1, "another kernel count");
	kc_entry_free(e);
	// a commit with a kernel missing stores nothing
	w = kc_writer_new(dir, &key, 2, err);
	REQUIRE(w);
	REQUIRE(kc_writer_add(w, 1, 7, &c, 1, err) == 0);
	CHECK(kc_writer_commit(w, 0, err) == -1, "kernel 0 never added");
	CHECK(kc_load(dir, &key, 2, NULL, &e, err) == 0);
	kc_key_free(&key);
}

// the bytes of file path on huge pages once mapped as kc_load maps it (at
// a 2 MiB-aligned address, MADV_HUGEPAGE) and read; -1 where unknown
static long long
mapped_huge(const char *path)
{
	int fd = open(path, O_RDONLY);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	size_t len = (size_t)st.st_size, huge = AD_HUGE_PAGE;
	uint8_t *r = mmap(NULL, len + huge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint8_t *a = (uint8_t *)(((uintptr_t)r + huge - 1) & ~(uintptr_t)(huge - 1));
	long long before = ad_huge_process_bytes(), h = -1;
	if (r != MAP_FAILED && mmap(a, len, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0) != MAP_FAILED) {
#ifdef MADV_HUGEPAGE
		madvise(a, len, MADV_HUGEPAGE);
#endif
		volatile uint8_t sink = 0;
		for (size_t i = 0; i < len; i += 4096)
			sink ^= a[i];
		(void)sink;
		long long after = ad_huge_process_bytes();
		h = before < 0 || after < 0 ? -1 : after - before;
	}
	if (r != MAP_FAILED)
		munmap(r, len + huge);
	close(fd);
	return h;
}

// buffers of every size, every byte as written, each on a page; and the
// file written so that its page cache maps as huge pages wherever the
// filesystem does so for a file written in whole 2 MiB blocks (a probe):
// the small buffers too, not only those of 2 MiB or more
static void
test_huge_buffers(void)
{
	char dir[400], err[AD_ERRLEN];
	make_dir(dir, sizeof dir, "huge");
	struct kc_key key;
	kc_key_init(&key);
	kc_key_add(&key, "huge %d", 1);
	REQUIRE(kc_key_finish(&key, err) == 0);
	const size_t huge = AD_HUGE_PAGE;
	enum { N = 12 };
	size_t sizes[N] = {100, 3 * huge + 5, 4096 + 1, huge, 300, 4095};
	for (int i = 6; i < N; i++)
		sizes[i] = 700000 + 4099 * (size_t)i; // a small model's weights
	uint8_t *d[N];
	struct emu_const c[N];
	size_t total = 0;
	for (int i = 0; i < N; i++) {
		REQUIRE((d[i] = malloc(sizes[i])));
		for (size_t j = 0; j < sizes[i]; j++)
			d[i][j] = (uint8_t)(j * 31 + (size_t)i);
		c[i] = (struct emu_const){.weight = i, .kind = 99, .bytes = sizes[i], .data = d[i]};
		total += sizes[i];
	}
	struct kc_writer *w = kc_writer_new(dir, &key, 1, err);
	REQUIRE(w, "%s", err);
	REQUIRE(kc_writer_add(w, 0, 7, c, N, err) == 0, "%s", err);
	REQUIRE(kc_writer_commit(w, 0, err) == 0, "%s", err);
	struct kc_entry *e;
	REQUIRE(kc_load(dir, &key, 1, NULL, &e, err) == 1, "%s", err);
	const struct kc_kernel *k = kc_entry_kernel(e, 0);
	REQUIRE(k && k->nconsts == N);
	for (int i = 0; i < N; i++) {
		uintptr_t a = (uintptr_t)k->consts[i].data;
		CHECK(k->consts[i].bytes == sizes[i] && !memcmp(k->consts[i].data, d[i], sizes[i]), "buffer %d", i);
		CHECK(a % KC_BUF_ALIGN == 0, "buffer %d (%zu bytes) on %d bytes", i, sizes[i], KC_BUF_ALIGN);
		// packed: each right after the one before, rounded up to KC_BUF_ALIGN
		if (i > 0) {
			const uint8_t *prev = k->consts[i - 1].data;
			size_t step = (sizes[i - 1] + KC_BUF_ALIGN - 1) / KC_BUF_ALIGN * KC_BUF_ALIGN;
			CHECK((const uint8_t *)k->consts[i].data == prev + step,
			      "buffer %d %td bytes after the one before, not %zu", i,
			      (const uint8_t *)k->consts[i].data - prev, step);
		}
		free(d[i]);
	}
	kc_entry_free(e);
	// the probe: a file of two blocks written whole
	char probe[600], p[600];
	snprintf(probe, sizeof probe, "%s/probe", dir);
	int fd = open(probe, O_CREAT | O_TRUNC | O_WRONLY, 0600);
	REQUIRE(fd >= 0);
	uint8_t *blk = calloc(1, huge);
	REQUIRE(blk);
	CHECK(pwrite(fd, blk, huge, 0) == (ssize_t)huge && pwrite(fd, blk, huge, (off_t)huge) == (ssize_t)huge);
	free(blk);
	close(fd);
	long long hp = mapped_huge(probe);
	entry_path(dir, p, sizeof p);
	long long he = mapped_huge(p);
	if (hp >= (long long)(2 * huge)) {
		// every whole block of the entry (the file is a little over total)
		CHECK(he >= (long long)(total / huge * huge), "%lld of %zu bytes on huge pages", he, total);
	} else {
		printf("test_huge_buffers: a file written in 2 MiB blocks maps %lld bytes of 4 MiB on huge pages "
		       "here: the entry's not checked\n",
		       hp);
	}
	unlink(probe);
	kc_key_free(&key);
}

static void
test_evict_and_clear(void)
{
	char dir[400], p[600];
	make_dir(dir, sizeof dir, "evict");
	struct ane_set s;
	REQUIRE(build(&s, dir, W, 0, "weights=fp16", 0, 0) == 0);
	ane_set_free(&s);
	entry_path(dir, p, sizeof p);
	struct stat st;
	REQUIRE(stat(p, &st) == 0);
	struct timespec old[2] = {{.tv_sec = 1500000000}, {.tv_sec = 1500000000}};
	REQUIRE(utimensat(AT_FDCWD, p, old, 0) == 0);
	// room for one and a half: storing a second evicts the older
	uint64_t bound = (uint64_t)st.st_size * 3 / 2;
	REQUIRE(build(&s, dir, W, 1, "weights=fp16", bound, 0) == 0);
	CHECK(s.start.cache == ANE_CACHE_MISS);
	ane_set_free(&s);
	CHECK(count_entries(dir) == 1);
	CHECK(access(p, F_OK) != 0, "the older entry went");
	// a bound below one entry keeps the new one
	REQUIRE(build(&s, dir, W, 0, "weights=fp16", 1, 0) == 0);
	ane_set_free(&s);
	CHECK(count_entries(dir) == 1);
	CHECK(access(p, F_OK) == 0, "the new entry stays");
	// a hit refreshes the age: of two, the one used last stays
	REQUIRE(build(&s, dir, W, 1, "weights=fp16", 0, 0) == 0); // miss, stored, newest
	ane_set_free(&s);
	REQUIRE(count_entries(dir) == 2);
	REQUIRE(utimensat(AT_FDCWD, p, old, 0) == 0);
	REQUIRE(build(&s, dir, W, 0, "weights=fp16", 0, 0) == 0); // hit: p is now the newest
	CHECK(s.start.cache == ANE_CACHE_HIT);
	ane_set_free(&s);
	char err[AD_ERRLEN];
	CHECK(kc_evict(dir, (uint64_t)st.st_size, NULL, err) == 1);
	CHECK(count_entries(dir) == 1 && access(p, F_OK) == 0, "the entry used last stays");
	// clear
	REQUIRE(build(&s, dir, W, 1, "weights=fp16", 0, 0) == 0);
	ane_set_free(&s);
	char tmp[700];
	snprintf(tmp, sizeof tmp, "%s/.x.kc.tmp.1", dir);
	FILE *f = fopen(tmp, "w");
	REQUIRE(f);
	fclose(f);
	REQUIRE(count_entries(dir) == 3);
	int files = 0;
	uint64_t bytes = 0;
	REQUIRE(kc_clear(dir, &files, &bytes, err) == 0, "%s", err);
	CHECK(files == 3 && bytes > (uint64_t)st.st_size, "%d files, %llu bytes", files, (unsigned long long)bytes);
	CHECK(count_entries(dir) == 0);
	char missing[500];
	snprintf(missing, sizeof missing, "%s/never-made", t_tmpdir());
	CHECK(kc_clear(missing, &files, &bytes, err) == 0 && files == 0, "clearing a missing directory");
	CHECK(kc_list(missing, NULL, NULL, err) == 0);
}

static void
test_off_and_unwritable(void)
{
	struct ane_set s;
	REQUIRE(build(&s, NULL, W, 0, NULL, 0, 0) == 0);
	CHECK(s.start.cache == ANE_CACHE_OFF);
	check_same(&s, "no cache");
	ane_set_free(&s);
	REQUIRE(build(&s, "", W, 0, NULL, 0, 0) == 0);
	CHECK(s.start.cache == ANE_CACHE_OFF);
	ane_set_free(&s);
	// a directory that cannot be made (under a regular file): compiled, not stored
	char file[400], dir[500];
	snprintf(file, sizeof file, "%s/plain-file", t_tmpdir());
	FILE *f = fopen(file, "w");
	REQUIRE(f);
	fclose(f);
	snprintf(dir, sizeof dir, "%s/cache", file);
	REQUIRE(build(&s, dir, W, 0, "weights=fp16", 0, 0) == 0);
	CHECK(s.start.cache == ANE_CACHE_NOT_STORED, "%s", ane_cache_state_name(s.start.cache));
	CHECK(strstr(s.start.cache_note, "not cached") != NULL && !strstr(s.start.cache_note, "unusable"), "%s",
	      s.start.cache_note);
	check_same(&s, "unwritable cache");
	ane_set_free(&s);
	char line[300];
	ane_start_describe(&(struct ane_start){.cache = ANE_CACHE_HIT, .total_us = 1500}, line, sizeof line);
	CHECK(strstr(line, "cache hit") && strstr(line, "total 1.5 ms"), "%s", line);
}

// the kernels' buffers of two builds of one plan that differ (a kernel
// without any counts as one); *nconst counts the buffers compared
static int
consts_differ(const struct ane_set *x, const struct ane_set *y, int *nconst)
{
	int bad = 0;
	for (int i = 0; i < x->plan.n; i++) {
		struct emu_kernel *a = x->k[i].ek, *b = y->k[i].ek;
		int n = emu_kernel_nconsts(a);
		bad += n != emu_kernel_nconsts(b) || n == 0;
		for (int j = 0; j < n; j++, (*nconst)++) {
			struct emu_const ca, cb;
			bad += emu_kernel_const(a, j, &ca) || emu_kernel_const(b, j, &cb) || ca.kind != cb.kind ||
			       ca.bytes != cb.bytes || memcmp(ca.data, cb.data, ca.bytes);
		}
	}
	return bad;
}

// the emu's kernels compiled from blobs in memory (its way) and from blob
// files (the ane backend's): the same buffers, byte for byte, fp16 and
// int8, whole and split FFNs
static void
test_blob_files_same(void)
{
	char err[AD_ERRLEN];
	for (int c = 0; c < 4; c++) {
		struct ane_plan_opts po = {.width = W, .split = c & 1, .weights = c & 2 ? ANE_W_INT8 : ANE_W_FP16};
		struct ane_set s[2];
		for (int f = 0; f < 2; f++) {
			struct ane_build_opts bo = {.backend = "emu", .blob_files = f};
			REQUIRE(ane_set_build(&s[f], &model, &po, &bo, 0, err) == 0, "%s", err);
		}
		REQUIRE(s[0].plan.n == s[1].plan.n && s[0].plan.n > 0);
		int nconst = 0, bad = consts_differ(&s[0], &s[1], &nconst);
		CHECK(bad == 0, "case %d: %d of %d buffers differ", c, bad, nconst);
		CHECK(s[0].start.blob_us > 0 && s[1].start.blob_us > 0);
		ane_set_free(&s[0]);
		ane_set_free(&s[1]);
	}
}

// int8 blobs are quantised in tasks on the builder's pool, a block of
// rows dequantised and quantised per task: the kernels' buffers are the
// same bytes on one thread and on three (uneven tasks), for a model stored
// in F32, in Q8_0 and in Q4_K
static void
test_i8_threads_same(void)
{
	char err[AD_ERRLEN];
	static const char *const files[] = {"llama256_q8_0.gguf", "llama256_q4_k.gguf", NULL};
	for (int fi = 0; fi < 3; fi++) {
		struct model m2 = {0}, *mp = &model;
		if (files[fi]) {
			char path[300];
			snprintf(path, sizeof path, MODELS "%s", files[fi]);
			REQUIRE(model_load(&m2, path, err) == 0, "%s", err);
			mp = &m2;
		}
		struct ane_plan_opts po = {.width = W, .weights = ANE_W_INT8};
		struct ane_set s[2];
		for (int t = 0; t < 2; t++) {
			struct ane_build_opts bo = {.backend = "emu", .threads = t ? 3 : 1};
			REQUIRE(ane_set_build(&s[t], mp, &po, &bo, 0, err) == 0, "%s", err);
		}
		REQUIRE(s[0].plan.n == s[1].plan.n && s[0].plan.n > 0);
		int nconst = 0, bad = consts_differ(&s[0], &s[1], &nconst);
		CHECK(bad == 0, "%s: %d of %d buffers differ between 1 and 3 threads", files[fi] ? files[fi] : "qwen2",
		      bad, nconst);
		ane_set_free(&s[0]);
		ane_set_free(&s[1]);
		if (mp == &m2)
			model_free(&m2);
	}
}

// the emu side: buffers listed, compiled again from them, refused when wrong
static void
test_emu_packed(void)
{
	char err[AD_ERRLEN];
	struct emu *e = emu_open(&(struct emu_opts){.threads = 1}, err);
	REQUIRE(e, "%s", err);
	struct ane_builder *b = ane_builder_new(NULL, err);
	REQUIRE(b, "%s", err);
	struct ane_kernel k;
	REQUIRE(ane_build_probe(b, 40, W, 5, &k, err) == 0, "%s", err);
	REQUIRE(emu_kernel_nconsts(k.ek) == 1);
	struct emu_const c;
	REQUIRE(emu_kernel_const(k.ek, 0, &c) == 0);
	CHECK(c.kind == EMU_CONST_F16_PANELS && c.bytes == emu_panel_bytes(40, 40) && c.weight == 0);
	CHECK(emu_kernel_const(k.ek, 1, &c) == -1 && emu_kernel_const(k.ek, -1, &c) == -1);
	REQUIRE(emu_kernel_const(k.ek, 0, &c) == 0);
	char *mil = ane_mil_proj(40, 40, W, err);
	REQUIRE(mil, "%s", err);
	struct emu_kernel *p = emu_compile_packed(e, mil, &c, 1, err);
	REQUIRE(p, "%s", err);
	CHECK(emu_weight_bytes(p) == emu_weight_bytes(k.ek));
	size_t ni = emu_input_capacity(p) / 2, no = emu_output_capacity(p);
	uint16_t *in = malloc(ni * 2), *o1 = calloc(1, no), *o2 = calloc(1, no);
	REQUIRE(in && o1 && o2);
	for (size_t i = 0; i < ni; i++)
		in[i] = ad_f32_to_fp16(frand());
	const void *ip = in;
	void *op1 = o1, *op2 = o2;
	CHECK(emu_eval(k.ek, &ip, &op1, W, err) == 0, "%s", err);
	CHECK(emu_eval(p, &ip, &op2, W, err) == 0, "%s", err);
	CHECK(!memcmp(o1, o2, no), "packed compile gives the same outputs");
	free(in);
	free(o1);
	free(o2);
	emu_kernel_free(p);
	// wrong: size, alignment, kind, missing, bad list
	struct emu_const bad = c;
	bad.bytes -= 2;
	CHECK(!emu_compile_packed(e, mil, &bad, 1, err) && strstr(err, "bytes"), "%s", err);
	bad = c;
	bad.data = (const uint8_t *)c.data + 2;
	CHECK(!emu_compile_packed(e, mil, &bad, 1, err) && strstr(err, "aligned"), "%s", err);
	bad = c;
	bad.kind = 77;
	CHECK(!emu_compile_packed(e, mil, &bad, 1, err) && strstr(err, "no packed constant"), "%s", err);
	CHECK(!emu_compile_packed(e, mil, NULL, 0, err) && strstr(err, "no packed constant"), "%s", err);
	CHECK(!emu_compile_packed(e, mil, NULL, 3, err), "a count without a list");
	// the program is still checked
	CHECK(!emu_compile_packed(e, "program(1.0)", &c, 1, err), "a bad program");
	free(mil);
	ane_kernel_free(&k);
	ane_builder_free(b);
	emu_close(e);
}

static void
test_default_dir(void)
{
	char d[600];
	setenv("ANEDVD_CACHE_DIR", "/x/y", 1);
	CHECK(kc_default_dir(d, sizeof d) == 0 && !strcmp(d, "/x/y"), "%s", d);
	unsetenv("ANEDVD_CACHE_DIR");
	setenv("XDG_CACHE_HOME", "/c", 1);
	CHECK(kc_default_dir(d, sizeof d) == 0 && !strcmp(d, "/c/anedvd"), "%s", d);
	setenv("XDG_CACHE_HOME", "relative", 1); // the spec: ignored unless absolute
	setenv("HOME", "/home/u", 1);
	CHECK(kc_default_dir(d, sizeof d) == 0 && !strcmp(d, "/home/u/.cache/anedvd"), "%s", d);
	unsetenv("XDG_CACHE_HOME");
	unsetenv("HOME");
	CHECK(kc_default_dir(d, sizeof d) == -1);
	// the hash: stable, and every byte counts
	uint8_t buf[100];
	for (int i = 0; i < 100; i++)
		buf[i] = (uint8_t)i;
	uint64_t h = kc_hash(buf, sizeof buf, 1);
	CHECK(h == kc_hash(buf, sizeof buf, 1) && h != kc_hash(buf, sizeof buf, 2));
	for (int i = 0; i < 100; i++) {
		buf[i] ^= 1;
		CHECK(kc_hash(buf, sizeof buf, 1) != h, "byte %d", i);
		buf[i] ^= 1;
	}
}

int
main(void)
{
	snprintf(model_path, sizeof model_path, "%s/model.gguf", t_tmpdir());
	copy_file(MODELS "qwen2.gguf", model_path);
	char err[AD_ERRLEN];
	if (model_load(&model, model_path, err)) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	struct ane_set s;
	if (build(&s, NULL, W, 0, NULL, 0, 0))
		return 1;
	ref_out = outputs(&s, &ref_n);
	ane_set_free(&s);
	T_RUN(test_emu_packed);
	T_RUN(test_blob_files_same);
	T_RUN(test_i8_threads_same);
	T_RUN(test_hit_is_identical);
	T_RUN(test_int8_hit_is_identical);
	T_RUN(test_bad_weight);
	T_RUN(test_l4_quantiser);
	T_RUN(test_background_store);
	T_RUN(test_paced_store);
	T_RUN(test_key_changes_miss);
	T_RUN(test_corrupt_rebuilt);
	T_RUN(test_list_format);
	T_RUN(test_crash_mid_write);
	T_RUN(test_huge_buffers);
	T_RUN(test_evict_and_clear);
	T_RUN(test_off_and_unwritable);
	T_RUN(test_default_dir);
	free(ref_out);
	model_free(&model);
	return t_done();
}
