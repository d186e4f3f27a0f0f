// bench-attention.c - attention per layer at contexts 16..4096, fast and
// plain, for three typical head layouts (14/2 and 9/3 heads of 64, 32/8
// heads of 128) and stories260K's (8/4 heads of 8): one
// query column (a decode step) over a full cache. Prints the median and
// the range of 7 runs in microseconds per layer. From 256 rows on, the
// fast path also "cold": over the caches of enough layers in turn (64 MiB
// in all, past L3) that each layer's comes from memory, as in a model's
// decode step. Then, at 1024 rows, a verify step's columns and a prefill
// chunk's: four and sixteen consecutive positions in one call against one,
// alternating, what each column past the first costs, and the path taken.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attention.h"
#include "clock.h"
#include "fp16.h"

#define VCOLS 4             // a verify step's columns
#define PCOLS ATTN_COLS_MAX // a prefill chunk's

static double
now_us(void)
{
	return (double)ad_now_ns() / 1e3;
}

static int
cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int
main(void)
{
	static const int heads[][3] = {{14, 2, 64}, {9, 3, 64}, {32, 8, 128}, {8, 4, 8}};
	static const int ctxs[] = {16, 64, 256, 1024, 4096};
	printf("attention, one column over ctx cache rows, us per layer (median [min..max] of 7); fast path: %s\n",
	       attn_have_avx512() ? "AVX-512 (one column) and AVX2"
	       : attn_have_simd() ? "AVX2/FMA/F16C"
	                          : "plain C (no AVX2)");
	for (int hi = 0; hi < 4; hi++) {
		const int nh = heads[hi][0], nkv = heads[hi][1], hd = heads[hi][2];
		struct attn_shape sh = {nh, nkv, hd, hd, (size_t)(nkv * hd), (size_t)(nkv * hd), 0.125f, 0};
		const int max = 4096;
		uint16_t *k = malloc(sizeof(uint16_t) * sh.k_stride * max),
			 *v = malloc(sizeof(uint16_t) * sh.v_stride * max);
		float *q = malloc(sizeof(float) * nh * hd * PCOLS), *out = malloc(sizeof(float) * nh * hd * PCOLS);
		float *scratch = malloc(sizeof(float) * attn_cols_scratch_floats(&sh, max, PCOLS));
		uint32_t r = 1;
		for (size_t i = 0; i < sh.k_stride * max; i++) {
			r = r * 1664525u + 1013904223u;
			k[i] = ad_f32_to_fp16((float)(r >> 8) / (1 << 24) - 0.5f);
			v[i] = ad_f32_to_fp16((float)(r >> 9) / (1 << 23) - 0.5f);
		}
		for (int i = 0; i < nh * hd * PCOLS; i++)
			q[i] = (float)(i % 7) * 0.1f;
		for (size_t ci = 0; ci < sizeof ctxs / sizeof *ctxs; ci++) {
			int ctx = ctxs[ci];
			double t[2][7];
			for (int pass = 0; pass < 2; pass++) {
				int reps = 20000 / ctx + 1;
				for (int run = 0; run < 7; run++) {
					double t0 = now_us();
					for (int i = 0; i < reps; i++)
						(pass ? attn_ref : attn_fast)(&sh, q, k, v, 0, ctx - 1, out, scratch);
					t[pass][run] = (now_us() - t0) / reps;
				}
				qsort(t[pass], 7, sizeof(double), cmp);
			}
			printf("heads %2d/%d x%d ctx %4d: fast %8.2f [%.2f..%.2f]  ref %9.2f [%.2f..%.2f]  x%.1f", nh,
			       nkv, hd, ctx, t[0][3], t[0][0], t[0][6], t[1][3], t[1][0], t[1][6], t[1][3] / t[0][3]);
			if (ctx >= 256) {
				// copies of the cache, one per layer, read in turn
				const size_t per = (sh.k_stride + sh.v_stride) * (size_t)ctx * sizeof(uint16_t);
				const int nl = (int)((64u << 20) / per) + 1;
				uint16_t *ck = malloc(sizeof(uint16_t) * sh.k_stride * ctx * nl),
					 *cv = malloc(sizeof(uint16_t) * sh.v_stride * ctx * nl);
				if (!ck || !cv) {
					fprintf(stderr, "bench-attention: out of memory\n");
					return 1;
				}
				for (int l = 0; l < nl; l++) {
					memcpy(ck + sh.k_stride * ctx * l, k, sizeof(uint16_t) * sh.k_stride * ctx);
					memcpy(cv + sh.v_stride * ctx * l, v, sizeof(uint16_t) * sh.v_stride * ctx);
				}
				double tc[7];
				for (int run = 0; run < 7; run++) {
					double t0 = now_us();
					for (int l = 0; l < nl; l++)
						attn_fast(&sh, q, ck + sh.k_stride * ctx * l,
						          cv + sh.v_stride * ctx * l, 0, ctx - 1, out, scratch);
					tc[run] = (now_us() - t0) / nl;
				}
				qsort(tc, 7, sizeof(double), cmp);
				printf("  cold %8.2f [%.2f..%.2f] (%d layers)", tc[3], tc[0], tc[6], nl);
				free(ck);
				free(cv);
			}
			printf("\n");
		}
		for (int vc = VCOLS; vc <= PCOLS; vc += PCOLS - VCOLS) {
			// a verify step's or a prefill chunk's vc columns at the last
			// positions of 1024 rows
			const int ctx = 1024, reps = 20000 / ctx + 1;
			int last[PCOLS];
			double t[2][7];
			for (int c = 0; c < vc; c++)
				last[c] = ctx - vc + c;
			for (int run = 0; run < 7; run++)
				for (int w = 0; w < 2; w++) {
					const int nc = w ? vc : 1;
					double t0 = now_us();
					for (int i = 0; i < reps; i++)
						attn_fast_cols(&sh, q, (size_t)nh * hd, k, v, k, v, 0, 0,
						               last + vc - nc, nc, out, (size_t)nh * hd, scratch);
					t[w][run] = (now_us() - t0) / reps;
				}
			qsort(t[0], 7, sizeof(double), cmp);
			qsort(t[1], 7, sizeof(double), cmp);
			printf("heads %2d/%d x%d ctx %4d: %2d columns %8.2f [%.2f..%.2f], one %.2f: %.2f a column past the "
			       "first (%.2f of one; %s)\n",
			       nh, nkv, hd, ctx, vc, t[1][3], t[1][0], t[1][6], t[0][3], (t[1][3] - t[0][3]) / (vc - 1),
			       (t[1][3] - t[0][3]) / (vc - 1) / t[0][3], attn_fast_path(&sh, vc));
		}
		free(k);
		free(v);
		free(q);
		free(out);
		free(scratch);
	}
	return 0;
}
