// bench-stream: the memory-bandwidth baseline, a plain streaming read.
//
//   bench-stream [MB] [PASSES] [THREADS]      defaults 256 MB, 10 passes, 2 threads
//
// THREADS threads each sum their share of one buffer (MB, far larger than the
// last-level cache, so every pass comes from DRAM), all starting a pass
// together; one pass's GB/s is the whole buffer over the slowest thread's
// time. One warm-up pass (it also faults the pages in), then PASSES timed
// ones: the median and the range. tests/perf/bench.sh runs it between the
// emu kernel timings, so the kernels are compared with a read measured on the
// same machine at the same time.
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double
now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

struct share {
	const uint64_t *p;
	size_t n; // words
	int passes;
	pthread_barrier_t *bar;
	double *t; // seconds per pass, passes + 1 (the warm-up first)
	uint64_t sink;
};

static void *
reader(void *arg)
{
	struct share *s = arg;
	for (int it = 0; it <= s->passes; it++) {
		pthread_barrier_wait(s->bar);
		double t0 = now();
		// eight independent sums: the loads, not an add chain, set the pace
		uint64_t a[8] = {0};
		for (size_t i = 0; i + 8 <= s->n; i += 8)
			for (int k = 0; k < 8; k++)
				a[k] += s->p[i + k];
		s->t[it] = now() - t0;
		for (int k = 0; k < 8; k++)
			s->sink += a[k];
		pthread_barrier_wait(s->bar);
	}
	return NULL;
}

int
main(int argc, char **argv)
{
	long mb = argc > 1 ? atol(argv[1]) : 256;
	int passes = argc > 2 ? atoi(argv[2]) : 10;
	int nt = argc > 3 ? atoi(argv[3]) : 2;
	if (mb < 1 || passes < 1 || nt < 1 || nt > 64) {
		fprintf(stderr, "usage: bench-stream [MB >= 1] [PASSES >= 1] [THREADS 1..64]\n");
		return 2;
	}
	size_t bytes = (size_t)mb << 20, words = bytes / 8;
	uint64_t *buf = malloc(bytes);
	struct share *sh = calloc((size_t)nt, sizeof *sh);
	double *t = calloc((size_t)nt * (size_t)(passes + 1), sizeof *t);
	double *gbs = calloc((size_t)passes, sizeof *gbs);
	pthread_t *th = calloc((size_t)nt, sizeof *th);
	if (!buf || !sh || !t || !gbs || !th) {
		fprintf(stderr, "bench-stream: out of memory\n");
		return 1;
	}
	for (size_t i = 0; i < words; i++)
		buf[i] = i * 0x9e3779b97f4a7c15ull;
	pthread_barrier_t bar;
	pthread_barrier_init(&bar, NULL, (unsigned)nt);
	size_t per = words / (size_t)nt / 8 * 8;
	for (int k = 0; k < nt; k++) {
		sh[k] = (struct share){.p = buf + (size_t)k * per,
		                       .n = per,
		                       .passes = passes,
		                       .bar = &bar,
		                       .t = t + (size_t)k * (size_t)(passes + 1)};
		if (pthread_create(&th[k], NULL, reader, &sh[k])) {
			fprintf(stderr, "bench-stream: cannot start a thread\n");
			return 1;
		}
	}
	uint64_t sink = 0;
	for (int k = 0; k < nt; k++) {
		pthread_join(th[k], NULL);
		sink += sh[k].sink;
	}
	for (int it = 1; it <= passes; it++) {
		double slow = 0;
		for (int k = 0; k < nt; k++)
			slow = sh[k].t[it] > slow ? sh[k].t[it] : slow;
		gbs[it - 1] = slow > 0 ? (double)(per * 8 * (size_t)nt) / slow / 1e9 : 0;
	}
	qsort(gbs, (size_t)passes, sizeof *gbs, cmp_double);
	double med = passes % 2 ? gbs[passes / 2] : (gbs[passes / 2 - 1] + gbs[passes / 2]) / 2;
	printf("stream read: %d threads, %ld MB, %d passes: median %.2f GB/s, range %.2f .. %.2f (sum %llu)\n", nt, mb,
	       passes, med, gbs[0], gbs[passes - 1], (unsigned long long)(sink & 0xff));
	pthread_barrier_destroy(&bar);
	free(th);
	free(gbs);
	free(t);
	free(sh);
	free(buf);
	return 0;
}
