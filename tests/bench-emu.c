// bench-emu: cost of one 1x1 conv on the emu backend, through the whole
// path (MIL text, blob file, planar surfaces), at the widths the engine
// uses, next to a plain memory-read baseline measured in the same run.
//
//   bench-emu [-t threads] [--ref] [-k]
//
// first the baselines and the kernel alone: the fp32 FMA peak of one
// thread, then emu_conv_fast (or _ref) on one thread timed by that thread's
// CPU clock, best of 5 [median, max], warm and cold (the weights streamed
// out of the caches first; best of 3 per repeat) (-k: stop there). Then
// the whole path:
// warm: the same kernel evaluated back to back (its weights may sit in the
// last-level cache); cold: a 128 MiB buffer is streamed between evals so
// the weights come from DRAM, as they do when a whole model cycles through.
// Each figure is the median of 5 repeats with [min, max]. cpu is the CPU
// time of all threads per warm eval: when it is far below threads x wall,
// the machine is busy with something else and the wall figures are low.
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
#include "emu.h"
#include "err.h"
#include "fp16.h"
#include "mil.h"
#include "wtype.h"

#define REPEATS 5

static double
now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

// CPU seconds of the calling thread
static double
thread_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

// CPU seconds of the whole process (all threads)
static double
cpu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int
cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

// median, min, max of REPEATS samples
static void
stats(double *v, double *med, double *lo, double *hi)
{
	qsort(v, REPEATS, sizeof *v, cmp_d);
	*med = v[REPEATS / 2];
	*lo = v[0];
	*hi = v[REPEATS - 1];
}

static float sink;

// --- memory-read baseline -------------------------------------------------

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

// seconds to read n floats with nth threads
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

// --- FMA peak baseline ----------------------------------------------------

// GFLOP/s of one thread doing nothing but independent fp32 FMAs (12
// chains, as the conv tiles), timed by that thread's own CPU clock
__attribute__((target("avx2,fma"))) static double
fma_peak(void)
{
	__m256 a[12], m = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(1e-3f);
	for (int k = 0; k < 12; k++)
		a[k] = _mm256_set1_ps((float)k);
	long n = 20000000;
	double t = thread_now();
	for (long i = 0; i < n; i++)
		for (int k = 0; k < 12; k++)
			a[k] = _mm256_fmadd_ps(a[k], m, c);
	t = thread_now() - t;
	__m256 s = a[0];
	for (int k = 1; k < 12; k++)
		s = _mm256_add_ps(s, a[k]);
	float v[8];
	_mm256_storeu_ps(v, s);
	sink += v[0];
	return 12.0 * 16 * (double)n / t / 1e9;
}

// --- the conv kernel alone ------------------------------------------------

// emu_conv_fast on one thread, no MIL, no surfaces; the thread's CPU time,
// so another process on the machine does not inflate it. Weights warm.
static void
bench_kernel(size_t cin, size_t cout, int ref, const float *evict, size_t nevict)
{
	uint16_t *w = malloc(cout * cin * 2);
	uint32_t s = 7;
	for (size_t i = 0; i < cout * cin; i++) {
		s = s * 1664525u + 1013904223u;
		w[i] = ad_f32_to_fp16(0.05f * ((float)(s >> 8) / 16777216.0f - 0.5f));
	}
	uint16_t *p = aligned_alloc(64, (emu_panel_bytes(cout, cin) + 63) / 64 * 64);
	emu_pack(w, cout, cin, p);
	free(w);
	size_t np = (cout + 15) / 16;
	static const size_t widths[] = {1, 2, 3, 4, 5, 6, 8, 16, 32, 64};
	for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++) {
		size_t W = widths[wi];
		float *x = malloc(W * cin * sizeof(float)), *y = malloc(W * cout * sizeof(float));
		for (size_t i = 0; i < W * cin; i++)
			x[i] = (float)((i * 7) % 13) * 0.1f - 0.6f;
		void (*fn)(const uint16_t *, size_t, size_t, const float *, size_t, float *, size_t,
		           size_t) = ref ? emu_conv_ref : emu_conv_fast;
		double one = thread_now();
		fn(p, cout, cin, x, W, y, 0, np);
		one = thread_now() - one;
		int n = (int)(0.05 / (one > 1e-6 ? one : 1e-6));
		n = n < 2 ? 2 : n > 1000 ? 1000 : n;
		double v[REPEATS], m, lo, hi;
		for (int r = 0; r < REPEATS; r++) {
			double t = thread_now();
			for (int i = 0; i < n; i++)
				fn(p, cout, cin, x, W, y, 0, np);
			v[r] = (thread_now() - t) / n;
		}
		stats(v, &m, &lo, &hi);
		// cold: the weights streamed out of the caches before each call
		double c[REPEATS], cm, cl, ch;
		for (int r = 0; r < REPEATS; r++) {
			c[r] = 1e9;
			for (int i = 0; i < 3; i++) {
				read_buf(evict, nevict, 1);
				double t = thread_now();
				fn(p, cout, cin, x, W, y, 0, np);
				t = thread_now() - t;
				c[r] = t < c[r] ? t : c[r];
			}
		}
		stats(c, &cm, &cl, &ch);
		printf("kernel %4zux%-4zu w%-3zu warm %8.1f us [%7.1f, %7.1f] %6.1f GB/s %6.1f GFLOP/s  cold %8.1f us [%7.1f, %7.1f] %6.1f GB/s\n",
		       cin, cout, W, lo * 1e6, m * 1e6, hi * 1e6, (double)cout * cin * 2 / lo / 1e9,
		       2.0 * cin * cout * W / lo / 1e9, cl * 1e6, cm * 1e6, ch * 1e6,
		       (double)cout * cin * 2 / cl / 1e9);
		fflush(stdout);
		free(x), free(y);
	}
	free(p);
}

// --- the conv -------------------------------------------------------------

static void
bench_conv(struct emu *e, size_t cin, size_t cout, const float *evict, size_t nevict, int nth)
{
	char err[AD_ERRLEN], path[256];
	const char *tmp = getenv("TMPDIR");
	snprintf(path, sizeof path, "%s/bench-emu-%d.bin", tmp ? tmp : "/tmp", (int)getpid());
	uint16_t *w = malloc(cout * cin * 2);
	uint32_t s = 1;
	for (size_t i = 0; i < cout * cin; i++) {
		s = s * 1664525u + 1013904223u;
		w[i] = ad_f32_to_fp16(0.05f * ((float)(s >> 8) / 16777216.0f - 0.5f));
	}
	if (ane_blob_write_proj(path, &(struct ane_wsrc){w, AD_TYPE_F16, cout * cin}, 1, err) < 0) {
		fprintf(stderr, "blob: %s\n", err);
		exit(1);
	}
	free(w);
	static const size_t widths[] = {1, 2, 4, 8, 16, 32, 64};
	for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++) {
		size_t W = widths[wi];
		char *mil = ane_mil_proj((int)cin, (int)cout, (int)W, err);
		struct emu_file f = {.name = "w.bin", .path = path};
		double t0 = now();
		struct emu_kernel *k = mil ? emu_compile(e, mil, &f, 1, err) : NULL;
		double tc = now() - t0;
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
		// size a batch to about 0.1 s
		double one = now();
		emu_eval(k, (const void *const *)&in, &out, W, err);
		one = now() - one;
		int n = (int)(0.1 / (one > 1e-6 ? one : 1e-6));
		n = n < 3 ? 3 : n > 2000 ? 2000 : n;
		double warm[REPEATS], cold[REPEATS], cpu[REPEATS];
		for (int r = 0; r < REPEATS; r++) {
			double t = now(), c = cpu_now();
			for (int i = 0; i < n; i++)
				emu_eval(k, (const void *const *)&in, &out, W, err);
			warm[r] = (now() - t) / n;
			cpu[r] = (cpu_now() - c) / n;
		}
		int nc = n < 20 ? n : 20;
		for (int r = 0; r < REPEATS; r++) {
			double sum = 0;
			for (int i = 0; i < nc; i++) {
				read_buf(evict, nevict, nth);
				double t = now();
				emu_eval(k, (const void *const *)&in, &out, W, err);
				sum += now() - t;
			}
			cold[r] = sum / nc;
		}
		double wm, wl, wh, cm, cl, ch, um, ul, uh;
		stats(warm, &wm, &wl, &wh);
		stats(cold, &cm, &cl, &ch);
		stats(cpu, &um, &ul, &uh);
		printf("conv %4zux%-4zu w%-3zu warm %8.1f us [%7.1f, %7.1f] %6.1f GB/s %6.1f GFLOP/s  cpu %8.1f us  cold %8.1f us [%7.1f, %7.1f] %6.1f GB/s  (compile %.0f ms)\n",
		       cin, cout, W, wm * 1e6, wl * 1e6, wh * 1e6, gb / wm,
		       2.0 * cin * cout * W / wm / 1e9, um * 1e6, cm * 1e6, cl * 1e6, ch * 1e6, gb / cm,
		       tc * 1e3);
		fflush(stdout);
		emu_kernel_free(k);
		free(mil), free(in), free(out), free(x);
	}
	unlink(path);
}

int
main(int argc, char **argv)
{
	struct emu_opts o = {.threads = 2};
	int kernel_only = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-t") && i + 1 < argc)
			o.threads = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--ref"))
			o.force_ref = 1;
		else if (!strcmp(argv[i], "-k"))
			kernel_only = 1;
		else {
			fprintf(stderr, "usage: %s [-t threads] [--ref] [-k]\n", argv[0]);
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
	printf("emu conv bench: %d thread(s), %s kernel\n", o.threads,
	       o.force_ref || !emu_have_simd() ? "plain C _ref" : "AVX2/FMA/F16C");

	size_t nbig = (256u << 20) / sizeof(float), nevict = (128u << 20) / sizeof(float);
	float *big = aligned_alloc(64, nbig * sizeof(float));
	for (size_t i = 0; i < nbig; i++)
		big[i] = (float)(i & 255);
	printf("fp32 FMA peak, 1 thread: %.1f GFLOP/s (thread CPU time)\n", fma_peak());
	bench_kernel(2048, 2048, o.force_ref, big, nevict);
	bench_kernel(896, 4864, o.force_ref, big, nevict);
	bench_kernel(896, 896, o.force_ref, big, nevict);
	if (kernel_only) {
		free(big);
		emu_close(e);
		return sink == 12345.0f;
	}

	// memory baseline: 256 MiB read once per repeat, 1 thread and o.threads
	int ths[2] = {1, o.threads};
	for (int t = 0; t < (o.threads > 1 ? 2 : 1); t++) {
		double v[REPEATS], m, lo, hi;
		read_buf(big, nbig, ths[t]);
		for (int r = 0; r < REPEATS; r++)
			v[r] = read_buf(big, nbig, ths[t]);
		stats(v, &m, &lo, &hi);
		double gb = (double)nbig * sizeof(float) / 1e9;
		printf("memory read 256 MiB, %d thread(s): %.1f GB/s [%.1f, %.1f]\n", ths[t], gb / m,
		       gb / hi, gb / lo);
	}
	bench_conv(e, 2048, 2048, big, nevict, o.threads);
	bench_conv(e, 896, 4864, big, nevict, o.threads);
	// a small one (a 0.5B model's attention projection): pool overheads show
	bench_conv(e, 896, 896, big, nevict, o.threads);
	free(big);
	emu_close(e);
	return sink == 12345.0f; // keep the reads
}
