// bench-emu-i8: int8-weight convs on the emu next to fp16 ones, through
// the whole path (MIL, blob, planar surfaces), with a plain memory read
// of the same process as the baseline.
//
//   bench-emu-i8 [-t threads]
//
// For each shape and width: warm (the same kernel back to back) and cold
// (a 128 MiB buffer streamed on the emu's pool between evals, so the
// weights come from DRAM and the pool's workers are awake, as in a
// model's decode step), median of 5 repeats [min, max];
// GB/s counts the weight bytes the kernel holds (fp16: 2 per weight; int8:
// 1 per weight + 2 per row for the scales), as bench-emu does. Then the
// int8 kernel alone on one thread, per instruction set, one column, warm,
// by that thread's CPU clock.
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "blob.h"
#include "clock.h"
#include "emu.h"
#include "err.h"
#include "fp16.h"
#include "mil.h"
#include "wtype.h"

#define REPEATS 5

static double
now(void)
{
	return (double)ad_now_ns() * 1e-9;
}

static double
thread_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int
cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void
stats(double *v, double *med, double *lo, double *hi)
{
	qsort(v, REPEATS, sizeof *v, cmp_d);
	*med = v[REPEATS / 2];
	*lo = v[0];
	*hi = v[REPEATS - 1];
}

static float sink;

struct rd {
	const float *p;
	size_t n;
	float sum;
};

__attribute__((target("avx2"))) static void *
read_part(void *arg)
{
	struct rd *r = arg;
	__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
	for (size_t i = 0; i + 32 <= r->n; i += 32) {
		a0 = _mm256_add_ps(a0, _mm256_load_ps(r->p + i));
		a1 = _mm256_add_ps(a1, _mm256_load_ps(r->p + i + 8));
		a2 = _mm256_add_ps(a2, _mm256_load_ps(r->p + i + 16));
		a3 = _mm256_add_ps(a3, _mm256_load_ps(r->p + i + 24));
	}
	float t[8];
	_mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
	r->sum = t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
	return NULL;
}

static double
read_buf(const float *p, size_t n, int nth)
{
	pthread_t th[64];
	struct rd r[64];
	size_t per = n / (size_t)nth / 32 * 32;
	double t0 = now();
	for (int i = 0; i < nth; i++) {
		r[i] = (struct rd){p + (size_t)i * per, per, 0};
		if (i)
			pthread_create(&th[i], NULL, read_part, &r[i]);
	}
	read_part(&r[0]);
	for (int i = 1; i < nth; i++)
		pthread_join(th[i], NULL);
	double t = now() - t0;
	for (int i = 0; i < nth; i++)
		sink += r[i].sum;
	return t;
}

// the cold evals' evicting read, on the emu's pool in a few contiguous
// parts a thread: its workers are then awake and polling when the eval
// starts, as between the convs of a decode step. Read on threads of its
// own, it left them asleep, and every cold eval paid a wake-up (a 0.9 MB
// int8 conv: 70 us cold, 12 warm)
struct evict {
	const float *p;
	size_t n, per;
	float sum[64];
};

static void
evict_task(void *arg, size_t t)
{
	struct evict *v = arg;
	size_t a = t * v->per;
	if (a >= v->n)
		return;
	struct rd r = {v->p + a, v->n - a < v->per ? v->n - a : v->per, 0};
	read_part(&r);
	v->sum[t] = r.sum;
}

static void
evict_pool(struct emu *e, const float *p, size_t n)
{
	size_t nt = (size_t)emu_nthreads(e) * 4;
	nt = nt > 64 ? 64 : nt;
	struct evict v = {.p = p, .n = n, .per = (n / nt + 31) / 32 * 32};
	emu_parallel(e, evict_task, &v, nt);
	for (size_t t = 0; t < nt; t++)
		sink += v.sum[t];
}

// a blob for one [cout][cin] weight in format f, from the seed's LCG
static void
write_blob(const char *path, size_t cin, size_t cout, enum ane_wfmt f)
{
	char err[AD_ERRLEN];
	uint32_t s = 1;
	struct ane_blob_writer w;
	if (ane_blob_open(&w, path, err)) {
		fprintf(stderr, "%s\n", err);
		exit(1);
	}
	int rc;
	if (f == ANE_W_INT8) {
		int8_t *q = malloc(cout * cin);
		uint16_t *sc = malloc(cout * 2);
		for (size_t i = 0; i < cout * cin; i++) {
			s = s * 1664525u + 1013904223u;
			q[i] = (int8_t)((int)(s >> 24) % 255 - 127);
		}
		for (size_t o = 0; o < cout; o++)
			sc[o] = ad_f32_to_fp16(0.0004f);
		rc = ane_blob_begin_i8(&w, cout * cin, NULL, err) || ane_blob_put_i8(&w, q, cout * cin, err) ||
		     ane_blob_end(&w, err) || ane_blob_add(&w, &(struct ane_wsrc){sc, AD_TYPE_F16, cout}, NULL, err);
		free(q);
		free(sc);
	} else {
		uint16_t *h = malloc(cout * cin * 2);
		for (size_t i = 0; i < cout * cin; i++) {
			s = s * 1664525u + 1013904223u;
			h[i] = ad_f32_to_fp16(0.05f * ((float)(s >> 8) / 16777216.0f - 0.5f));
		}
		rc = ane_blob_add(&w, &(struct ane_wsrc){h, AD_TYPE_F16, cout * cin}, NULL, err);
		free(h);
	}
	if (rc || ane_blob_close(&w, err)) {
		fprintf(stderr, "blob: %s\n", err);
		exit(1);
	}
}

static void
bench_conv(struct emu *e, size_t cin, size_t cout, const float *evict, size_t nevict)
{
	char err[AD_ERRLEN], path[256];
	const char *tmp = getenv("TMPDIR");
	static const size_t widths[] = {1, 8, 64};
	for (int f = ANE_W_FP16; f <= ANE_W_INT8; f++) {
		snprintf(path, sizeof path, "%s/bench-emu-i8-%d.bin", tmp ? tmp : "/tmp", (int)getpid());
		write_blob(path, cin, cout, (enum ane_wfmt)f);
		for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++) {
			size_t W = widths[wi];
			char *mil = ane_mil_proj_w((int)cin, (int)cout, (int)W, (enum ane_wfmt)f, err);
			struct emu_file fl = {.name = "w.bin", .path = path};
			struct emu_kernel *k = mil ? emu_compile(e, mil, &fl, 1, err) : NULL;
			if (!k) {
				fprintf(stderr, "compile: %s\n", err);
				exit(1);
			}
			void *in = calloc(1, emu_input_capacity(k)), *out = calloc(1, emu_output_capacity(k));
			float *x = malloc(W * cin * sizeof(float));
			for (size_t i = 0; i < W * cin; i++)
				x[i] = (float)((i * 7) % 13) * 0.1f - 0.6f;
			ane_scatter_f32(emu_input_layout(k, 0), in, x, W, cin, err);
			double gb = (double)emu_weight_bytes(k) / 1e9;
			double one = now();
			emu_eval(k, (const void *const *)&in, &out, W, err);
			one = now() - one;
			int n = (int)(0.1 / (one > 1e-6 ? one : 1e-6));
			n = n < 3 ? 3 : n > 2000 ? 2000 : n;
			double warm[REPEATS], cold[REPEATS];
			for (int r = 0; r < REPEATS; r++) {
				double t = now();
				for (int i = 0; i < n; i++)
					emu_eval(k, (const void *const *)&in, &out, W, err);
				warm[r] = (now() - t) / n;
			}
			int nc = n < 20 ? n : 20;
			for (int r = 0; r < REPEATS; r++) {
				double sum = 0;
				for (int i = 0; i < nc; i++) {
					evict_pool(e, evict, nevict);
					double t = now();
					emu_eval(k, (const void *const *)&in, &out, W, err);
					sum += now() - t;
				}
				cold[r] = sum / nc;
			}
			double wm, wl, wh, cm, cl, ch;
			stats(warm, &wm, &wl, &wh);
			stats(cold, &cm, &cl, &ch);
			printf("%s %4zux%-4zu w%-3zu warm %8.1f us [%7.1f, %7.1f] %6.1f GB/s  cold %8.1f us [%7.1f, %7.1f] "
			       "%6.1f GB/s [%5.1f, %5.1f]\n",
			       f == ANE_W_INT8 ? "int8" : "fp16", cin, cout, W, wm * 1e6, wl * 1e6, wh * 1e6, gb / wm,
			       cm * 1e6, cl * 1e6, ch * 1e6, gb / cm, gb / ch, gb / cl);
			fflush(stdout);
			emu_kernel_free(k);
			free(mil), free(in), free(out), free(x);
		}
		unlink(path);
	}
}

// the kernels alone on one thread (its CPU clock), warm: int8 per
// instruction set and the fp16 emu_conv_fast, at 1, 8 and 64 columns
typedef void fn_t(const int8_t *, const uint16_t *, size_t, size_t, const float *, size_t, float *, size_t, size_t);

static double
time_one(fn_t *f8, const int8_t *p8, const uint16_t *p16, const uint16_t *sc, size_t cout, size_t cin, const float *x,
         size_t W, float *y, size_t np)
{
	double one = thread_now();
	if (f8)
		f8(p8, sc, cout, cin, x, W, y, 0, np);
	else
		emu_conv_fast(p16, cout, cin, x, W, y, 0, np);
	one = thread_now() - one;
	int n = (int)(0.05 / (one > 1e-6 ? one : 1e-6));
	n = n < 2 ? 2 : n > 2000 ? 2000 : n;
	double v[REPEATS], m, lo, hi;
	for (int r = 0; r < REPEATS; r++) {
		double t = thread_now();
		for (int i = 0; i < n; i++)
			if (f8)
				f8(p8, sc, cout, cin, x, W, y, 0, np);
			else
				emu_conv_fast(p16, cout, cin, x, W, y, 0, np);
		v[r] = (thread_now() - t) / n;
	}
	stats(v, &m, &lo, &hi);
	sink += y[0];
	return m;
}

#ifdef AD_FP16_X86
// the AVX-512 tiles over packed x as an eval runs them: x packed, then
// every pair of panels over every column block
static void
i8_x512(const int8_t *p, const uint16_t *sc, size_t cout, size_t cin, const float *x, size_t W, float *y, size_t p0,
        size_t p1)
{
	static float *xp, *wf;
	static size_t cap;
	if (cap < W * cin) {
		free(xp), free(wf);
		xp = aligned_alloc(64, (W * cin * sizeof(float) + 63) / 64 * 64);
		wf = aligned_alloc(64, 2 * 16 * cin * sizeof(float)); // a pair's worth
		cap = W * cin;
	}
	emu_x512_pack(x, cin, W, xp);
	emu_conv_i8_x512(p, sc, cout, cin, xp, W, y, p0, p1, 0, emu_x512_blocks(W), wf);
}
#endif

static void
bench_kernel(size_t cin, size_t cout)
{
	size_t np = (cout + 15) / 16;
	int8_t *q = malloc(cout * cin), *p = aligned_alloc(64, (emu_i8_panel_bytes(cout, cin) + 63) / 64 * 64);
	uint16_t *h = malloc(cout * cin * 2), *p16 = aligned_alloc(64, (emu_panel_bytes(cout, cin) + 63) / 64 * 64);
	for (size_t i = 0; i < cout * cin; i++) {
		q[i] = (int8_t)(i * 37 % 255 - 127);
		h[i] = ad_f32_to_fp16(0.001f * q[i]);
	}
	emu_i8_pack(q, cout, cin, p);
	emu_pack(h, cout, cin, p16);
	uint16_t *sc = calloc(np * 16, sizeof *sc);
	float *x = malloc(64 * cin * sizeof(float)), *y = malloc(64 * cout * 4);
	for (size_t o = 0; o < cout; o++)
		sc[o] = ad_f32_to_fp16(0.001f);
	for (size_t i = 0; i < 64 * cin; i++)
		x[i] = (float)(i % 13) * 0.1f - 0.6f;
	// the kernels by instruction set, the AVX-512 tiles over packed x (from
	// EMU_I8_X512_COLS columns), fp16
	fn_t *fns[4] = {emu_conv_i8_ref, emu_conv_i8_avx2, emu_conv_i8_avx512, NULL};
#ifdef AD_FP16_X86
	fns[3] = i8_x512;
#endif
	static const char *names[5] = {"int8 ref", "int8 avx2", "int8 avx512", "int8 x512", "fp16 fast"};
	static const size_t widths[] = {1, 8, 64};
	for (int k = 0; k < 5; k++) {
		if ((k < 3 && k > emu_i8_isa()) || (k == 3 && (!fns[3] || emu_i8_isa() < 2)))
			continue;
		for (size_t wi = 0; wi < 3; wi++) {
			size_t W = widths[wi];
			if ((k == 0 && W > 1) || (k == 3 && W < EMU_I8_X512_COLS))
				continue; // the plain kernel is slow; one width says enough
			double t = time_one(k < 4 ? fns[k] : NULL, p, p16, sc, cout, cin, x, W, y, np);
			double b = k < 4 ? (double)cout * cin + 2.0 * cout : 2.0 * cout * cin;
			printf("kernel %-12s %4zux%-4zu w%-3zu %8.1f us  %6.1f GB/s  %6.1f GFLOP/s (1 thread)\n",
			       names[k], cin, cout, W, t * 1e6, b / t / 1e9, 2.0 * cin * cout * W / t / 1e9);
		}
	}
	free(q), free(p), free(h), free(p16), free(sc), free(x), free(y);
}

int
main(int argc, char **argv)
{
	struct emu_opts o = {.threads = 2};
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-t") && i + 1 < argc)
			o.threads = atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: %s [-t threads]\n", argv[0]);
			return 2;
		}
	}
	if (o.threads < 1 || o.threads > 64)
		o.threads = 2;
	char err[AD_ERRLEN];
	struct emu *e = emu_open(&o, err);
	if (!e) {
		fprintf(stderr, "emu: %s\n", err);
		return 1;
	}
	int isa = emu_i8_isa();
	printf("emu int8 vs fp16 conv bench: %d thread(s), int8 kernel %s\n", o.threads,
	       isa == 2 ? "AVX-512"
	       : isa    ? "AVX2"
	                : "plain C");
	size_t nbig = (256u << 20) / sizeof(float), nevict = (128u << 20) / sizeof(float);
	float *big = aligned_alloc(64, nbig * sizeof(float));
	for (size_t i = 0; i < nbig; i++)
		big[i] = (float)(i & 255);
	int ths[2] = {1, o.threads};
	for (int t = 0; t < (o.threads > 1 ? 2 : 1); t++) {
		double v[REPEATS], m, lo, hi;
		read_buf(big, nbig, ths[t]);
		for (int r = 0; r < REPEATS; r++)
			v[r] = read_buf(big, nbig, ths[t]);
		stats(v, &m, &lo, &hi);
		double gb = (double)nbig * sizeof(float) / 1e9;
		printf("memory read 256 MiB, %d thread(s): %.1f GB/s [%.1f, %.1f]\n", ths[t], gb / m, gb / hi, gb / lo);
	}
	bench_kernel(896, 4864);
	bench_conv(e, 896, 4864, big, nevict);  // Qwen2.5-0.5B gate / up
	bench_conv(e, 4864, 896, big, nevict);  // its down
	bench_conv(e, 576, 1536, big, nevict);  // SmolLM2-135M gate / up
	bench_conv(e, 576, 49152, big, nevict); // SmolLM2-135M LM head
	free(big);
	emu_close(e);
	return sink == 12345.0f;
}
