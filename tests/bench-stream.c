// bench-stream: the memory-bandwidth baseline, a plain streaming read.
//
//   bench-stream [MB] [PASSES] [THREADS]      defaults 256 MB, 10 passes, 2 threads
//
// THREADS threads each read their share of one buffer (MB, far larger than
// the last-level cache, so every pass comes from DRAM), the read of
// common/memread.h: huge pages where the kernel gives them, as the emu holds
// its weights, and wide loads. One warm-up pass, then PASSES timed ones: the
// median and the range. tests/perf/bench.sh runs it between the emu kernel
// timings, so the kernels are compared with a read measured on the same
// machine at the same time (anedvd-dev kernels measures its own in-process
// read beside its decode pass).
#include <stdio.h>
#include <stdlib.h>

#include "err.h"
#include "memread.h"

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int
main(int argc, char **argv)
{
	long mb = argc > 1 ? atol(argv[1]) : 256;
	int passes = argc > 2 ? atoi(argv[2]) : 10;
	int nt = argc > 3 ? atoi(argv[3]) : 2;
	if (argc > 4 || mb < 1 || mb > (1L << 20) || passes < 1 || passes > 100000 || nt < 1 || nt > 64) {
		fprintf(stderr, "usage: bench-stream [MB 1..1048576] [PASSES >= 1] [THREADS 1..64]\n");
		return 2;
	}
	char err[AD_ERRLEN];
	struct ad_memread *r = ad_memread_new((size_t)mb << 20, nt, err);
	double *gbs = calloc((size_t)passes, sizeof *gbs);
	if (!r || !gbs) {
		fprintf(stderr, "bench-stream: %s\n", r ? "out of memory" : err);
		return 1;
	}
	ad_memread_pass(r); // warm-up
	for (int i = 0; i < passes; i++)
		gbs[i] = ad_memread_pass(r);
	qsort(gbs, (size_t)passes, sizeof *gbs, cmp_double);
	double med = passes % 2 ? gbs[passes / 2] : (gbs[passes / 2 - 1] + gbs[passes / 2]) / 2;
	printf("stream read: %d threads, %ld MB, %d passes: median %.2f GB/s, range %.2f .. %.2f\n", nt, mb, passes,
	       med, gbs[0], gbs[passes - 1]);
	free(gbs);
	ad_memread_free(r);
	return 0;
}
