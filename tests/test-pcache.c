// test-pcache.c - the prefix cache: blocks of KV rows shared by every
// request, exact on a hit.
//
// The cache alone (prefix-cache.c): chained lookups that stop at the first
// block not stored, a block found only after the same parent and the same
// tokens (blocks of one token land many to a hash bucket: the tokens are
// compared, not just the hash), pinned blocks never evicted, parents not
// before their children, the LRU order, the bound, --cache-mem sizes.
//
// Exactness against a cold prefill, with kb_exact, on stories260K and the
// llama, qwen2 and gemma2 / gemma3 fixtures (gemma's window of 6 covers
// only part of a block): a sequence whose first h positions are copied
// from cached blocks (h at a block boundary and mid-block) and the rest fed
// in chunks of 7 (crossing the 16-position blocks, at other offsets than
// the cold run's) gives every following row of logits bit for bit.
//
// The windowed part apart (gemma2/3's sliding layers, lfm2's ShortConv
// rows, gemma4): with it dropped from the first two blocks, hits whose
// window lies past them are still bit-exact, and one that reads a dropped
// row by one position is not (so the scheduler's cut is needed).
//
// Through the scheduler (stories260K, gemma2, qwen2; blocks of 16): a repeated prompt
// reports the cached tokens and gives the same tokens, logprobs and top
// logits as its cold run; a prompt that shares a prefix reuses its whole
// blocks and the start of the next; n jobs on one prompt submitted
// together all reuse the first one's blocks and the rest of its running
// sequence, and agree; generated tokens are stored for the next turn; a
// session job takes the cache's rows beyond its own; with a bound of three
// blocks (jobs running together, then one at a time) the cache evicts and
// stays exact; every pin is released. With windowed layers (gemma2,
// gemma3, lfm2): a finished job keeps the windowed part only before where a
// prompt may leave its chain (bytes counted), a prompt leaving inside the
// dropped part is cut back and restores it, the branch it made hits in
// full, a session whose window would read dropped rows starts over; every
// reply bit for bit the cold run's (dropping the cut, or the session rule,
// fails this).
#include <pthread.h>
#include <stdint.h>

#include "engine.h"
#include "kernels.h"
#include "model.h"
#include "prefix-cache.h"
#include "scheduler.h"
#include "t.h"

#pragma GCC diagnostic ignored "-Wformat-zero-length"

#define STORIES T_DATA "/stories260K/stories260K.gguf"
#define FIX(n) T_DATA "/models/" n ".gguf"
#define FIX2(n) T_DATA "/models2/" n ".gguf"

static void
test_cache_alone(void)
{
	char err[AD_ERRLEN] = "";
	CHECK(pcache_new(0, 8, 0, 0, 100, err) == NULL && strstr(err, "block"), "%s", err);
	CHECK(pcache_new(16, 0, 0, 0, 100, err) == NULL && strstr(err, "rows"), "%s", err);
	struct pcache *st_only = pcache_new(16, 0, 0, 64, 100, err); // every layer recurrent: states only
	CHECK(st_only, "%s", err);
	pcache_free(st_only);
	// blocks of 1 token, rows of 4 bytes, room for 4 blocks
	struct pcache *c = pcache_new(1, 4, 0, 0, 16, err);
	REQUIRE(c, "%s", err);
	const int32_t a[] = {5, 6, 7, 8, 9};
	struct pcache_block *pins[8] = {0};
	void *fill;
	int hit;
	CHECK(pcache_match(c, a, 5, pins, 8, &hit) == 0 && hit == 0);
	for (int i = 0; i < 3; i++) {
		pins[i] = pcache_add(c, i ? pins[i - 1] : NULL, a + i, &fill, NULL);
		REQUIRE(pins[i] && fill);
		memcpy(fill, &(int32_t){100 + i}, 4);
	}
	// the same block again: found, not filled
	struct pcache_block *again = pcache_add(c, pins[0], a + 1, &fill, NULL);
	CHECK(again == pins[1] && fill == NULL);
	pcache_release(c, &again, 1);
	pcache_release(c, pins, 3);
	struct pcache_block *got[8];
	CHECK(pcache_match(c, a, 5, got, 8, &hit) == 3);
	int32_t v;
	memcpy(&v, pcache_rows(got[2]), 4);
	CHECK(v == 102);
	pcache_release(c, got, 3);
	// the same tokens after another parent are another prefix
	const int32_t b[] = {6, 7};
	CHECK(pcache_match(c, b, 2, got, 8, &hit) == 0);
	// a prefix that differs in its second token stops at the first block
	const int32_t d[] = {5, 9, 7};
	CHECK(pcache_match(c, d, 3, got, 8, &hit) == 1);
	// got[0] pinned: fill the cache, then every block is pinned or a parent
	struct pcache_block *x = pcache_add(c, got[0], d + 1, &fill, NULL); // 4th block: fits
	CHECK(x && fill);
	struct pcache_block *y = pcache_add(c, x, d + 2, &fill, NULL); // 5th: [5,6,7]'s leaf goes
	CHECK(y && fill);
	struct pcache_stats st;
	pcache_stats(c, &st);
	CHECK(st.blocks == 4 && st.evictions == 1 && st.bytes == 16 && st.pinned == 3, "%d %llu %zu %d", st.blocks,
	      (unsigned long long)st.evictions, st.bytes, st.pinned);
	CHECK(pcache_match(c, a, 5, got + 1, 7, &hit) == 2, "the leaf 7 was evicted, not 5 or 6");
	pcache_release(c, got + 1, 2);
	// [5,6] is an unpinned leaf now: it goes
	struct pcache_block *z = pcache_add(c, y, a + 4, &fill, NULL);
	CHECK(z && fill);
	// [5] [5,9] [5,9,7] [5,9,7,9] are pinned or parents: no room
	struct pcache_block *w = pcache_add(c, z, a + 3, &fill, NULL);
	CHECK(w == NULL && fill == NULL);
	// z unpinned is a leaf: it goes for a child of x
	pcache_release(c, &z, 1);
	w = pcache_add(c, x, a + 3, &fill, NULL);
	CHECK(w && fill);
	CHECK(pcache_match(c, (const int32_t[]){5, 9, 7, 9}, 4, got + 1, 7, &hit) == 3 && hit == 3);
	pcache_release(c, got + 1, 3);
	pcache_stats(c, &st);
	CHECK(st.full == 1 && st.evictions == 3 && st.lookups == 6 && st.blocks == 4, "%llu %llu %llu",
	      (unsigned long long)st.full, (unsigned long long)st.evictions, (unsigned long long)st.lookups);
	struct pcache_block *rel[] = {w, y, x, got[0]};
	pcache_release(c, rel, 4);
	pcache_stats(c, &st);
	CHECK(st.pinned == 0);
	pcache_free(c);

	// blocks of 4: a hit may end inside a block
	REQUIRE((c = pcache_new(4, 4, 0, 0, 1 << 10, err)), "%s", err);
	const int32_t e[] = {1, 2, 3, 4, 5, 6, 7, 8};
	for (int i = 0; i < 2; i++) {
		pins[i] = pcache_add(c, i ? pins[0] : NULL, e + 4 * i, &fill, NULL);
		REQUIRE(pins[i] && fill);
	}
	pcache_release(c, pins, 2);
	CHECK(pcache_match(c, (const int32_t[]){1, 2, 3, 4, 5, 6, 9}, 7, got, 8, &hit) == 2 && hit == 6, "%d", hit);
	pcache_release(c, got, 2);
	CHECK(pcache_match(c, (const int32_t[]){1, 2, 9}, 3, got, 8, &hit) == 1 && hit == 2 && got[0] == pins[0]);
	pcache_release(c, got, 1);
	CHECK(pcache_match(c, e, 8, got, 1, &hit) == 1 && hit == 4, "max blocks: %d", hit);
	pcache_release(c, got, 1);
	CHECK(pcache_match(c, (const int32_t[]){7}, 1, got, 8, &hit) == 0 && hit == 0);
	pcache_stats(c, &st);
	CHECK(st.pinned == 0 && st.hit_tokens == 12);
	pcache_free(c);

	// a windowed part: stored with the block, dropped unless kept, given
	// back by a later store, counted in the bytes
	REQUIRE((c = pcache_new(2, 4, 8, 0, 1 << 10, err)), "%s", err);
	void *wfill;
	pins[0] = pcache_add(c, NULL, e, &fill, &wfill);
	REQUIRE(pins[0] && fill && wfill);
	memset(wfill, 7, 16);
	pins[1] = pcache_add(c, pins[0], e + 2, &fill, NULL); // no windowed rows given: none kept
	REQUIRE(pins[1] && fill);
	CHECK(pcache_wrows(c, pins[0]) != NULL && pcache_wrows(c, pins[1]) == NULL);
	pcache_stats(c, &st);
	CHECK(st.bytes == 8 + 16 + 8, "%zu", st.bytes);
	CHECK(pcache_children(c, pins[0]) == 1 && pcache_children(c, pins[1]) == 0);
	pcache_window(c, pins[0], 1); // kept: dropping it does nothing
	pcache_window(c, pins[0], 0);
	CHECK(pcache_wrows(c, pins[0]) != NULL);
	pcache_window(c, pins[1], 0); // nothing to drop
	struct pcache_block *again2 = pcache_add(c, pins[0], e + 2, &fill, &wfill);
	CHECK(again2 == pins[1] && fill == NULL && wfill != NULL, "a stored block without its part takes it back");
	memset(wfill, 9, 16);
	pcache_release(c, &again2, 1);
	pcache_window(c, pins[1], 0);
	pcache_stats(c, &st);
	CHECK(pcache_wrows(c, pins[1]) == NULL && st.wdropped == 1 && st.bytes == 8 + 16 + 8, "%llu %zu",
	      (unsigned long long)st.wdropped, st.bytes);
	pcache_release(c, pins, 2);
	pcache_free(c);

	size_t m;
	CHECK(pcache_parse_mem("256", &m) == 0 && m == 256u << 20);
	CHECK(pcache_parse_mem("64K", &m) == 0 && m == 64u << 10);
	CHECK(pcache_parse_mem("2GiB", &m) == 0 && m == (size_t)2 << 30);
	CHECK(pcache_parse_mem("1.5M", &m) == 0 && m == 3u << 19);
	CHECK(pcache_parse_mem("0", &m) == 0 && m == 0);
	CHECK(pcache_parse_mem("-1", &m) == -1);
	CHECK(pcache_parse_mem("12X", &m) == -1);
	CHECK(pcache_parse_mem("", &m) == -1);
	CHECK(pcache_default_mem(100, 0, 2048, 4) == 100u * 2048 * 4);
	CHECK(pcache_default_mem(100, 0, 2048, 1) == 100u * 2048 * 4);
	CHECK(pcache_default_mem(100, 0, 256, 8) == 100u * 256 * 8);
	CHECK(pcache_default_mem(100, 1000, 256, 8) == (100u * 256 + 4000) * 8);
}

// feed ids[from..to) to s in chunks of w columns; the logits of each
// position into out (rows indexed by position)
static void
feed(struct engine *e, struct engine_seq *s, const int32_t *ids, int from, int to, int w, float *out)
{
	char err[AD_ERRLEN] = "";
	const int V = engine_n_vocab(e);
	for (int p = from; p < to;) {
		int n = to - p < w ? to - p : w;
		struct engine_seq *cols[8];
		for (int i = 0; i < n; i++)
			cols[i] = s;
		REQUIRE(engine_forward(e, cols, ids + p, n, NULL, out ? out + (size_t)p * V : NULL, 1, err) == 0, "%s",
		        err);
		p += n;
	}
}

static int
rows_same(const float *a, const float *b, int from, int to, int V)
{
	return memcmp(a + (size_t)from * V, b + (size_t)from * V, (size_t)(to - from) * V * sizeof *a) == 0;
}

// cold logits of every position vs a sequence started from cached blocks
static void
check_exact(const char *path)
{
	char err[AD_ERRLEN] = "";
	struct model m;
	REQUIRE(model_load(&m, path, err) == 0, "%s", err);
	const int W = 7, B = 16, N = 53;
	struct kb_opts ko = {.width = W, .threads = 1};
	struct kernel_backend *kb = kb_exact_new(&m, &ko, err);
	REQUIRE(kb, "%s", err);
	struct engine_opts eo = {.max_seq = 128};
	struct engine *e = engine_new(&m, kb, &eo, err);
	REQUIRE(e, "%s", err);
	const int V = engine_n_vocab(e);
	int32_t ids[64];
	for (int i = 0; i < N; i++)
		ids[i] = 1 + (i * 37 + 11) % (V - 1);
	float *cold = malloc((size_t)N * V * sizeof *cold), *warm = malloc((size_t)N * V * sizeof *warm);
	struct engine_seq *a = engine_seq_new(e, err), *q = engine_seq_new(e, err);
	REQUIRE(cold && warm && a && q, "%s", err);
	REQUIRE(engine_eval(e, a, ids, N, 0, cold, err) == 0, "%s", err);
	struct pcache *c = pcache_new(B, engine_kv_row_bytes(e), 0, engine_state_bytes(e), 1 << 24, err);
	REQUIRE(c, "%s", err);
	struct pcache_block *pins[8];
	int np = 0;
	for (; (np + 1) * B <= N; np++) {
		void *fill;
		pins[np] = pcache_add(c, np ? pins[np - 1] : NULL, ids + np * B, &fill, NULL);
		REQUIRE(pins[np] && fill);
		engine_seq_kv_read(a, np * B, B, fill);
	}
	CHECK(np == 3);
	const int hits[] = {16, 21, 32, 37, 47, 48};
	for (size_t k = 0; k < sizeof hits / sizeof *hits; k++) {
		int h = hits[k];
		struct pcache_block *got[8];
		int hit, nb = pcache_match(c, ids, N, got, 8, &hit);
		CHECK(nb == 3 && hit == 48);
		engine_seq_reset(q);
		for (int from = 0; from < h;) {
			int off = from % B, n = h - from < B - off ? h - from : B - off;
			REQUIRE(engine_seq_kv_append(q, ids + from, n, pcache_rows(got[from / B]), B, off, err) == 0,
			        "%s", err);
			from += n;
		}
		pcache_release(c, got, nb);
		CHECK(engine_seq_len(q) == h && memcmp(engine_seq_tokens(q), ids, (size_t)h * sizeof *ids) == 0);
		feed(e, q, ids, h, N, W, warm);
		CHECK(rows_same(warm, cold, h, N, V),
		      "%s: the logits after a hit of %d positions differ from a cold prefill", path, h);
	}
	// the windowed part apart (engine_kv_window): blocks 0 and 1 without it.
	// A hit whose window starts at block 2 is exact; one whose window reaches
	// back one row into block 1 would read a row never restored (which is
	// why the scheduler cuts such a hit), and the logits show it
	const int win = engine_kv_window(e);
	if (win > 0 && win < B) {
		const size_t fb = engine_kv_part_bytes(e, ENGINE_KV_FULL),
			     wb = engine_kv_part_bytes(e, ENGINE_KV_WINDOWED);
		CHECK(wb > 0 && fb + wb == engine_kv_row_bytes(e));
		struct pcache *cw = pcache_new(B, fb, wb, 0, 1 << 24, err);
		REQUIRE(cw, "%s", err);
		struct pcache_block *wp[8];
		for (int i = 0; i < np; i++) {
			void *fill, *wfill;
			wp[i] = pcache_add(cw, i ? wp[i - 1] : NULL, ids + i * B, &fill, &wfill);
			REQUIRE(wp[i] && fill && wfill);
			engine_seq_kv_read_parts(a, ENGINE_KV_FULL, i * B, B, fill);
			engine_seq_kv_read_parts(a, ENGINE_KV_WINDOWED, i * B, B, wfill);
		}
		pcache_window(cw, wp[0], 0);
		pcache_window(cw, wp[1], 0);
		// position p reads the windowed rows p - win + 1 .. p
		const int wh[] = {2 * B + win - 1, 2 * B + win + 3, 3 * B, 2 * B + win - 2};
		for (size_t k = 0; k < sizeof wh / sizeof *wh; k++) {
			const int h = wh[k];
			engine_seq_free(q);
			REQUIRE((q = engine_seq_new(e, err)), "%s", err);
			for (int from = 0; from < h;) {
				int i = from / B, off = from % B, n = h - from < B - off ? h - from : B - off;
				const void *w = pcache_wrows(cw, wp[i]);
				REQUIRE(engine_seq_kv_append_parts(q, ENGINE_KV_FULL, ids + from, n, pcache_rows(wp[i]),
				                                   B, off, err) == 0,
				        "%s", err);
				if (w)
					REQUIRE(engine_seq_kv_write(q, ENGINE_KV_WINDOWED, from, n, w, B, off, err) ==
					                0,
					        "%s", err);
				from += n;
			}
			feed(e, q, ids, h, N, W, warm);
			int same = rows_same(warm, cold, h, N, V);
			if (h >= 2 * B + win - 1)
				CHECK(same,
				      "%s: a hit of %d with the windowed rows of blocks 0 and 1 dropped is not exact",
				      path, h);
			else
				CHECK(!same, "%s: a hit of %d read dropped rows and still agreed", path, h);
		}
		// write within the length only
		CHECK(engine_seq_kv_write(q, ENGINE_KV_WINDOWED, engine_seq_len(q) - 1, 2, pcache_rows(wp[0]), B, 0,
		                          err) == -1 &&
		              strstr(err, "kv write"),
		      "%s", err);
		pcache_release(cw, wp, np);
		pcache_free(cw);
	}
	// rows that do not fit, and a bad token, are refused
	CHECK(engine_seq_kv_append(q, ids, 17, pcache_rows(pins[0]), B, 0, err) == -1 && strstr(err, "block"), "%s",
	      err);
	int32_t bad = V;
	engine_seq_reset(q);
	CHECK(engine_seq_kv_append(q, &bad, 1, pcache_rows(pins[0]), B, 0, err) == -1 && strstr(err, "vocabulary"),
	      "%s", err);
	CHECK(engine_seq_len(q) == 0);
	pcache_release(c, pins, np);
	pcache_free(c);
	engine_seq_free(a);
	engine_seq_free(q);
	free(cold);
	free(warm);
	engine_free(e);
	kb->free(kb);
	model_free(&m);
}

// sequences forked from another (n choices on one prompt) read the rows
// they share from its store: their logits are a cold run's to the bit, the
// parent going on with other tokens, truncated below the shared rows and
// rewriting them (it copies first), or freed changes nothing for them; a
// fork of a fork shares the first parent's rows and copies its own
static void
check_fork(const char *path)
{
	char err[AD_ERRLEN] = "";
	struct model m;
	REQUIRE(model_load(&m, path, err) == 0, "%s", err);
	const int W = 7, N = 53;
	struct kb_opts ko = {.width = W, .threads = 1};
	struct kernel_backend *kb = kb_exact_new(&m, &ko, err);
	REQUIRE(kb, "%s", err);
	struct engine_opts eo = {.max_seq = 128};
	struct engine *e = engine_new(&m, kb, &eo, err);
	REQUIRE(e, "%s", err);
	const int V = engine_n_vocab(e);
	int32_t ids[64], other[64];
	for (int i = 0; i < N; i++) {
		ids[i] = 1 + (i * 37 + 11) % (V - 1);
		other[i] = 1 + (i * 53 + 5) % (V - 1);
	}
	float *cold = malloc((size_t)N * V * sizeof *cold), *x = malloc((size_t)N * V * sizeof *x);
	struct engine_seq *par = engine_seq_new(e, err), *c1 = engine_seq_new(e, err), *c2 = engine_seq_new(e, err),
			  *g = engine_seq_new(e, err);
	REQUIRE(cold && x && par && c1 && c2 && g, "%s", err);
	REQUIRE(engine_eval(e, par, ids, N, 0, cold, err) == 0, "%s", err);
	engine_seq_reset(par);
	feed(e, par, ids, 0, 40, W, NULL);
	REQUIRE(engine_seq_fork(c1, par, 37, err) == 0, "%s", err);
	REQUIRE(engine_seq_fork(c2, par, 40, err) == 0, "%s", err);
	CHECK(engine_seq_shared(c1) == 37 && engine_seq_len(c1) == 37 && engine_seq_shared(par) == 0);
	CHECK(!memcmp(engine_seq_tokens(c1), ids, 37 * sizeof *ids));
	// the parent goes on with other tokens, then is cut below what they
	// share and rewrites it
	feed(e, par, other, 40, 50, W, NULL);
	feed(e, c1, ids, 37, N, W, x);
	CHECK(rows_same(x, cold, 37, N, V), "%s: a fork's logits differ from a cold run's", path);
	engine_seq_truncate(par, 20);
	feed(e, par, other, 20, 45, W, NULL);
	feed(e, c2, ids, 40, N, 3, x);
	CHECK(rows_same(x, cold, 40, N, V), "%s: a fork after its parent rewrote the rows it shares", path);
	// a fork of the fork: the first parent's rows shared, c1's own copied
	REQUIRE(engine_seq_fork(g, c1, 45, err) == 0, "%s", err);
	CHECK(engine_seq_shared(g) == 37);
	engine_seq_free(par);
	engine_seq_free(c1);
	feed(e, g, ids, 45, N, W, x);
	CHECK(rows_same(x, cold, 45, N, V), "%s: a fork of a fork, its parents freed", path);
	// the rows a fork shares read back as its own
	size_t rb = engine_kv_row_bytes(e);
	uint8_t *r1 = malloc(rb * 8), *r2 = malloc(rb * 8);
	struct engine_seq *fresh = engine_seq_new(e, err);
	REQUIRE(r1 && r2 && fresh, "%s", err);
	feed(e, fresh, ids, 0, 48, W, NULL);
	engine_seq_kv_read(fresh, 33, 8, r1); // 33..40: both sides of g's split
	engine_seq_kv_read(g, 33, 8, r2);
	CHECK(!memcmp(r1, r2, rb * 8), "%s: the shared rows read back differently", path);
	// refused: a child that is not empty, more rows than the parent has;
	// a write below the shared rows
	CHECK(engine_seq_fork(g, fresh, 4, err) == -1 && strstr(err, "fork"), "%s", err);
	struct engine_seq *h = engine_seq_new(e, err);
	CHECK(engine_seq_fork(h, fresh, 49, err) == -1);
	CHECK(engine_seq_kv_write(g, ENGINE_KV_ALL, 10, 1, r1, 8, 0, err) == -1 && strstr(err, "parent"), "%s", err);
	engine_seq_free(h);
	engine_seq_free(fresh);
	engine_seq_free(c2);
	engine_seq_free(g);
	free(r1);
	free(r2);
	free(cold);
	free(x);
	engine_free(e);
	kb->free(kb);
	model_free(&m);
}

static void
test_fork_stories(void)
{
	check_fork(STORIES);
}
static void
test_fork_qwen2(void)
{
	check_fork(FIX("qwen2"));
}
static void
test_fork_gemma2(void)
{
	check_fork(FIX("gemma2"));
}
static void
test_fork_lfm2(void)
{
	check_fork(FIX2("lfm2"));
}
static void
test_fork_gemma4(void)
{
	check_fork(FIX2("gemma4"));
}

// qwen35 forks where the parent has a recurrent state (its length, a kept
// copy at a multiple of state_every) and takes it: the same bits as a cold
// run while the parent goes on, goes back to a kept state below what its
// forks share and rewrites, or is freed; at a position with no state the
// fork is refused
static void
test_fork_qwen35(void)
{
	char err[AD_ERRLEN] = "";
	struct model m;
	REQUIRE(model_load(&m, FIX2("qwen35"), err) == 0, "%s", err);
	const int W = 7, N = 53;
	struct kb_opts ko = {.width = W, .threads = 1};
	struct kernel_backend *kb = kb_exact_new(&m, &ko, err);
	REQUIRE(kb, "%s", err);
	struct engine_opts eo = {.max_seq = 128, .state_every = 16};
	struct engine *e = engine_new(&m, kb, &eo, err);
	REQUIRE(e, "%s", err);
	const int V = engine_n_vocab(e);
	int32_t ids[64], other[64];
	for (int i = 0; i < N; i++) {
		ids[i] = 1 + (i * 37 + 11) % (V - 1);
		other[i] = 1 + (i * 53 + 5) % (V - 1);
	}
	float *cold = malloc((size_t)N * V * sizeof *cold), *x = malloc((size_t)N * V * sizeof *x);
	struct engine_seq *par = engine_seq_new(e, err), *c1 = engine_seq_new(e, err), *c2 = engine_seq_new(e, err),
			  *g = engine_seq_new(e, err), *h = engine_seq_new(e, err);
	REQUIRE(cold && x && par && c1 && c2 && g && h, "%s", err);
	REQUIRE(engine_eval(e, par, ids, N, 0, cold, err) == 0, "%s", err);
	engine_seq_reset(par);
	feed(e, par, ids, 0, 40, W, NULL);
	CHECK(engine_seq_fork(h, par, 37, err) == -1 && strstr(err, "recurrent state"), "%s", err);
	REQUIRE(engine_seq_fork(c1, par, 32, err) == 0, "%s", err);
	REQUIRE(engine_seq_fork(c2, par, 40, err) == 0, "%s", err);
	feed(e, par, other, 40, 50, W, NULL);
	feed(e, c1, ids, 32, N, W, x);
	CHECK(rows_same(x, cold, 32, N, V), "qwen35: a fork at a kept state differs from a cold run");
	engine_seq_truncate(par, 20); // back to the state kept at 16
	CHECK(engine_seq_len(par) == 16, "truncated to %d", engine_seq_len(par));
	feed(e, par, other, 16, 45, W, NULL);
	feed(e, c2, ids, 40, N, 3, x);
	CHECK(rows_same(x, cold, 40, N, V), "qwen35: a fork at its parent's length, the parent rewritten");
	REQUIRE(engine_seq_fork(g, c1, 48, err) == 0, "%s", err); // c1's kept state at 48
	CHECK(engine_seq_shared(g) == 32);
	engine_seq_free(par);
	engine_seq_free(c1);
	feed(e, g, ids, 48, N, W, x);
	CHECK(rows_same(x, cold, 48, N, V), "qwen35: a fork of a fork, its parents freed");
	engine_seq_free(c2);
	engine_seq_free(g);
	engine_seq_free(h);
	free(cold);
	free(x);
	engine_free(e);
	kb->free(kb);
	model_free(&m);
}

static void
test_exact_stories(void)
{
	check_exact(STORIES);
}
static void
test_exact_llama(void)
{
	check_exact(FIX("llama"));
}
static void
test_exact_qwen2(void)
{
	check_exact(FIX("qwen2"));
}
static void
test_exact_gemma2(void)
{
	check_exact(FIX("gemma2"));
}
static void
test_exact_gemma3(void)
{
	check_exact(FIX("gemma3"));
}
// lfm2's ShortConv state is kept per position like K/V and restored with it;
// gemma4's last layers read an earlier layer's cache and keep none
static void
test_exact_lfm2(void)
{
	check_exact(FIX2("lfm2"));
}
static void
test_exact_lfm2moe(void)
{
	check_exact(FIX2("lfm2moe"));
}
static void
test_exact_gemma4(void)
{
	check_exact(FIX2("gemma4"));
}

// qwen35's delta-net blocks keep a recurrent state, no rows: a block
// carries the state after its last position (the sequence's kept copy at
// that multiple of state_every), and a hit goes on from the end of such a
// block: rows, then the state, then the rest in chunks of 7 give a cold
// prefill's logits bit for bit. Without the state the sequence refuses to
// go on; a position with no kept state has none to give; truncating goes
// back to the latest kept state and gives the same bits again.
static void
test_exact_qwen35(void)
{
	char err[AD_ERRLEN] = "";
	struct model m;
	REQUIRE(model_load(&m, FIX2("qwen35"), err) == 0, "%s", err);
	const int W = 7, B = 16, N = 53;
	struct kb_opts ko = {.width = W, .threads = 1};
	struct kernel_backend *kb = kb_exact_new(&m, &ko, err);
	REQUIRE(kb, "%s", err);
	struct engine_opts eo = {.max_seq = 128, .state_every = B};
	struct engine *e = engine_new(&m, kb, &eo, err);
	REQUIRE(e, "%s", err);
	const int V = engine_n_vocab(e);
	const size_t SB = engine_state_bytes(e);
	CHECK(SB == model_state_floats(&m) * 4 && SB > 0 && engine_state_every(e) == B);
	int32_t ids[64];
	for (int i = 0; i < N; i++)
		ids[i] = 1 + (i * 37 + 11) % (V - 1);
	float *cold = malloc((size_t)N * V * sizeof *cold), *warm = malloc((size_t)N * V * sizeof *warm);
	uint8_t *st = malloc(SB);
	struct engine_seq *a = engine_seq_new(e, err), *q = engine_seq_new(e, err);
	REQUIRE(cold && warm && st && a && q, "%s", err);
	REQUIRE(engine_eval(e, a, ids, N, 0, cold, err) == 0, "%s", err);
	struct pcache *c = pcache_new(B, engine_kv_row_bytes(e), 0, SB, 1 << 24, err);
	REQUIRE(c, "%s", err);
	struct pcache_block *pins[8];
	int np = 0;
	for (; (np + 1) * B <= N; np++) {
		void *fill;
		pins[np] = pcache_add(c, np ? pins[np - 1] : NULL, ids + np * B, &fill, NULL);
		REQUIRE(pins[np] && fill);
		engine_seq_kv_read(a, np * B, B, fill);
		CHECK(!pcache_state(pins[np]));
		REQUIRE(engine_seq_state_read(a, (np + 1) * B, st) == 0, "no state kept at %d", (np + 1) * B);
		CHECK(pcache_set_state(c, pins[np], st) == 0 && pcache_state(pins[np]));
	}
	CHECK(np == 3);
	struct pcache_stats ps;
	pcache_stats(c, &ps);
	CHECK(ps.states == 3 && ps.bytes == 3 * (B * engine_kv_row_bytes(e) + SB), "%d states, %zu bytes", ps.states,
	      ps.bytes);
	CHECK(engine_seq_state_read(a, 21, st) == -1); // no copy there
	CHECK(engine_seq_state_read(a, N, st) == 0);   // its length
	for (int h = B; h <= 3 * B; h += B) {
		struct pcache_block *got[8];
		int hit, nb = pcache_match(c, ids, N, got, 8, &hit);
		CHECK(nb == 3 && hit == 48);
		engine_seq_reset(q);
		for (int k = 0; k < h / B; k++)
			REQUIRE(engine_seq_kv_append(q, ids + k * B, B, pcache_rows(got[k]), B, 0, err) == 0, "%s",
			        err);
		struct engine_seq *cols[8];
		for (int i = 0; i < 8; i++)
			cols[i] = q;
		CHECK(engine_forward(e, cols, ids + h, 1, NULL, warm, 1, err) == -1 && strstr(err, "recurrent state"),
		      "%s", err);
		CHECK(engine_seq_len(q) == h);
		REQUIRE(engine_seq_state_load(q, pcache_state(got[h / B - 1]), err) == 0, "%s", err);
		pcache_release(c, got, nb);
		for (int p = h; p < N;) {
			int n = N - p < W ? N - p : W;
			REQUIRE(engine_forward(e, cols, ids + p, n, NULL, warm + (size_t)p * V, 1, err) == 0, "%s",
			        err);
			p += n;
		}
		int same = 1;
		for (int p = h; p < N; p++)
			same &= memcmp(warm + (size_t)p * V, cold + (size_t)p * V, (size_t)V * sizeof *warm) == 0;
		CHECK(same, "qwen35: the logits after a hit of %d positions differ from a cold prefill", h);
	}
	// truncating to 40 goes back to the state kept at 32
	engine_seq_truncate(a, 40);
	CHECK(engine_seq_len(a) == 32, "truncated to %d", engine_seq_len(a));
	struct engine_seq *cols[8];
	for (int i = 0; i < 8; i++)
		cols[i] = a;
	int same = 1;
	for (int p = 32; p < N;) {
		int n = N - p < W ? N - p : W;
		REQUIRE(engine_forward(e, cols, ids + p, n, NULL, warm + (size_t)p * V, 1, err) == 0, "%s", err);
		p += n;
	}
	for (int p = 32; p < N; p++)
		same &= memcmp(warm + (size_t)p * V, cold + (size_t)p * V, (size_t)V * sizeof *warm) == 0;
	CHECK(same, "qwen35: the logits after truncating to a kept state differ");
	// before the first kept state: back to the start
	engine_seq_truncate(a, 10);
	CHECK(engine_seq_len(a) == 0 && engine_seq_state_read(a, 16, st) == -1);
	// a state for a model without one, and room for a state: refused
	struct pcache *c0 = pcache_new(B, 8, 0, 0, 1 << 20, err);
	REQUIRE(c0, "%s", err);
	void *fill;
	struct pcache_block *b0 = pcache_add(c0, NULL, ids, &fill, NULL);
	REQUIRE(b0);
	CHECK(pcache_set_state(c0, b0, st) == -1 && !pcache_state(b0));
	pcache_release(c0, &b0, 1);
	pcache_free(c0);
	pcache_release(c, pins, np);
	pcache_free(c);
	free(st);
	engine_seq_free(a);
	engine_seq_free(q);
	free(cold);
	free(warm);
	engine_free(e);
	kb->free(kb);
	model_free(&m);
}

// states go before blocks when room is needed, the oldest first: a chain
// keeps the states near its end
static void
test_state_room(void)
{
	char err[AD_ERRLEN] = "";
	// blocks of 2 positions of 4 bytes (8 bytes), states of 16: room for 40
	struct pcache *c = pcache_new(2, 4, 0, 16, 40, err);
	REQUIRE(c, "%s", err);
	const int32_t t[] = {1, 2, 3, 4, 5, 6};
	uint8_t st[16] = {7};
	struct pcache_block *b[3];
	void *fill;
	for (int i = 0; i < 2; i++) {
		REQUIRE((b[i] = pcache_add(c, i ? b[i - 1] : NULL, t + 2 * i, &fill, NULL)));
		CHECK(pcache_set_state(c, b[i], st) == 0);
	}
	// 2 x 8 + 16 + 16 = 48 > 40: the first block's state went
	struct pcache_stats ps;
	pcache_stats(c, &ps);
	CHECK(!pcache_state(b[0]) && pcache_state(b[1]) && ps.states == 1 && ps.bytes == 32, "%d states, %zu bytes",
	      ps.states, ps.bytes);
	// a third block (all pinned): room from the last state
	REQUIRE((b[2] = pcache_add(c, b[1], t + 4, &fill, NULL)));
	pcache_stats(c, &ps);
	CHECK(ps.blocks == 3 && ps.states == 1 && ps.bytes == 40);
	CHECK(pcache_set_state(c, b[2], st) == 0 && !pcache_state(b[1]) && pcache_state(b[2]));
	pcache_release(c, b, 3);
	pcache_free(c);
}

// --- through the scheduler -----------------------------------------------------------

struct run_out {
	int32_t ids[64];
	float lp[64];
	float top[64][SCHED_TOP];
	int n, cached;
	enum sched_finish fin;
};

struct rig {
	struct model m;
	struct kernel_backend *kb;
	struct engine *e;
	struct sched *s;
};

static void
rig_start(struct rig *r, const char *path, size_t cache_mem)
{
	// (a recurrent state is kept every 16 positions, the cache's block)
	char err[AD_ERRLEN] = "";
	memset(r, 0, sizeof *r);
	REQUIRE(model_load(&r->m, path, err) == 0, "%s", err);
	struct kb_opts ko = {.width = 8, .threads = 1};
	REQUIRE((r->kb = kb_exact_new(&r->m, &ko, err)), "%s", err);
	struct engine_opts eo = {.max_seq = 256, .state_every = 16};
	REQUIRE((r->e = engine_new(&r->m, r->kb, &eo, err)), "%s", err);
	// no speculation: the choices below count on the first one still
	// running when the others look up (drafts can end it first); test-spec
	// checks speculation with the cache
	struct sched_opts so = {.parallel = 4, .cache_mem = cache_mem, .cache_block = 16, .no_spec = 1};
	REQUIRE((r->s = sched_new(r->e, &so, err)), "%s", err);
}

static void
rig_stop(struct rig *r)
{
	sched_free(r->s);
	engine_free(r->e);
	r->kb->free(r->kb);
	model_free(&r->m);
}

static uint64_t
submit(struct rig *r, const int32_t *p, int n, int max_tokens, const char *session)
{
	char err[AD_ERRLEN] = "";
	struct sched_gen g = {.prompt = p,
	                      .n_prompt = n,
	                      .max_tokens = max_tokens,
	                      .want_top = 1,
	                      .logprobs = 1,
	                      .top_logprobs = 5,
	                      .session = session};
	sample_defaults(&g.sp);
	g.sp.temperature = 0;
	struct sched_started st;
	if (sched_generate(r->s, &g, &st, NULL, err)) {
		CHECK(0, "%s", err);
		return 0;
	}
	return st.job;
}

static void
collect(struct rig *r, uint64_t job, struct run_out *o)
{
	char err[AD_ERRLEN] = "";
	memset(o, 0, sizeof *o);
	for (;;) {
		struct sched_poll p;
		REQUIRE(sched_poll(r->s, job, 5000, &p, NULL, err) == 0, "%s", err);
		for (int i = 0; i < p.n_events && o->n < 64; i++, o->n++) {
			o->ids[o->n] = p.events[i].id;
			o->lp[o->n] = p.events[i].lp;
			for (int k = 0; k < SCHED_TOP; k++)
				o->top[o->n][k] = p.events[i].top[k].logit;
		}
		free(p.events);
		if (p.finish != SCHED_RUNNING) {
			o->fin = p.finish;
			o->cached = (int)p.timings.cached_tokens;
			return;
		}
	}
}

// a finished job is detached (its pins released) at the engine thread's
// next turn: wait for that, up to 5 s
static void
settled(struct rig *r, struct sched_stats *st)
{
	for (int i = 0; i < 500; i++) {
		sched_stats(r->s, st);
		if (st->running == 0 && st->cache.pinned == 0)
			return;
		usleep(10000);
	}
}

static int
same_run(const struct run_out *a, const struct run_out *b)
{
	return a->n == b->n && memcmp(a->ids, b->ids, sizeof a->ids) == 0 && memcmp(a->lp, b->lp, sizeof a->lp) == 0 &&
	       memcmp(a->top, b->top, sizeof a->top) == 0;
}

static void
prompt_of(int32_t *p, int n, int salt)
{
	for (int i = 0; i < n; i++)
		p[i] = 1 + (i * 29 + salt * 7 + 3) % 500;
}

static void
check_sched(const char *path)
{
	struct rig off, on;
	rig_start(&off, path, 0);
	rig_start(&on, path, 1 << 24);
	int32_t p[120], p2[120];
	prompt_of(p, 120, 0);
	memcpy(p2, p, sizeof p);
	prompt_of(p2 + 70, 50, 9); // shares 70 tokens: 4 whole blocks
	struct run_out ref, ref2, o;
	// a recurrent model goes on from a block's end only: whole blocks
	const int rec = engine_state_bytes(off.e) > 0;
#define CACHED(h) (rec ? (h) / 16 * 16 : (h))
	collect(&off, submit(&off, p, 45, 12, NULL), &ref);
	collect(&off, submit(&off, p2, 90, 12, NULL), &ref2);
	CHECK(ref.n == 12 && ref.cached == 0);

	collect(&on, submit(&on, p, 45, 12, NULL), &o);
	CHECK(same_run(&o, &ref) && o.cached == 0, "cold: cached %d", o.cached);
	collect(&on, submit(&on, p, 45, 12, NULL), &o);
	// 45 prompt + 11 fed generated tokens = 56: 3 blocks stored; the prompt
	// has 2 whole blocks and a partial one: 44 positions (not the last)
	CHECK(same_run(&o, &ref) && o.cached == CACHED(44), "warm: cached %d", o.cached);
	collect(&on, submit(&on, p2, 90, 12, NULL), &o);
	// p's blocks hold 45 prompt tokens, then its reply: p2 shares 45
	// (46 or more if the reply's first token happens to be p2's next)
	CHECK(same_run(&o, &ref2) && o.cached >= CACHED(45) && o.cached <= 64 && o.cached == CACHED(o.cached),
	      "shared prefix: cached %d", o.cached);
	collect(&on, submit(&on, p2, 90, 12, NULL), &o);
	CHECK(same_run(&o, &ref2) && o.cached == CACHED(89), "repeated: cached %d", o.cached);

	// n jobs on one prompt, together: the later ones look up when their
	// prefill starts, after the first stored its blocks
	int32_t p3[120];
	prompt_of(p3, 120, 5);
	struct run_out ref3;
	collect(&off, submit(&off, p3, 100, 8, NULL), &ref3);
	uint64_t jobs[3];
	for (int i = 0; i < 3; i++)
		jobs[i] = submit(&on, p3, 100, 8, NULL);
	int hits = 0, forked = 0;
	for (int i = 0; i < 3; i++) {
		collect(&on, jobs[i], &o);
		CHECK(same_run(&o, &ref3), "choice %d", i);
		hits += o.cached == CACHED(99) || o.cached == 96;
		forked += o.cached == 99;
	}
	// the later two fork from the first one's running sequence: its 99
	// positions (never the last prompt token) shared, not copied; or, when
	// the first one has already ended (its sequence gone, a busy machine
	// delaying the later submissions), they take the 6 blocks it stored
	CHECK(hits == 2, "%d of 3 choices reused the first one's 96 or 99 positions", hits);
	struct sched_stats fs;
	sched_stats(on.s, &fs);
	// (a recurrent model forks at a kept state, a block's end: 96)
	CHECK(rec ? fs.forks <= 2 && fs.fork_rows == 96 * fs.forks
	          : fs.forks == (uint64_t)forked && fs.fork_rows == 99 * (uint64_t)forked,
	      "%llu forks of %llu rows, %d at 99", (unsigned long long)fs.forks, (unsigned long long)fs.fork_rows,
	      forked);

	// the next turn of a chat: prompt, reply and a new message
	int32_t turn[120];
	memcpy(turn, p, 45 * sizeof *p);
	memcpy(turn + 45, ref.ids, 12 * sizeof *turn);
	prompt_of(turn + 57, 20, 3);
	struct run_out reft;
	collect(&off, submit(&off, turn, 77, 6, NULL), &reft);
	collect(&on, submit(&on, turn, 77, 6, NULL), &o);
	CHECK(same_run(&o, &reft) && o.cached == CACHED(48), "next turn: cached %d", o.cached);

	// a session holding 20 of the prompt's tokens takes the cache's 44
	collect(&on, submit(&on, p, 20, 1, "s1"), &o);
	collect(&on, submit(&on, p, 45, 12, "s1"), &o);
	CHECK(same_run(&o, &ref) && o.cached == CACHED(44), "session: cached %d", o.cached);
#undef CACHED

	struct sched_stats st;
	settled(&on, &st);
	CHECK(st.cache.pinned == 0 && st.cache.blocks > 0 && st.cache.lookups >= 8 && st.cache.hit_tokens >= 44 + 64 &&
	              (!rec || st.cache.states > 0),
	      "pinned %d, blocks %d, lookups %llu", st.cache.pinned, st.cache.blocks,
	      (unsigned long long)st.cache.lookups);
	sched_stats(off.s, &st);
	CHECK(st.cache.lookups == 0 && st.cache.blocks == 0);
	rig_stop(&on);

	// a bound of three blocks: stories260K's rows are 5 layers x 2 x 64 x 2
	// bytes; concurrent jobs pin their chains, the rest is evicted
	struct rig tiny;
	rig_start(&tiny, path, 3 * 16 * engine_kv_row_bytes(off.e) + 2 * engine_state_bytes(off.e));
	for (int round = 0; round < 2; round++) {
		uint64_t a = submit(&tiny, p, 45, 12, NULL), b = submit(&tiny, p2, 90, 12, NULL),
			 d = submit(&tiny, p3, 100, 8, NULL);
		struct run_out oa, ob, od;
		collect(&tiny, a, &oa);
		collect(&tiny, b, &ob);
		collect(&tiny, d, &od);
		CHECK(same_run(&oa, &ref) && same_run(&ob, &ref2) && same_run(&od, &ref3), "round %d", round);
		// one at a time: the others' blocks are unpinned and go
		collect(&tiny, submit(&tiny, p3, 100, 8, NULL), &od);
		collect(&tiny, submit(&tiny, p, 45, 12, NULL), &oa);
		CHECK(same_run(&oa, &ref) && same_run(&od, &ref3), "round %d, one at a time", round);
	}
	settled(&tiny, &st);
	// (a recurrent model's blocks give up their states first: more of them fit,
	// and the cache is not full before every state has gone)
	// (and a block may have dropped its windowed part: prefix-cache.h)
	const size_t bb = 16 * engine_kv_row_bytes(off.e), fb = 16 * engine_kv_part_bytes(off.e, ENGINE_KV_FULL);
	const size_t wb = engine_kv_window(off.e) ? 16 * engine_kv_part_bytes(off.e, ENGINE_KV_WINDOWED) : 0;
	CHECK(st.cache.evictions > 0 && (rec || st.cache.full > 0) && st.cache.blocks <= (int)(st.cache.limit / fb) &&
	              (rec || wb || st.cache.blocks <= 3) && st.cache.pinned == 0 && st.cache.bytes <= st.cache.limit &&
	              st.cache.bytes == (size_t)st.cache.blocks * (wb ? fb : bb) + (size_t)st.cache.wblocks * wb +
	                                        (size_t)st.cache.states * engine_state_bytes(off.e),
	      "evictions %llu, full %llu, blocks %d, states %d, pinned %d, bytes %zu of %zu",
	      (unsigned long long)st.cache.evictions, (unsigned long long)st.cache.full, st.cache.blocks,
	      st.cache.states, st.cache.pinned, st.cache.bytes, st.cache.limit);
	rig_stop(&tiny);
	rig_stop(&off);
}

// the windowed part through the scheduler (gemma's sliding layers, window
// 6; lfm2's ShortConv rows, 3): a finished job keeps it only in the blocks
// before the places a prompt may leave its chain, so the cache holds fewer
// bytes than every part of every block; a prompt leaving the chain inside
// the dropped part is cut back (here to nothing) and computes it again,
// which restores it; the branch it made keeps its window, so the next
// prompt leaving there hits in full; a session whose rows came from
// dropped parts starts over where its window would read them. Every reply
// is the cold run's, bit for bit.
static void
check_windows(const char *path)
{
	struct rig off, on;
	rig_start(&off, path, 0);
	rig_start(&on, path, 1 << 24);
	const int W = engine_kv_window(on.e);
	REQUIRE(W > 0 && W < 16, "%s: window %d", path, W);
	int32_t p[100], b[100], c[100], d[100];
	prompt_of(p, 100, 1);
	memcpy(b, p, 40 * sizeof *b);
	prompt_of(b + 40, 60, 2);
	memcpy(c, p, 40 * sizeof *c);
	prompt_of(c + 40, 60, 3);
	memcpy(d, p, 40 * sizeof *d);
	prompt_of(d + 40, 60, 4);
	struct run_out ra, rb, rc, rd, o;
	collect(&off, submit(&off, p, 100, 8, NULL), &ra);
	collect(&off, submit(&off, b, 100, 8, NULL), &rb);
	collect(&off, submit(&off, c, 100, 8, NULL), &rc);
	collect(&off, submit(&off, d, 100, 8, NULL), &rd);

	collect(&on, submit(&on, p, 100, 8, NULL), &o);
	CHECK(same_run(&o, &ra) && o.cached == 0);
	struct sched_stats st;
	settled(&on, &st);
	const size_t fb = engine_kv_part_bytes(on.e, ENGINE_KV_FULL),
		     wb = engine_kv_part_bytes(on.e, ENGINE_KV_WINDOWED);
	// 6 blocks; the window before position 96 (the end of the stored chain)
	// is in block 5 only
	CHECK(st.cache.blocks == 6 && st.cache.wdropped == 5 && st.cache.bytes == 16 * (6 * fb + wb),
	      "%s: %d blocks, %llu windowed parts dropped, %zu bytes", path, st.cache.blocks,
	      (unsigned long long)st.cache.wdropped, st.cache.bytes);
	// leaving at 40: blocks 2, 1 and 0 have no windowed part: nothing is reused
	collect(&on, submit(&on, b, 100, 8, NULL), &o);
	CHECK(same_run(&o, &rb) && o.cached == 0, "%s: cut hit: cached %d", path, o.cached);
	// leaving at 40 again: b stored blocks 0 and 1 again with their parts,
	// and its block 2 keeps the window before 40
	collect(&on, submit(&on, c, 100, 8, NULL), &o);
	CHECK(same_run(&o, &rc) && o.cached == 40, "%s: at the branch: cached %d", path, o.cached);
	// a session on p: 96 from the cache, the rows of blocks 2 to 4 without
	// their windowed part; then a prompt leaving it at 40 reuses nothing of
	// the session (its window would read them) but the cache's 40
	collect(&on, submit(&on, p, 100, 8, "w"), &o);
	CHECK(same_run(&o, &ra) && o.cached == 96, "%s: session: cached %d", path, o.cached);
	collect(&on, submit(&on, d, 100, 8, "w"), &o);
	CHECK(same_run(&o, &rd) && o.cached == 40, "%s: session left early: cached %d", path, o.cached);
	settled(&on, &st);
	CHECK(st.cache.pinned == 0);
	rig_stop(&on);
	rig_stop(&off);
}

static void
test_windows_gemma2(void)
{
	check_windows(FIX("gemma2"));
}
static void
test_windows_gemma3(void)
{
	check_windows(FIX("gemma3"));
}
static void
test_windows_lfm2(void)
{
	check_windows(FIX2("lfm2"));
}

static void
test_sched_stories(void)
{
	check_sched(STORIES);
}
static void
test_sched_gemma2(void)
{
	check_sched(FIX("gemma2"));
}
static void
test_sched_lfm2(void)
{
	check_sched(FIX2("lfm2"));
}
static void
test_sched_qwen2(void)
{
	check_sched(FIX("qwen2"));
}
static void
test_sched_qwen35(void)
{
	check_sched(FIX2("qwen35"));
}

int
main(void)
{
	T_RUN(test_cache_alone);
	T_RUN(test_exact_stories);
	T_RUN(test_exact_llama);
	T_RUN(test_exact_qwen2);
	T_RUN(test_exact_gemma2);
	T_RUN(test_exact_gemma3);
	T_RUN(test_exact_lfm2);
	T_RUN(test_exact_lfm2moe);
	T_RUN(test_exact_gemma4);
	T_RUN(test_exact_qwen35);
	T_RUN(test_state_room);
	T_RUN(test_fork_stories);
	T_RUN(test_fork_qwen2);
	T_RUN(test_fork_gemma2);
	T_RUN(test_fork_lfm2);
	T_RUN(test_fork_gemma4);
	T_RUN(test_fork_qwen35);
	T_RUN(test_sched_stories);
	T_RUN(test_sched_gemma2);
	T_RUN(test_sched_lfm2);
	T_RUN(test_sched_qwen2);
	T_RUN(test_sched_qwen35);
	T_RUN(test_windows_gemma2);
	T_RUN(test_windows_gemma3);
	T_RUN(test_windows_lfm2);
	return t_done();
}
