// bench-dequant: output MB/s of ad_dequant per type, over ~64 MB of float32.
//
// Each type dequantises the same number of values (the source data is a
// quantised random-ish block repeated); five timed runs after one warm-up,
// reporting the median and the range.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "dequant.h"
#include "fp16.h"

static double
now(void)
{
	return (double)ad_now_ns() * 1e-9;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int
main(int argc, char **argv)
{
	int64_t n = 16 << 20; // 16 M values = 64 MB of float32 output
	if (argc > 1)
		n = atoll(argv[1]) / 256 * 256;
	static const uint32_t types[] = {
		AD_TYPE_F32,  AD_TYPE_F16,  AD_TYPE_BF16, AD_TYPE_Q4_0, AD_TYPE_Q4_1, AD_TYPE_Q5_0, AD_TYPE_Q5_1,
		AD_TYPE_Q8_0, AD_TYPE_Q2_K, AD_TYPE_Q3_K, AD_TYPE_Q4_K, AD_TYPE_Q5_K, AD_TYPE_Q6_K, AD_TYPE_Q8_K,
	};
	float *dst = malloc((size_t)n * 4);
	uint8_t *src = malloc((size_t)n * 4);
	if (!dst || !src) {
		fprintf(stderr, "out of memory\n");
		return 1;
	}
	// plausible bytes: random, with every fp16 scale field made finite below
	uint64_t s = 88172645463325252ull;
	for (int64_t i = 0; i < n * 4; i++) {
		s ^= s << 13, s ^= s >> 7, s ^= s << 17;
		src[i] = (uint8_t)(s & 0xbf); // clearing bit 6 keeps fp16/bf16 exponents small
	}
	printf("%-6s %10s %10s %10s  (MB/s of float32 output, %lld values, 5 runs)\n", "type", "median", "min", "max",
	       (long long)n);
	char err[AD_ERRLEN];
	for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
		uint32_t t = types[k];
		double runs[5];
		if (ad_dequant(t, src, dst, n, err)) {
			fprintf(stderr, "%s\n", err);
			return 1;
		}
		for (int r = 0; r < 5; r++) {
			double t0 = now();
			ad_dequant(t, src, dst, n, NULL);
			runs[r] = (double)n * 4 / 1e6 / (now() - t0);
		}
		qsort(runs, 5, sizeof runs[0], cmp_double);
		printf("%-6s %10.0f %10.0f %10.0f\n", ad_type_name(t), runs[2], runs[0], runs[4]);
	}
	free(src);
	free(dst);
	return 0;
}
