// test-spec.c - speculative decoding by prompt lookup (cpu-worker/include/spec.h).
//
// The parts alone: spec_find takes the longest n-gram that matches (down
// to ngram_min) at its most recent earlier place and continues a repeating
// stretch past the end of the history; spec_len verifies nothing when the
// acceptance is poor, everything at no cost, in between what pays;
// spec_cost recovers the slope of synthetic calls and keeps the prior
// until the widths vary; spec_probe counts a replay by hand.
//
// Exact, through the scheduler on the pipeline's emu kernels (kb_local,
// width 16): on every fixture model of tests/data/models and models2, and
// stories260K, a prompt that repeats itself (so drafts are proposed and
// checked) gives with speculation on the very tokens, logprobs and top
// logits of a run with it off, greedy and sampled with a seed; every
// fixture drafted but the recurrent one (qwen35, whose state cannot take
// a rejected draft back: the scheduler drafts nothing for it), and drafts
// were accepted and rejected. A repeated
// request then hits the prefix cache the speculative run filled and gives
// the same bits again (no row of a rejected draft was stored). Jobs
// decoded together (one of them still prefilling a long prompt, so the
// drafts share a call with a prefill chunk) give each job's tokens alone;
// stop ids, max_tokens from 1 to 12, the end of the context, a cancel and
// a request that turns speculation off all end as without speculation.
// On stories260K the counters of a live run equal spec_probe's replay of
// its tokens (with a fixed draft cost).
//
// The distribution (stories260K, temperature 1.5): over a fixed set of 6000
// seeds, the pairs of tokens that follow a fixed first token, the second
// of which the scheduler checked against a draft, are counted against the
// model's own probabilities (teacher-forced logits, the sampler's cut).
// The seeds are fixed, so the result is the same on every run; the bound
// is the chi-square's 1e-9 tail, which a correct sampler passes for all
// but one seed set in a billion. Going on after a rejected draft as if it
// had been accepted gives a statistic about twice the bound, and so does
// keeping the rows of rejected drafts (both tried as mutations).
#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "engine.h"
#include "kernels.h"
#include "model.h"
#include "scheduler.h"
#include "spec.h"
#include "t.h"

#pragma GCC diagnostic ignored "-Wformat-zero-length" // CHECK without a message

#define STORIES T_DATA "/stories260K/stories260K.gguf"
#define WIDTH 16
#define MAXGEN 96

// --- the parts ---------------------------------------------------------------------------

static void
test_find(void)
{
	int32_t out[16];
	int ng;
	// history 5 6 7 9 | 5 6 7 8 | 5 6 7, last 8: the longest match of the
	// history's end is 5 6 7 8 at 4..7, followed by 5 6 7 and then the
	// last token itself
	const int32_t h[] = {5, 6, 7, 9, 5, 6, 7, 8, 5, 6, 7};
	int k = spec_find(h, 11, 8, 2, 8, 4, out, &ng);
	CHECK(k == 4 && ng == 4 && out[0] == 5 && out[1] == 6 && out[2] == 7 && out[3] == 8, "k %d ng %d: %d %d %d %d",
	      k, ng, out[0], out[1], out[2], out[3]);
	// ngram_max caps the length, and the most recent match of that length wins
	k = spec_find(h, 11, 8, 2, 2, 2, out, &ng);
	CHECK(k == 2 && ng == 2 && out[0] == 5 && out[1] == 6, "k %d ng %d", k, ng);
	// 5 6 7 9 occurs once, at 0..3: after a last of 9 the draft is what followed it
	k = spec_find(h, 11, 9, 2, 8, 3, out, &ng);
	CHECK(k == 3 && ng == 4 && out[0] == 5 && out[1] == 6 && out[2] == 7, "k %d ng %d", k, ng);
	// a token never seen: nothing
	k = spec_find(h, 11, 4, 1, 8, 3, out, &ng);
	CHECK(k == 0 && ng == 0);
	// only a 2-gram (2 3) matches: taken with ngram_min 2, not with 3
	const int32_t t2[] = {1, 2, 3, 4, 9, 9, 2};
	k = spec_find(t2, 7, 3, 2, 8, 2, out, &ng);
	CHECK(k == 2 && ng == 2 && out[0] == 4 && out[1] == 9, "k %d ng %d", k, ng);
	k = spec_find(t2, 7, 3, 3, 8, 2, out, &ng);
	CHECK(k == 0 && ng == 0, "a 2-gram match with ngram_min 3: k %d", k);
	// one token repeated: the draft continues the run past the history's end
	const int32_t r[] = {3, 4, 4, 4};
	k = spec_find(r, 4, 4, 2, 8, 6, out, &ng);
	CHECK(k == 6 && ng == 3, "k %d ng %d", k, ng);
	for (int i = 0; i < k; i++)
		CHECK(out[i] == 4);
	// a period of 3: a b c a b c a b, last c: the match of 6 at 0..5 (one
	// at 3..8 would be the suffix itself), then a b c a b c ...
	const int32_t p[] = {1, 2, 3, 1, 2, 3, 1, 2};
	k = spec_find(p, 8, 3, 2, 8, 7, out, &ng);
	const int32_t want[] = {1, 2, 3, 1, 2, 3, 1};
	CHECK(k == 7 && ng == 6 && !memcmp(out, want, sizeof want), "k %d ng %d", k, ng);
	// max 0, an empty history
	CHECK(spec_find(p, 8, 3, 2, 8, 0, out, &ng) == 0);
	CHECK(spec_find(p, 0, 3, 1, 8, 4, out, &ng) == 0);
}

static void
test_len(void)
{
	struct spec_stats st = {0};
	// cost 0: the whole draft; nothing found: nothing
	CHECK(spec_len(&st, 2, 0, 7) == 7);
	CHECK(spec_len(&st, 2, 0.1f, 0) == 0);
	// the prior (a = 0.5) at c = 0.1: (1 + .5 + .25) / 1.2 is the best
	CHECK(spec_len(&st, 2, 0.1f, 8) == 2, "%d", spec_len(&st, 2, 0.1f, 8));
	// poor acceptance by this n: nothing pays
	spec_note(&st, 3, 8, 0, 1);
	for (int i = 0; i < 20; i++)
		spec_note(&st, 3, 1, 0, 1);
	CHECK(spec_len(&st, 3, 0.1f, 8) == 0, "%d", spec_len(&st, 3, 0.1f, 8));
	// good acceptance by n 8: all of it at a small cost, less at a large one
	for (int i = 0; i < 40; i++)
		spec_note(&st, 8, 8, 8, 0);
	CHECK(spec_len(&st, 8, 0.05f, 8) == 8, "%d", spec_len(&st, 8, 0.05f, 8));
	int big = spec_len(&st, 8, 1.5f, 8);
	CHECK(big >= 0 && big < 8, "%d", big);
	// an n never seen takes the sequence's rate (mostly accepted here)
	CHECK(spec_len(&st, 5, 0.05f, 8) >= 4, "%d", spec_len(&st, 5, 0.05f, 8));
	CHECK(st.steps == 61 && st.drafted == 8 + 20 + 320 && st.accepted == 320 && st.reached == 21 + 320);
	CHECK(st.drafted_n[3] == 28 && st.accepted_n[8] == 320 && st.reached_n[3] == 21);
	struct spec_stats sum = {0};
	spec_add(&sum, &st);
	spec_add(&sum, &st);
	CHECK(sum.drafted == 2 * st.drafted && sum.accepted_n[8] == 640);
	// nothing drafted books nothing
	spec_note(&st, 2, 0, 0, 0);
	CHECK(st.steps == 61);

	struct spec_opts o;
	spec_defaults(&o);
	char err[AD_ERRLEN];
	CHECK(spec_check(&o, err) == 0, "%s", err);
	o.ngram_min = 9;
	CHECK(spec_check(&o, err) && strstr(err, "--ngram-min"), "%s", err);
	o.ngram_min = 2;
	o.draft = SPEC_DRAFT_MAX + 1;
	CHECK(spec_check(&o, err) && strstr(err, "--draft"), "%s", err);
	o.draft = 8;
	o.col_cost = -3;
	CHECK(spec_check(&o, err) && strstr(err, "--draft-cost"), "%s", err);
}

static void
test_cost(void)
{
	struct spec_cost m = {0};
	// calls of one width: no slope to tell, the prior
	for (int i = 0; i < 50; i++)
		spec_cost_add(&m, 1, 1000);
	CHECK(spec_cost_get(&m, 0.25f) == 0.25f);
	// time = 900 + 100 * cols: c = 100 / 1000
	memset(&m, 0, sizeof m);
	for (int i = 0; i < 200; i++) {
		int c = 1 + i % 9;
		spec_cost_add(&m, c, 900.0 + 100.0 * c);
	}
	CHECK_NEAR(spec_cost_get(&m, 0.5f), 0.1, 1e-6);
	// the old calls fade: the line of the recent ones wins
	for (int i = 0; i < 600; i++) {
		int c = 1 + i % 5;
		spec_cost_add(&m, c, 500.0 + 500.0 * c);
	}
	CHECK_NEAR(spec_cost_get(&m, 0.1f), 0.5, 1e-3);
	// a falling line is a free column; fewer than 8 calls: the prior
	memset(&m, 0, sizeof m);
	for (int i = 0; i < 20; i++)
		spec_cost_add(&m, 1 + i % 4, 1000.0 - 10.0 * (i % 4));
	CHECK(spec_cost_get(&m, 0.3f) == 0);
	memset(&m, 0, sizeof m);
	for (int i = 0; i < 5; i++)
		spec_cost_add(&m, 1 + i, 100.0 * (1 + i));
	CHECK(spec_cost_get(&m, 0.3f) == 0.3f);
}

static void
test_probe(void)
{
	struct spec_opts o;
	spec_defaults(&o);
	o.col_cost = 0; // every draft in full
	o.draft = 3;
	// history 1 2 3 4 5, generated 1 2 3 4 9 1 2 3 4 5
	const int32_t h[] = {1, 2, 3, 4, 5}, g[] = {1, 2, 3, 4, 9, 1, 2, 3, 4, 5};
	int32_t scratch[32];
	struct spec_stats st;
	int calls;
	spec_probe(&o, h, 5, g, 10, 100, 100, scratch, &st, &calls);
	// step 1 feeds g0 = 1: "5 1"? no 2-gram... (5,1) is new, no draft -> g1
	// step 2 feeds g1 = 2: "1 2" at 0..1 -> draft 3 4 5: 3 4 accepted, 5 != 9
	// step 3 feeds g4 = 9: no match -> g5
	// step 4 feeds g5 = 1: "9 1" new; 1-grams are below ngram_min -> g6
	// step 5 feeds g6 = 2: "1 2" most recent at 5..6 of the history + g -> 3 4 9: 3 4 accepted, 9 != 5 -> g9
	CHECK(calls == 5 && st.steps == 2 && st.drafted == 6 && st.accepted == 4 && st.reached == 6,
	      "%d %llu %llu %llu", calls, (unsigned long long)st.steps, (unsigned long long)st.drafted,
	      (unsigned long long)st.accepted);
	// max_tokens: one token left leaves no room for a draft (the step's
	// own row gives it); two leave room for one
	spec_probe(&o, h, 5, g, 3, 3, 100, scratch, &st, &calls);
	CHECK(calls == 2 && st.drafted == 0, "%d %llu", calls, (unsigned long long)st.drafted);
	spec_probe(&o, h, 5, g, 4, 4, 100, scratch, &st, &calls);
	CHECK(calls == 2 && st.drafted == 1 && st.accepted == 1, "%d %llu", calls, (unsigned long long)st.drafted);
}

// --- through the scheduler -------------------------------------------------------------------

struct rig {
	struct model m;
	struct kernel_backend *kb;
	struct engine *e;
	struct sched *s;
	int V;
};

static int
rig_start(struct rig *r, const char *path, int parallel, int max_seq, const struct spec_opts *sp, char *err)
{
	memset(r, 0, sizeof *r);
	if (model_load(&r->m, path, err))
		return -1;
	struct kb_opts ko = {.width = WIDTH, .threads = 1};
	if (!(r->kb = kb_local_new(&r->m, &ko, err)))
		return -1;
	struct engine_opts eo = {.max_seq = max_seq};
	if (!(r->e = engine_new(&r->m, r->kb, &eo, err)))
		return -1;
	struct sched_opts so = {.parallel = parallel, .queue = 64, .cache_mem = 1 << 22, .spec = sp};
	if (!(r->s = sched_new(r->e, &so, err)))
		return -1;
	r->V = engine_n_vocab(r->e);
	return 0;
}

static void
rig_stop(struct rig *r)
{
	sched_free(r->s);
	if (r->kb)
		r->kb->free(r->kb);
	engine_free(r->e);
	model_free(&r->m);
}

struct out {
	int32_t ids[MAXGEN];
	float lp[MAXGEN], top[MAXGEN][SCHED_TOP];
	int n;
	enum sched_finish fin;
	struct gen_timings t;
};

struct job {
	const int32_t *prompt;
	int n_prompt, max_tokens;
	float temp;
	uint64_t seed;
	int spec; // SCHED_SPEC_*
	const int32_t *stops;
	int n_stops;
};

static uint64_t
submit(struct rig *r, const struct job *jb)
{
	char err[AD_ERRLEN] = "";
	struct sched_gen g = {.prompt = jb->prompt,
	                      .n_prompt = jb->n_prompt,
	                      .max_tokens = jb->max_tokens,
	                      .want_top = 1,
	                      .logprobs = 1,
	                      .top_logprobs = 3,
	                      .speculative = jb->spec,
	                      .stop_ids = jb->stops,
	                      .n_stop = jb->n_stops};
	sample_defaults(&g.sp);
	g.sp.temperature = jb->temp;
	if (jb->temp > 0) {
		g.sp.top_p = 0.95f;
		g.sp.repeat_penalty = 1.1f;
		g.sp.seed = jb->seed;
		g.sp.has_seed = 1;
	}
	struct sched_started st;
	if (sched_generate(r->s, &g, &st, NULL, err)) {
		CHECK(0, "%s", err);
		return 0;
	}
	return st.job;
}

static void
collect(struct rig *r, uint64_t job, struct out *o)
{
	char err[AD_ERRLEN] = "";
	memset(o, 0, sizeof *o);
	for (;;) {
		struct sched_poll p;
		REQUIRE(sched_poll(r->s, job, 10000, &p, NULL, err) == 0, "%s", err);
		for (int i = 0; i < p.n_events && o->n < MAXGEN; i++, o->n++) {
			o->ids[o->n] = p.events[i].id;
			o->lp[o->n] = p.events[i].lp;
			for (int k = 0; k < SCHED_TOP; k++)
				o->top[o->n][k] = p.events[i].top[k].logit;
		}
		free(p.events);
		if (p.finish != SCHED_RUNNING) {
			o->fin = p.finish;
			o->t = p.timings;
			return;
		}
	}
}

static void
run1(struct rig *r, const struct job *jb, struct out *o)
{
	uint64_t id = submit(r, jb);
	REQUIRE(id);
	collect(r, id, o);
}

static int
same(const struct out *a, const struct out *b)
{
	return a->n == b->n && a->fin == b->fin && !memcmp(a->ids, b->ids, sizeof a->ids) &&
	       !memcmp(a->lp, b->lp, sizeof a->lp) && !memcmp(a->top, b->top, sizeof a->top);
}

static cJSON *
read_json(const char *path)
{
	size_t n;
	char *s = t_read_file(path, &n);
	if (!s)
		return NULL;
	cJSON *j = cJSON_Parse(s);
	free(s);
	return j;
}

// prompt and greedy ids of a fixture, concatenated twice, then the
// prompt again and the first two greedy ids: a text that repeats, so the
// drafts come at once
static int
fixture_prompt(const char *json, int32_t *p, int cap)
{
	cJSON *j = read_json(json);
	int32_t a[128];
	int n = 0;
	const char *keys[] = {"prompt_ids", "greedy_ids"};
	for (int k = 0; k < 2; k++) {
		const cJSON *it;
		cJSON_ArrayForEach(it, cJSON_GetObjectItem(j, keys[k]))
		{
			if (n < 128)
				a[n++] = (int32_t)it->valuedouble;
		}
	}
	cJSON_Delete(j);
	int m = 0;
	for (int rep = 0; rep < 2; rep++)
		for (int i = 0; i < n && m < cap; i++)
			p[m++] = a[i];
	for (int i = 0; i < n && i < 10 && m < cap; i++)
		p[m++] = a[i];
	return m;
}

static struct spec_stats total; // every fixture's speculative runs
static int n_models, n_json, n_rec;

// spec on against off on one model: greedy, greedy again from the cache,
// and sampled
static void
check_exact(const char *gguf, const int32_t *prompt, int n)
{
	char err[AD_ERRLEN] = "";
	// every draft in full: the most columns to get right (measured, the
	// in-process emu's columns cost too much on models this small to draft)
	// and 1-grams too, so the random models' own text gives drafts as well
	struct spec_opts so;
	spec_defaults(&so);
	so.col_cost = 0;
	so.ngram_min = 1;
	struct rig r;
	if (rig_start(&r, gguf, 2, 256, &so, err)) {
		CHECK(0, "%s: %s", gguf, err);
		rig_stop(&r);
		return;
	}
	const char *name = strrchr(gguf, '/') + 1;
	struct out off, on, again, s_off, s_on;
	struct job jb = {prompt, n, 40, 0, 0, SCHED_SPEC_OFF, NULL, 0};
	run1(&r, &jb, &off);
	jb.spec = SCHED_SPEC_ON;
	run1(&r, &jb, &on);
	run1(&r, &jb, &again);
	jb.temp = 0.9f;
	jb.seed = 11;
	jb.spec = SCHED_SPEC_OFF;
	run1(&r, &jb, &s_off);
	jb.spec = SCHED_SPEC_ON;
	run1(&r, &jb, &s_on);
	CHECK(off.n == 40 && same(&off, &on), "%s: greedy differs with speculation (%d and %d tokens)", name, off.n,
	      on.n);
	CHECK(same(&on, &again) && again.t.cached_tokens > 0, "%s: the cached run differs (%u cached)", name,
	      again.t.cached_tokens);
	CHECK(same(&s_off, &s_on), "%s: sampled differs with speculation", name);
	// a recurrent state (qwen35) cannot take a rejected draft back: none
	const int rec = engine_state_bytes(r.e) > 0;
	CHECK(off.t.spec.steps == 0 &&
	              (rec ? on.t.spec.drafted == 0 && s_on.t.spec.drafted == 0 : on.t.spec.drafted > 0),
	      "%s: drafted %llu (off: %llu steps)", name, (unsigned long long)on.t.spec.drafted,
	      (unsigned long long)off.t.spec.steps);
	n_rec += rec;
	spec_add(&total, &on.t.spec);
	spec_add(&total, &s_on.t.spec);
	n_models++;
	rig_stop(&r);
}

static void
fixtures_in(const char *dir)
{
	DIR *d = opendir(dir);
	REQUIRE(d, "%s", dir);
	struct dirent *de;
	char names[64][64];
	int nn = 0;
	while ((de = readdir(d)) && nn < 64) {
		size_t len = strlen(de->d_name);
		if (len > 5 && !strcmp(de->d_name + len - 5, ".json") && strcmp(de->d_name, "tolerances.json"))
			snprintf(names[nn++], sizeof names[0], "%.*s", (int)(len - 5), de->d_name);
	}
	closedir(d);
	n_json += nn;
	for (int i = 0; i < nn; i++) {
		char json[4300], gguf[4300];
		snprintf(json, sizeof json, "%s/%s.json", dir, names[i]);
		snprintf(gguf, sizeof gguf, "%s/%s.gguf", dir, names[i]);
		int32_t p[200];
		int n = fixture_prompt(json, p, 200);
		CHECK(n > 10, "%s", json);
		if (n > 10)
			check_exact(gguf, p, n);
	}
}

static void
test_exact_fixtures(void)
{
	fixtures_in(T_DATA "/models");
	fixtures_in(T_DATA "/models2");
	fprintf(stderr, "  %d fixture models: drafted %llu, accepted %llu, reached %llu\n", n_models,
	        (unsigned long long)total.drafted, (unsigned long long)total.accepted,
	        (unsigned long long)total.reached);
	CHECK(n_json >= 25 && n_models == n_json, "%d of %d models", n_models, n_json);
	CHECK(n_rec >= 1, "%d recurrent models", n_rec); // qwen35: none drafted
	// both ways out of a draft were taken
	CHECK(total.accepted > 0 && total.reached > total.accepted);
}

// stories260K: a story, then its start again
static int
story_prompt(int32_t *p, int cap)
{
	static const int32_t story[] = {1,   403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317,
	                                426, 338, 401, 396, 267, 337, 410, 408, 419, 292, 411, 322, 265, 282, 295,
	                                433, 426, 385, 328, 432, 358, 394, 261, 370, 432, 352, 266, 268, 388, 426};
	const int ns = (int)(sizeof story / sizeof story[0]);
	int m = 0;
	for (int i = 0; i < ns && m < cap; i++)
		p[m++] = story[i];
	for (int i = 1; i < 6 && m < cap; i++)
		p[m++] = story[i];
	return m;
}

static void
test_exact_stories(void)
{
	int32_t p[64];
	int n = story_prompt(p, 64);
	check_exact(STORIES, p, n);
	n_models = 0;
}

// jobs decoded together, one prefilling a long prompt beside them, stop
// ids, max_tokens, the context's end, a cancel
static void
test_batched_and_ends(void)
{
	char err[AD_ERRLEN] = "";
	struct rig r;
	REQUIRE(rig_start(&r, STORIES, 4, 128, NULL, err) == 0, "%s", err);
	int32_t p[4][64], longp[100];
	int np = story_prompt(p[0], 64);
	for (int k = 1; k < 4; k++)
		for (int i = 0; i < np; i++)
			p[k][i] = i == 0 ? 1 : p[0][1 + (i + 3 * k) % (np - 1)];
	for (int i = 0; i < 100; i++)
		longp[i] = p[0][i % np];
	longp[0] = 1;
	struct out alone[5], tog[5];
	struct job jobs[5];
	for (int k = 0; k < 4; k++)
		jobs[k] = (struct job){p[k], np, 30, k % 2 ? 0.8f : 0, 100 + (uint64_t)k, SCHED_SPEC_OFF, NULL, 0};
	jobs[4] = (struct job){longp, 100, 20, 0, 0, SCHED_SPEC_OFF, NULL, 0};
	for (int k = 0; k < 5; k++)
		run1(&r, &jobs[k], &alone[k]);
	// together: the four decode while the long one prefills in chunks
	uint64_t ids[5];
	for (int k = 0; k < 5; k++) {
		jobs[k].spec = SCHED_SPEC_DEFAULT; // the worker's default: on
		ids[k] = submit(&r, &jobs[k]);
	}
	for (int k = 0; k < 5; k++)
		collect(&r, ids[k], &tog[k]);
	struct spec_stats sum = {0};
	for (int k = 0; k < 5; k++) {
		CHECK(same(&alone[k], &tog[k]), "job %d differs when batched with speculation", k);
		spec_add(&sum, &tog[k].t.spec);
	}
	struct sched_stats ss;
	sched_stats(r.s, &ss);
	CHECK(sum.drafted > 0 && ss.fused > 0 && ss.spec.drafted >= sum.drafted, "drafted %llu, fused %llu",
	      (unsigned long long)sum.drafted, (unsigned long long)ss.fused);

	// a stop id: each token of the greedy run in turn ends it there
	struct out base, a, b;
	struct job jb = {p[0], np, 24, 0, 0, SCHED_SPEC_OFF, NULL, 0};
	run1(&r, &jb, &base);
	REQUIRE(base.n == 24);
	for (int at = 1; at < 24; at += 3) {
		int32_t stop = base.ids[at];
		int first = 0;
		while (base.ids[first] != stop)
			first++;
		struct job js = {p[0], np, 24, 0, 0, SCHED_SPEC_ON, &stop, 1};
		run1(&r, &js, &a);
		js.spec = SCHED_SPEC_OFF;
		run1(&r, &js, &b);
		CHECK(a.fin == SCHED_STOP && a.n == first && same(&a, &b), "stop at %d: %d tokens, finish %d", first,
		      a.n, a.fin);
	}
	// max_tokens
	for (int mt = 1; mt <= 12; mt++) {
		struct job jm = {p[0], np, mt, 0, 0, SCHED_SPEC_ON, NULL, 0};
		run1(&r, &jm, &a);
		CHECK(a.n == mt && a.fin == SCHED_LENGTH && !memcmp(a.ids, base.ids, (size_t)mt * sizeof a.ids[0]),
		      "max_tokens %d: %d tokens", mt, a.n);
	}
	// a cancel: what came before it is a prefix of the whole run
	struct job jx = {p[0], np, 90, 0, 0, SCHED_SPEC_ON, NULL, 0};
	run1(&r, &jx, &b);
	uint64_t id = submit(&r, &jx);
	struct sched_poll pl;
	REQUIRE(sched_poll(r.s, id, 10000, &pl, NULL, err) == 0, "%s", err);
	int got = pl.n_events;
	int ok = 1;
	for (int i = 0; i < got && i < MAXGEN; i++)
		ok &= pl.events[i].id == b.ids[i];
	free(pl.events);
	CHECK(sched_cancel(r.s, id, NULL, err) == 0, "%s", err);
	collect(&r, id, &a);
	CHECK(ok && (a.fin == SCHED_CANCELLED || a.fin == SCHED_LENGTH), "finish %d", a.fin);
	for (int i = 0; i < a.n && got + i < MAXGEN; i++)
		ok &= a.ids[i] == b.ids[got + i];
	CHECK(ok, "the tokens around the cancel are not the run's");
	rig_stop(&r);
}

// the end of the context: with a context of 40 and no prompt cut room,
// speculation never writes past it
static void
test_context_end(void)
{
	char err[AD_ERRLEN] = "";
	struct rig r;
	REQUIRE(rig_start(&r, STORIES, 2, 40, NULL, err) == 0, "%s", err);
	int32_t p[64];
	int np = story_prompt(p, 64);
	struct out a, b;
	struct job j = {p, np, 80, 0, 0, SCHED_SPEC_ON, NULL, 0};
	run1(&r, &j, &a);
	j.spec = SCHED_SPEC_OFF;
	run1(&r, &j, &b);
	// the prompt is cut to one token; the generation fills the context up
	// to the largest reply of cpu-worker/fit.h (max_seq - 2)
	CHECK(a.fin == SCHED_LENGTH && a.n == 38 && same(&a, &b), "%d tokens (off: %d), finish %d", a.n, b.n, a.fin);
	rig_stop(&r);
}

// the counters of a live run are spec_probe's replay of its tokens
static void
test_probe_live(void)
{
	char err[AD_ERRLEN] = "";
	struct spec_opts so;
	spec_defaults(&so);
	so.col_cost = 0.1f;
	struct rig r;
	REQUIRE(rig_start(&r, STORIES, 1, 256, &so, err) == 0, "%s", err);
	int32_t p[64];
	int np = story_prompt(p, 64);
	struct out a;
	struct job j = {p, np, 90, 0, 0, SCHED_SPEC_DEFAULT, NULL, 0};
	run1(&r, &j, &a);
	REQUIRE(a.n == 90);
	int32_t scratch[256];
	struct spec_stats st;
	int calls;
	spec_probe(&so, p, np, a.ids, a.n, 90, 256, scratch, &st, &calls);
	CHECK(st.steps == a.t.spec.steps && st.drafted == a.t.spec.drafted && st.accepted == a.t.spec.accepted,
	      "probe %llu/%llu/%llu, live %llu/%llu/%llu", (unsigned long long)st.steps, (unsigned long long)st.drafted,
	      (unsigned long long)st.accepted, (unsigned long long)a.t.spec.steps, (unsigned long long)a.t.spec.drafted,
	      (unsigned long long)a.t.spec.accepted);
	CHECK(!memcmp(st.drafted_n, a.t.spec.drafted_n, sizeof st.drafted_n) &&
	      !memcmp(st.accepted_n, a.t.spec.accepted_n, sizeof st.accepted_n));
	// the decode calls: one per token, less one per accepted draft token
	CHECK(calls == a.n - 1 - (int)a.t.spec.accepted && a.t.spec.accepted > 0, "%d calls, %llu accepted", calls,
	      (unsigned long long)a.t.spec.accepted);
	rig_stop(&r);
}

// --- the distribution ---------------------------------------------------------------------------

#define SEEDS 6000
#define TEMP 1.5f // spreads the second token: drafts are accepted about 2 times in 3

// the sampler's probabilities at temperature t, top_k/top_p/min_p off:
// softmax at t over the logits within 20 t of the best (sample.h's cut)
static void
probs(const float *l, int V, double *p)
{
	const double t = TEMP;
	float mx = -INFINITY;
	for (int i = 0; i < V; i++)
		mx = l[i] > mx ? l[i] : mx;
	double s = 0;
	for (int i = 0; i < V; i++) {
		p[i] = l[i] >= mx - 20 * t ? exp(((double)l[i] - mx) / t) : 0;
		s += p[i];
	}
	for (int i = 0; i < V; i++)
		p[i] /= s;
}

static float *
eval_last(struct rig *r, const int32_t *ids, int n)
{
	char err[AD_ERRLEN] = "";
	float *l = NULL;
	int rows = 0;
	REQUIRE(sched_eval(r->s, ids, n, 0, 1, 0, &l, &rows, NULL, err) == 0 && rows == 1, "%s", err);
	return l;
}

#define PAIRS 24

static void
test_distribution(void)
{
	char err[AD_ERRLEN] = "";
	struct spec_opts so; // every draft verified
	spec_defaults(&so);
	so.col_cost = 0;
	struct rig r;
	REQUIRE(rig_start(&r, STORIES, 4, 256, &so, err) == 0, "%s", err);
	const int V = r.V;
	int32_t p[80];
	int np = story_prompt(p, 64);
	// the first token: the prompt's most likely (it starts a draft)
	float *l0 = eval_last(&r, p, np);
	double *pr = malloc(sizeof(double) * (size_t)V), *pr2 = malloc(sizeof(double) * (size_t)V);
	REQUIRE(pr && pr2);
	probs(l0, V, pr);
	int x = 0;
	for (int i = 0; i < V; i++)
		x = pr[i] > pr[x] ? i : x;
	free(l0);
	// the exact law of the two tokens after x: p(a | x) p(b | x a)
	p[np] = x;
	float *l1 = eval_last(&r, p, np + 1);
	probs(l1, V, pr);
	free(l1);
	static double joint[512][512];
	REQUIRE(V <= 512);
	for (int a = 0; a < V; a++) {
		memset(joint[a], 0, sizeof joint[a]);
		if (pr[a] < 1e-4)
			continue;
		p[np + 1] = a;
		float *l2 = eval_last(&r, p, np + 2);
		probs(l2, V, pr2);
		free(l2);
		for (int b = 0; b < V; b++)
			joint[a][b] = pr[a] * pr2[b];
	}
	// SEEDS jobs of 3 tokens at temperature TEMP, 4 at a time
	static int cnt[512][512];
	memset(cnt, 0, sizeof cnt);
	int kept = 0;
	uint64_t drafted = 0, accepted = 0;
	for (int s0 = 0; s0 < SEEDS; s0 += 4) {
		uint64_t ids[4];
		for (int k = 0; k < 4; k++) {
			struct sched_gen g = {.prompt = p, .n_prompt = np, .max_tokens = 3};
			sample_defaults(&g.sp);
			g.sp.temperature = TEMP;
			g.sp.seed = 7919u * (uint64_t)(s0 + k) + 1;
			g.sp.has_seed = 1;
			struct sched_started st;
			REQUIRE(sched_generate(r.s, &g, &st, NULL, err) == 0, "%s", err);
			ids[k] = st.job;
		}
		for (int k = 0; k < 4; k++) {
			struct out o;
			collect(&r, ids[k], &o);
			drafted += o.t.spec.drafted;
			accepted += o.t.spec.accepted;
			if (o.n == 3 && o.ids[0] == x) {
				cnt[o.ids[1]][o.ids[2]]++;
				kept++;
			}
		}
	}
	// the PAIRS likeliest pairs, and the rest as one bucket
	int pa[PAIRS], pb[PAIRS];
	for (int q = 0; q < PAIRS; q++)
		pa[q] = -1;
	for (int a = 0; a < V; a++)
		for (int b = 0; b < V; b++) {
			if (joint[a][b] <= 0)
				continue;
			int q = PAIRS;
			while (q > 0 && (pa[q - 1] < 0 || joint[a][b] > joint[pa[q - 1]][pb[q - 1]]))
				q--;
			if (q == PAIRS)
				continue;
			memmove(pa + q + 1, pa + q, (size_t)(PAIRS - 1 - q) * sizeof *pa);
			memmove(pb + q + 1, pb + q, (size_t)(PAIRS - 1 - q) * sizeof *pb);
			pa[q] = a;
			pb[q] = b;
		}
	// the cells: the likeliest pairs expected at least 5 times
	int cells = 0;
	while (cells < PAIRS && pa[cells] >= 0 && kept * joint[pa[cells]][pb[cells]] >= 5)
		cells++;
	double used = 0;
	for (int q = 0; q < cells; q++)
		used += joint[pa[q]][pb[q]];
	double chi = 0, min_e = 1e9;
	int seen = 0;
	for (int q = 0; q < cells; q++) {
		double e = kept * joint[pa[q]][pb[q]], o = cnt[pa[q]][pb[q]];
		min_e = e < min_e ? e : min_e;
		chi += (o - e) * (o - e) / e;
		seen += cnt[pa[q]][pb[q]];
	}
	double e_rest = kept * (1 - used), o_rest = kept - seen;
	chi += (o_rest - e_rest) * (o_rest - e_rest) / e_rest;
	// cells + 1 bins of known probabilities: cells degrees of freedom; the
	// bound is their 1e-9 tail (Wilson-Hilferty, z = 5.998: 91.5 exactly for
	// 24, this gives 92.5), where the statistic's mean is the cells
	const double k = cells, z = 5.998, w = 1 - 2 / (9 * k) + z * sqrt(2 / (9 * k)), bound = k * w * w * w;
	fprintf(stderr,
	        "  %d of %d seeds began with %d: chi-square %.1f over %d + 1 cells (bound %.1f, smallest "
	        "expected %.1f, the rest %.1f); drafted %llu, accepted %llu\n",
	        kept, SEEDS, x, chi, cells, bound, min_e, e_rest, (unsigned long long)drafted,
	        (unsigned long long)accepted);
	CHECK(kept > SEEDS / 4, "%d", kept);
	CHECK(cells >= 8 && e_rest >= 5, "%d cells, %.1f in the rest: too few samples to tell", cells, e_rest);
	CHECK(chi < bound, "chi-square %.1f: the tokens after a draft do not follow the model", chi);
	// the drafts were both accepted and rejected
	CHECK(accepted > 0 && accepted < drafted, "%llu of %llu", (unsigned long long)accepted,
	      (unsigned long long)drafted);
	free(pr);
	free(pr2);
	rig_stop(&r);
}

// gen_timings_add/sub (common/gen-types.h): every stage and count, the
// drafts added, a job's cached tokens kept
static void
test_timings_sum(void)
{
	struct gen_timings a = {.queue_ns = 5,
	                        .prefill_ns = 100,
	                        .decode_ns = 200,
	                        .kernel_ns = 70,
	                        .ipc_ns = 9,
	                        .attention_ns = 8,
	                        .moe_ns = 7,
	                        .sampling_ns = 6,
	                        .cpu_other_ns = 4,
	                        .prefill_tokens = 12,
	                        .decode_tokens = 30,
	                        .cached_tokens = 3,
	                        .kernel_calls = 40,
	                        .round_trips = 20,
	                        .dec_kernel_ns = 50,
	                        .dec_ipc_ns = 6,
	                        .dec_attention_ns = 5,
	                        .dec_moe_ns = 3,
	                        .dec_other_ns = 2,
	                        .dec_round_trips = 11};
	struct gen_timings b = a, sum, back;
	b.cached_tokens = 9;
	a.spec.drafted = 4;
	b.spec.drafted = 6;
	b.spec.drafted_n[2] = 6;
	gen_timings_add(&sum, &a, &b);
	CHECK(sum.prefill_ns == 200 && sum.decode_ns == 400 && sum.kernel_ns == 140 && sum.queue_ns == 10 &&
	      sum.moe_ns == 14 && sum.cpu_other_ns == 8 && sum.decode_tokens == 60 && sum.round_trips == 40 &&
	      sum.kernel_calls == 80);
	CHECK(sum.dec_kernel_ns == 100 && sum.dec_ipc_ns == 12 && sum.dec_attention_ns == 10 && sum.dec_moe_ns == 6 &&
	      sum.dec_other_ns == 4 && sum.dec_round_trips == 22);
	CHECK(sum.cached_tokens == 3, "cached %u", sum.cached_tokens);
	CHECK(sum.spec.drafted == 10 && sum.spec.drafted_n[2] == 6);
	gen_timings_sub(&back, &sum, &b);
	CHECK(back.prefill_ns == a.prefill_ns && back.decode_tokens == a.decode_tokens &&
	      back.sampling_ns == a.sampling_ns && back.round_trips == a.round_trips && back.queue_ns == a.queue_ns &&
	      back.dec_kernel_ns == a.dec_kernel_ns && back.dec_round_trips == a.dec_round_trips);
}

int
main(void)
{
	T_RUN(test_find);
	T_RUN(test_timings_sum);
	T_RUN(test_len);
	T_RUN(test_cost);
	T_RUN(test_probe);
	T_RUN(test_exact_stories);
	T_RUN(test_exact_fixtures);
	T_RUN(test_batched_and_ends);
	T_RUN(test_context_end);
	T_RUN(test_probe_live);
	T_RUN(test_distribution);
	return t_done();
}
