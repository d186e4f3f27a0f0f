// bench-sample.c - time per token of the sampler, fast against reference.
//
//   bench-sample [tokens [ref_tokens]]
//
// For vocabularies of 32000 and 151936 at T 0, 0.3, 0.7 and 1.0 (top_k 40,
// top_p 0.9; then two configurations without top-k, and the WebUI's
// repeat_penalty 1.15 over a window of 64), prints the median and
// the range over 5 runs of `tokens` (default 200) draws for sample_next and
// of ref_tokens (default: tokens) for sample_ref, and how many candidates survive the cut at max - 20 T. The
// rows are synthetic: N(0, 3) logits with three tokens at 18-20, which puts
// the cut near the middle of the vocabulary at T 1. Built, not run by ctest.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "sample.h"

enum { ROWS = 16, RUNS = 5, PROMPT = 64 };

static int32_t prompt[PROMPT];

static uint64_t rng = 12345;

static double
unif(void)
{
	uint64_t z = (rng += 0x9e3779b97f4a7c15u);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return (double)((z ^ (z >> 31)) >> 11) * 0x1p-53;
}

static double
now(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

// ms per token: median, min, max over RUNS runs of n draws, then the median
// of the thread's CPU time (below the wall time when the machine is busy)
static int
timed(const struct sample_params *p, int nv, float **rows, int n, int ref, double out[4])
{
	char err[AD_ERRLEN];
	double t[RUNS], cpu[RUNS];
	for (int r = 0; r < RUNS; r++) {
		struct sampler *s = sample_new(p, nv, err);
		if (!s) {
			fprintf(stderr, "bench-sample: %s\n", err);
			return -1;
		}
		sample_accept(s, prompt, PROMPT, err);
		double t0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_THREAD_CPUTIME_ID);
		for (int i = 0; i < n; i++) {
			int32_t id = ref ? sample_ref(s, rows[i % ROWS], err) : sample_next(s, rows[i % ROWS], err);
			if (id < 0) {
				fprintf(stderr, "bench-sample: %s\n", err);
				sample_free(s);
				return -1;
			}
		}
		t[r] = (now(CLOCK_MONOTONIC) - t0) * 1e3 / n;
		cpu[r] = (now(CLOCK_THREAD_CPUTIME_ID) - c0) * 1e3 / n;
		sample_free(s);
	}
	qsort(t, RUNS, sizeof *t, cmp_double);
	qsort(cpu, RUNS, sizeof *cpu, cmp_double);
	out[0] = t[RUNS / 2], out[1] = t[0], out[2] = t[RUNS - 1], out[3] = cpu[RUNS / 2];
	return 0;
}

int
main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 200, nref = argc > 2 ? atoi(argv[2]) : n;
	if (n < 1 || nref < 1) {
		fprintf(stderr, "usage: bench-sample [tokens [ref_tokens]]\n");
		return 2;
	}
	static const int vocabs[] = {32000, 151936};
	static const float temps[] = {0.0f, 0.3f, 0.7f, 1.0f};
	static const struct {
		int k;
		float p, rep;
	} cfgs[] = {{40, 0.9f, 1.0f}, {0, 0.9f, 1.0f}, {0, 1.0f, 1.0f}, {40, 0.9f, 1.15f}};
	enum { NCFG = sizeof cfgs / sizeof cfgs[0] };
	printf("%d runs of %d tokens (ref: %d); wall ms/token median [min-max] (median CPU ms)\n", RUNS, n, nref);
	printf("%7s %4s %5s %5s %4s %15s %35s %35s %7s\n", "vocab", "T", "top_k", "top_p", "rep", "cand avg/max",
	       "fast", "ref", "ref/fast");
	for (int v = 0; v < 2; v++) {
		int nv = vocabs[v];
		float *rows[ROWS];
		for (int r = 0; r < ROWS; r++) {
			rows[r] = malloc((size_t)nv * sizeof **rows);
			if (!rows[r])
				return 1;
			for (int i = 0; i < nv; i++) {
				double u = unif() + 1e-300, w = unif();
				rows[r][i] = (float)(3.0 * sqrt(-2.0 * log(u)) * cos(6.283185307179586 * w));
			}
			for (int j = 0; j < 3; j++)
				rows[r][(int)(unif() * nv)] = 18.0f + (float)j;
		}
		for (int i = 0; i < PROMPT; i++)
			prompt[i] = i % 4 ? (int32_t)(unif() * nv) : 7; // one id four times a line
		for (int c = 0; c < NCFG; c++)
			for (int ti = 0; ti < 4; ti++) {
				if (cfgs[c].k == 0 && temps[ti] == 0.0f)
					continue; // greedy ignores the filters
				struct sample_params p;
				sample_defaults(&p);
				p.temperature = temps[ti], p.top_k = cfgs[c].k, p.top_p = cfgs[c].p;
				p.repeat_penalty = cfgs[c].rep;
				char err[AD_ERRLEN];
				struct sampler *s = sample_new(&p, nv, err);
				if (!s) {
					fprintf(stderr, "bench-sample: %s\n", err);
					return 1;
				}
				double cand = 0;
				int cmax = 0;
				for (int r = 0; r < ROWS; r++) {
					int k = sample_candidates(s, rows[r], err);
					cand += k;
					cmax = k > cmax ? k : cmax;
				}
				sample_free(s);
				double f[4], g[4];
				if (timed(&p, nv, rows, n, 0, f) || timed(&p, nv, rows, nref, 1, g))
					return 1;
				char cs[32], fs[64], gs[64];
				snprintf(cs, sizeof cs, "%.0f/%d", cand / ROWS, cmax);
				snprintf(fs, sizeof fs, "%.4f [%.4f-%.4f] (%.4f)", f[0], f[1], f[2], f[3]);
				snprintf(gs, sizeof gs, "%.3f [%.3f-%.3f] (%.3f)", g[0], g[1], g[2], g[3]);
				printf("%7d %4.1f %5d %5.2f %4.2f %15s %35s %35s %6.1fx\n", nv, (double)p.temperature,
				       p.top_k, (double)p.top_p, (double)p.repeat_penalty, cs, fs, gs, g[0] / f[0]);
				fflush(stdout);
			}
		for (int r = 0; r < ROWS; r++)
			free(rows[r]);
	}
	return 0;
}
