// bench-grammar.c - what a grammar costs per decode step at the Qwen3
// vocabulary (151,936 tokens).
//
//   bench-grammar [decode_ms]
//
// A JSON reply (a tool call's arguments, then a json_schema answer) is
// tokenized with Qwen3's tokenizer and fed back as if the model sampled it,
// under llama.cpp's json.gbnf and under the grammar the schema compiler
// makes for a tool call. Per step, with a fresh gram per run (as each
// request gets), 5 runs:
//   common case: the sampled token is allowed: gram_allows + gram_accept
//                (the cheap path), tables filled on first use;
//   worst case:  the sampled token is rejected: the mask of every token
//                (a trie pass over fresh tables, no mask cache), then the
//                accept; also the mask again over filled tables;
//   sampling:    gram_sample against sample_next on the same rows (a
//                random row, and a row whose best token the grammar
//                rejects), the sampler's own cost included.
// Prints the median and the range over the runs, the per-step median, and
// each as a share of a decode token's time: decode_ms (default 28.7, the
// Qwen2.5-0.5B-shape Q8_0 model's 34.9 tok/s in docs/RESULTS.md; measure
// yours with `anedvd run --json`). The load average is printed too.
// Built, not run by ctest.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "gbnf.h"
#include "grammar.h"
#include "sample.h"
#include "tokenizer.h"
#include "vocab-local.h"

#ifndef T_DATA
#define T_DATA "tests/data"
#endif
#ifndef T_TOKDATA
#define T_TOKDATA "tests/tokdata"
#endif

enum { RUNS = 5 };

static double
now(void)
{
	return (double)ad_now_ns() / 1e9;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void
stats(double *x, int n, double out[3])
{
	qsort(x, (size_t)n, sizeof *x, cmp_double);
	out[0] = x[n / 2];
	out[1] = x[0];
	out[2] = x[n - 1];
}

static char *
slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *s = malloc((size_t)n + 1);
	if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
		free(s);
		s = NULL;
	}
	if (s)
		s[n] = 0;
	fclose(f);
	return s;
}

struct run {
	const char *name;
	struct gbnf *g;
	int32_t *ids;
	size_t n;
};

static double decode_ms = 28.7;

static void
row(const char *what, double ms[3], double per_step_median)
{
	printf("  %-44s %9.4f ms (%.4f..%.4f)  %6.2f%% of a decode token", what, ms[0], ms[1], ms[2],
	       100.0 * ms[0] / decode_ms);
	if (per_step_median >= 0)
		printf("; median step %.4f ms", per_step_median);
	printf("\n");
}

static int
bench(struct run *r, const struct gram_vocab *v, const struct tokenizer *t)
{
	char err[AD_ERRLEN];
	int32_t stop[2] = {tok_eos(t), tok_eot(t)};
	int nv = gram_vocab_size(v);
	uint64_t *mask = malloc((size_t)(nv + 63) / 64 * 8);
	double common[RUNS], worst[RUNS], warm[RUNS];
	double *step = malloc(r->n * RUNS * sizeof *step), *wstep = malloc(r->n * RUNS * sizeof *wstep);
	size_t ns = 0, nw = 0;
	int allowed_total = 0;
	for (int k = 0; k < RUNS; k++) {
		struct gram_opts o = {.g = r->g, .v = v, .stop = stop, .n_stop = 2, .no_cache = 1};
		struct gram *m = gram_new(&o, err);
		if (!m)
			return fprintf(stderr, "%s: %s\n", r->name, err), -1;
		double t0 = now();
		for (size_t i = 0; i < r->n; i++) {
			double s0 = now();
			if (gram_allows(m, r->ids[i], err) != 1 || gram_accept(m, r->ids[i], err))
				return fprintf(stderr, "%s: token %zu (%d): %s\n", r->name, i, r->ids[i], err), -1;
			step[ns++] = (now() - s0) * 1e3;
		}
		common[k] = (now() - t0) * 1e3 / (double)r->n;
		gram_free(m);
		// the worst case: a mask at every step, over fresh tables
		m = gram_new(&o, err);
		t0 = now();
		for (size_t i = 0; i < r->n; i++) {
			double s0 = now();
			int c = gram_mask(m, mask, err);
			if (c < 0 || gram_accept(m, r->ids[i], err))
				return fprintf(stderr, "%s: %s\n", r->name, err), -1;
			wstep[nw++] = (now() - s0) * 1e3;
			if (k == 0)
				allowed_total += c;
		}
		worst[k] = (now() - t0) * 1e3 / (double)r->n;
		gram_free(m);
	}
	// warm: the second mask at each state runs over the transitions the
	// first one filled (the mask cache stays off)
	{
		struct gram_opts o = {.g = r->g, .v = v, .stop = stop, .n_stop = 2, .no_cache = 1};
		for (int k = 0; k < RUNS; k++) {
			struct gram *m = gram_new(&o, err);
			for (size_t i = 0; i < r->n; i++)
				gram_mask(m, mask, err), gram_accept(m, r->ids[i], err);
			gram_free(m);
			m = gram_new(&o, err);
			double t0 = now();
			size_t reps = 0;
			for (size_t i = 0; i < r->n; i++) {
				gram_mask(m, mask, err);
				gram_mask(m, mask, err); // the second over this state's filled row
				reps++;
				gram_accept(m, r->ids[i], err);
			}
			warm[k] = (now() - t0) * 1e3 / (double)reps;
			gram_free(m);
		}
	}
	double c[3], w[3], wm[3], sm[3], wsm[3];
	stats(common, RUNS, c);
	stats(worst, RUNS, w);
	stats(warm, RUNS, wm);
	stats(step, (int)ns, sm);
	stats(wstep, (int)nw, wsm);
	printf("%s: %zu tokens, %d allowed per step on average\n", r->name, r->n, allowed_total / (int)r->n);
	row("common case (allows + accept) per step", c, sm[0]);
	printf("  %-44s %9.4f ms\n", "  slowest single step", sm[2]);
	row("worst case (cold mask + accept) per step", w, wsm[0]);
	printf("  %-44s %9.4f ms\n", "  slowest single step", wsm[2]);
	row("two masks per step, the second warm", wm, -1);
	free(step);
	free(wstep);
	free(mask);
	return 0;
}

// gram_sample against sample_next on random rows and on rows whose best
// token the grammar rejects
static void
bench_sample(struct run *r, const struct gram_vocab *v, const struct tokenizer *t)
{
	char err[AD_ERRLEN];
	int nv = gram_vocab_size(v);
	int32_t stop[2] = {tok_eos(t), tok_eot(t)};
	float *rowv = malloc((size_t)nv * sizeof *rowv);
	uint64_t seed = 99;
	for (int i = 0; i < nv; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		rowv[i] = (float)((seed >> 33) % 3000) / 300.0f;
	}
	struct sample_params p;
	sample_defaults(&p);
	p.temperature = 0.7f;
	p.top_k = 40;
	p.top_p = 0.9f;
	double plain[RUNS], cheap[RUNS], masked[RUNS];
	for (int k = 0; k < RUNS; k++) {
		struct sampler *s = sample_new(&p, nv, err);
		double t0 = now();
		for (size_t i = 0; i < r->n; i++)
			sample_next(s, rowv, err);
		plain[k] = (now() - t0) * 1e3 / (double)r->n;
		sample_free(s);
		// the row favours the text's own token: the cheap path
		s = sample_new(&p, nv, err);
		struct gram_opts o = {.g = r->g, .v = v, .stop = stop, .n_stop = 2};
		struct gram *m = gram_new(&o, err);
		double tot = 0;
		for (size_t i = 0; i < r->n && !gram_done(m); i++) {
			float keep = rowv[r->ids[i]];
			rowv[r->ids[i]] = 1000.0f;
			double t1 = now();
			gram_sample(m, s, rowv, err);
			tot += now() - t1;
			rowv[r->ids[i]] = keep;
		}
		cheap[k] = tot * 1e3 / (double)r->n;
		gram_free(m);
		sample_free(s);
		// the row favours a token the grammar rejects (an emoji-ish id
		// near the end), so every step masks (the mask cache on)
		s = sample_new(&p, nv, err);
		m = gram_new(&o, err);
		tot = 0;
		size_t steps = 0;
		for (size_t i = 0; i < r->n && !gram_done(m); i++, steps++) {
			float keep = rowv[nv - 300];
			rowv[nv - 300] = 1000.0f;
			double t1 = now();
			int32_t id = gram_sample(m, s, rowv, err);
			tot += now() - t1;
			rowv[nv - 300] = keep;
			if (id < 0)
				break;
		}
		masked[k] = steps ? tot * 1e3 / (double)steps : 0;
		gram_free(m);
		sample_free(s);
	}
	double a[3], b[3], c[3];
	stats(plain, RUNS, a);
	stats(cheap, RUNS, b);
	stats(masked, RUNS, c);
	printf("%s, sampling (T 0.7, top_k 40, top_p 0.9):\n", r->name);
	row("sample_next alone", a, -1);
	row("gram_sample, the best token allowed", b, -1);
	row("gram_sample, the best token rejected", c, -1);
	free(rowv);
}

int
main(int argc, char **argv)
{
	if (argc > 1)
		decode_ms = atof(argv[1]);
	char err[AD_ERRLEN];
	double la[3] = {0};
	FILE *f = fopen("/proc/loadavg", "r");
	if (f) {
		if (fscanf(f, "%lf %lf %lf", &la[0], &la[1], &la[2]) != 3)
			la[0] = -1;
		fclose(f);
	}
	printf("load average %.2f %.2f %.2f; a decode token: %.1f ms\n", la[0], la[1], la[2], decode_ms);
	struct tokenizer *t = tok_load(T_TOKDATA "/qwen3", err);
	if (!t)
		return fprintf(stderr, "bench-grammar: %s\n", err), 1;
	double t0 = now();
	struct gram_vocab *v = gram_vocab_from_tokenizer(t, 151936, err);
	if (!v)
		return fprintf(stderr, "bench-grammar: %s\n", err), 1;
	printf("Qwen3 vocabulary: %d tokens, trie of %d nodes built in %.1f ms (once per model)\n", gram_vocab_size(v),
	       gram_vocab_nodes(v), (now() - t0) * 1e3);
	const char *json_text = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3, "
				"\"units\": \"celsius\", \"note\": \"bring an umbrella \xe2\x98\x94 if it rains\"}}";
	char *json_g = slurp(T_DATA "/grammars/json.gbnf");
	// a tool call's grammar as the schema compiler writes it
	const char *tool_g =
		"root ::= \"{\" ws \"\\\"name\\\"\" ws \":\" ws \"\\\"get_weather\\\"\" ws \",\" ws \"\\\"arguments\\\"\" ws \":\" ws args ws \"}\"\n"
		"args ::= \"{\" ws \"\\\"city\\\"\" ws \":\" ws string ws \",\" ws \"\\\"days\\\"\" ws \":\" ws int ws "
		"\",\" ws \"\\\"units\\\"\" ws \":\" ws (\"\\\"celsius\\\"\" | \"\\\"fahrenheit\\\"\") ws \",\" ws "
		"\"\\\"note\\\"\" ws \":\" ws string ws \"}\"\n"
		"string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\"\n"
		"int ::= \"-\"? ([0-9] | [1-9] [0-9]{1,15})\n"
		"ws ::= | \" \" | \"\\n\" [ \\t]{0,16}\n";
	struct run runs[2] = {{.name = "json.gbnf"}, {.name = "a tool call's grammar"}};
	const char *src[2] = {json_g, tool_g};
	int32_t *ids = NULL;
	size_t n = 0;
	if (tok_encode(t, json_text, strlen(json_text), 0, 0, &ids, &n, err))
		return fprintf(stderr, "bench-grammar: %s\n", err), 1;
	for (int i = 0; i < 2; i++) {
		if (!src[i] || gbnf_compile(src[i], strlen(src[i]), NULL, NULL, NULL, &runs[i].g, err))
			return fprintf(stderr, "bench-grammar: %s: %s\n", runs[i].name, src[i] ? err : "missing"), 1;
		runs[i].ids = ids;
		runs[i].n = n;
		if (bench(&runs[i], v, t))
			return 1;
		bench_sample(&runs[i], v, t);
		gbnf_free(runs[i].g);
	}
	free(ids);
	free(json_g);
	gram_vocab_free(v);
	tok_free(t);
	return 0;
}
