// bench-pcache.c - time to first token with and without a prefix-cache hit.
//
//   bench-pcache MODEL.gguf [REPEATS] [PROMPT] [CLIENTS] [SYSTEM]
//
// On the in-process emu backend (kb_local, width 64), through the
// scheduler with a prefix cache of 1 GiB in blocks of 16:
//   - cold: a PROMPT-token prompt (default 1500) no earlier request shares;
//   - warm: the same prompt with a new last message (its last 32 tokens
//     changed), right after the cold one;
//   - CLIENTS (default 8) requests submitted together that share a
//     SYSTEM-token prefix (default 1000) and differ in 64 tokens after it:
//     the prompt tokens prefilled in all (what the engine computed) beside
//     the prompt tokens sent;
//   - n choices: CLIENTS requests on one fresh PROMPT-token prompt
//     submitted together: the first prefills it, the others fork from its
//     sequence (engine_seq_fork): the rows they share and the bytes of KV
//     rows a copy would have cost, the prompt tokens prefilled, the time
//     until every one has its first token.
// Each time is the median and range (min..max) of REPEATS (default 5, at
// least 5) runs; every run uses prompts of its own. Built, not run by ctest.
// For the Qwen2.5-0.5B shape:
//   build/tests/gen-model qwen2.5-0.5b q8_0 1 /tmp/qwen.gguf
//   build/tests/bench-pcache /tmp/qwen.gguf
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "engine.h"
#include "kernels.h"
#include "log.h"
#include "model.h"
#include "scheduler.h"

static double
now(void)
{
	return (double)ad_now_ns() / 1e9;
}

static int
cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void
report(const char *what, double *v, int n, const char *unit, double scale)
{
	qsort(v, (size_t)n, sizeof *v, cmp);
	double med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
	printf("  %-44s median %9.1f %s  range %.1f .. %.1f  (n=%d)\n", what, med * scale, unit, v[0] * scale,
	       v[n - 1] * scale, n);
}

struct run {
	uint64_t job;
	double t0, ttft;
	int cached, prefilled;
};

static int
submit(struct sched *s, const int32_t *p, int n, struct run *r, char *err)
{
	struct sched_gen g = {.prompt = p, .n_prompt = n, .max_tokens = 4};
	sample_defaults(&g.sp);
	g.sp.temperature = 0;
	struct sched_started st;
	r->t0 = now();
	r->ttft = 0;
	if (sched_generate(s, &g, &st, NULL, err))
		return -1;
	r->job = st.job;
	return 0;
}

static int
wait_run(struct sched *s, struct run *r, char *err)
{
	for (;;) {
		struct sched_poll p;
		if (sched_poll(s, r->job, 60000, &p, NULL, err))
			return -1;
		if (p.n_events && !r->ttft)
			r->ttft = now() - r->t0;
		free(p.events);
		if (p.finish != SCHED_RUNNING) {
			r->cached = (int)p.timings.cached_tokens;
			r->prefilled = (int)p.timings.prefill_tokens;
			if (p.finish == SCHED_ERROR)
				return snprintf(err, AD_ERRLEN, "%s", p.msg), -1;
			return 0;
		}
	}
}

// a prompt of n tokens: run `salt` picks the prefix, `tail` the end
static void
fill(int32_t *p, int n, int V, int salt, int from, int tail)
{
	for (int i = from; i < n; i++)
		p[i] = 1 + (int)(((uint64_t)(i + 1) * 2654435761u + (uint64_t)salt * 40503u + (uint64_t)tail * 977u) %
		                 (uint64_t)(V - 1));
}

int
main(int argc, char **argv)
{
	const char *path = argc > 1 ? argv[1] : NULL;
	int reps = argc > 2 ? atoi(argv[2]) : 5, P = argc > 3 ? atoi(argv[3]) : 1500;
	int C = argc > 4 ? atoi(argv[4]) : 8, S = argc > 5 ? atoi(argv[5]) : 1000;
	if (!path || reps < 5 || P < 64 || C < 1 || C > 64 || S < 16) {
		fprintf(stderr,
		        "usage: bench-pcache MODEL.gguf [REPEATS >= 5] [PROMPT >= 64] [CLIENTS 1..64] [SYSTEM >= 16]\n");
		return 2;
	}
	setenv("ANEDVD_LOG", "warn", 0); // not a line per request
	ad_log_init("bench-pcache");
	char err[AD_ERRLEN] = "";
	struct model m;
	if (model_load(&m, path, err)) {
		fprintf(stderr, "bench-pcache: %s\n", err);
		return 1;
	}
	struct kb_opts ko = {.width = 64, .threads = 2};
	struct kernel_backend *kb = kb_local_new(&m, &ko, err);
	int ctx = P + 64 > S + 64 + 8 ? P + 64 : S + 64 + 8;
	struct engine_opts eo = {.max_seq = ctx, .threads = 1};
	struct engine *e = kb ? engine_new(&m, kb, &eo, err) : NULL;
	struct sched_opts so = {.parallel = C, .queue = 64, .cache_mem = (size_t)1 << 30, .cache_block = 16};
	struct sched *s = e ? sched_new(e, &so, err) : NULL;
	if (!s) {
		fprintf(stderr, "bench-pcache: %s\n", err);
		return 1;
	}
	const int V = engine_n_vocab(e);
	int32_t *p = malloc((size_t)(ctx + 64) * sizeof *p);
	int32_t **cp = calloc((size_t)C, sizeof *cp);
	struct run *runs = calloc((size_t)C, sizeof *runs);
	double *cold = calloc((size_t)reps, sizeof(double)), *warm = calloc((size_t)reps, sizeof(double));
	double *shared = calloc((size_t)reps, sizeof(double)), *pre = calloc((size_t)reps, sizeof(double));
	if (!p || !cp || !runs || !cold || !warm || !shared || !pre)
		return 1;
	int warm_cached = 0;
	printf("prefix cache: %s (%d layers), emu, width 64; time to first token (4 tokens generated)\n", path,
	       (int)m.hp.n_layer);
	for (int r = 0; r < reps; r++) {
		struct run x;
		fill(p, P, V, r + 1, 0, 0);
		if (submit(s, p, P, &x, err) || wait_run(s, &x, err))
			goto fail;
		cold[r] = x.ttft;
		fill(p, P, V, r + 1, P - 32, 1);
		if (submit(s, p, P, &x, err) || wait_run(s, &x, err))
			goto fail;
		warm[r] = x.ttft;
		warm_cached = x.cached;
	}
	char what[96];
	snprintf(what, sizeof what, "cold, %d-token prompt", P);
	report(what, cold, reps, "ms", 1e3);
	snprintf(what, sizeof what, "warm, new last 32 tokens (%d cached)", warm_cached);
	report(what, warm, reps, "ms", 1e3);
	double speedup[64];
	for (int r = 0; r < reps && r < 64; r++)
		speedup[r] = cold[r] / warm[r];
	report("cold / warm (same run)", speedup, reps < 64 ? reps : 64, "x ", 1);

	for (int i = 0; i < C; i++)
		if (!(cp[i] = malloc((size_t)(S + 64) * sizeof **cp)))
			return 1;
	long sent = 0, prefilled = 0;
	for (int r = 0; r < reps; r++) {
		double t0 = now();
		sent = prefilled = 0;
		for (int i = 0; i < C; i++) {
			fill(cp[i], S, V, 1000 + r, 0, 0);
			fill(cp[i], S + 64, V, 1000 + r, S, 2 + i);
			if (submit(s, cp[i], S + 64, &runs[i], err))
				goto fail;
		}
		for (int i = 0; i < C; i++) {
			if (wait_run(s, &runs[i], err))
				goto fail;
			sent += S + 64;
			prefilled += runs[i].prefilled;
		}
		shared[r] = now() - t0;
		pre[r] = (double)prefilled;
	}
	snprintf(what, sizeof what, "%d clients, %d-token shared prefix: all done", C, S);
	report(what, shared, reps, "ms", 1e3);
	printf("  prompt tokens: %ld sent, %.0f prefilled (median; one prefix + the suffixes would be %d)\n", sent,
	       pre[reps / 2], S + C * 64);
	double *choice = calloc((size_t)reps, sizeof(double));
	if (!choice)
		return 1;
	struct sched_stats st0, st;
	sched_stats(s, &st0);
	long cpre = 0;
	for (int r = 0; r < reps; r++) {
		fill(p, P, V, 5000 + r, 0, 0);
		double t0 = now(), last = 0;
		cpre = 0;
		for (int i = 0; i < C; i++)
			if (submit(s, p, P, &runs[i], err))
				goto fail;
		for (int i = 0; i < C; i++) {
			if (wait_run(s, &runs[i], err))
				goto fail;
			last = runs[i].t0 + runs[i].ttft > last ? runs[i].t0 + runs[i].ttft : last;
			cpre += runs[i].prefilled;
		}
		choice[r] = last - t0;
	}
	sched_stats(s, &st);
	snprintf(what, sizeof what, "n = %d choices, %d-token prompt: every first token", C, P);
	report(what, choice, reps, "ms", 1e3);
	printf("  forks: %llu, sharing %llu rows: %.1f MiB of KV rows not copied (%zu bytes a row); prompt tokens "
	       "prefilled %ld of %d (last run)\n",
	       (unsigned long long)(st.forks - st0.forks), (unsigned long long)(st.fork_rows - st0.fork_rows),
	       (double)(st.fork_rows - st0.fork_rows) * (double)engine_kv_row_bytes(e) / (1 << 20),
	       engine_kv_row_bytes(e), cpre, C * P);
	free(choice);
	printf("  cache: %llu lookups, %llu hit tokens, %d blocks, %.1f MiB, %llu evictions\n",
	       (unsigned long long)st.cache.lookups, (unsigned long long)st.cache.hit_tokens, st.cache.blocks,
	       (double)st.cache.bytes / (1 << 20), (unsigned long long)st.cache.evictions);
	sched_free(s);
	engine_free(e);
	kb->free(kb);
	model_free(&m);
	return 0;
fail:
	fprintf(stderr, "bench-pcache: %s\n", err);
	return 1;
}
