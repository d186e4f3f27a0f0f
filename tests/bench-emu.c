// bench-emu: the emu backend's conv kernels against the machine's own
// limits, measured in the same process, per SIMD path (ref, avx2, avx512:
// every path the CPU has, or the one -p names).
//
//   bench-emu [-t threads] [-p ref|avx2|avx512] [-q] [-k]
//
// For each path, on the context's own thread pool (the caller + workers):
//   peak   fp32 FMA GFLOP/s of all threads: independent chains of the
//          path's widest FMA (scalar fmaf for ref), one task per thread
//   pool   its wake-up on decode-sized jobs
//   decode one column of each big kernel of SmolLM2-135M and Qwen2.5-0.5B
//          through the whole path (MIL, blob, surfaces), weight GB/s beside
//          a plain read of a buffer of the same size with the same pool and
//          AVX2 loads (for every path; -p avx512r: zmm loads), alternating
//          within each repeat: warm (back to back, the bytes may sit in the
//          last-level cache) and cold (a 128 MiB buffer streamed first, so
//          they come from DRAM as when a model cycles through; the kernel
//          in a context that holds 70 MiB more, as the ane-worker's does);
//          ratio = read time / conv time
//   prefill 64 columns of the same kernels, GFLOP/s and its ratio to the
//          peak, each repeat's to a peak measured just before it
//   ffn    the fused FFN program of both models at 1 and 64 columns, its
//          elementwise steps op by op (emu_opts.no_fuse) and fused,
//          alternating, by wall and CPU time
// Every figure: median [min, max] of 5 repeats. cpu%: CPU time of the
// process over threads x wall during the warm repeats; well below 100 the
// machine is busy with something else and every figure is low and noisy.
// -q: two shapes per model and no ffn section. -k instead: the one-column
// kernel alone on one thread against a read on that thread, each the best
// of 15 by the thread's CPU time (the figure least hurt by a busy machine).
#define _GNU_SOURCE
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
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

struct st {
	double med, lo, hi;
};

static struct st
stats(double *v)
{
	qsort(v, REPEATS, sizeof *v, cmp_d);
	return (struct st){v[REPEATS / 2], v[0], v[REPEATS - 1]};
}

static volatile float sink;

// --- the read baseline -----------------------------------------------------

struct rd {
	const uint8_t *p;
	size_t n, per; // bytes, bytes per task
	int simd;
	float sum[64];
};

__attribute__((target("avx2"))) static float
read_avx2(const uint8_t *p, size_t n)
{
	__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
	for (size_t i = 0; i + 128 <= n; i += 128) {
		a0 = _mm256_add_ps(a0, _mm256_load_ps((const float *)(p + i)));
		a1 = _mm256_add_ps(a1, _mm256_load_ps((const float *)(p + i + 32)));
		a2 = _mm256_add_ps(a2, _mm256_load_ps((const float *)(p + i + 64)));
		a3 = _mm256_add_ps(a3, _mm256_load_ps((const float *)(p + i + 96)));
	}
	float t[8];
	_mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
	return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}

__attribute__((target("avx512f"))) static float
read_avx512(const uint8_t *p, size_t n)
{
	__m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
	for (size_t i = 0; i + 256 <= n; i += 256) {
		a0 = _mm512_add_ps(a0, _mm512_load_ps((const float *)(p + i)));
		a1 = _mm512_add_ps(a1, _mm512_load_ps((const float *)(p + i + 64)));
		a2 = _mm512_add_ps(a2, _mm512_load_ps((const float *)(p + i + 128)));
		a3 = _mm512_add_ps(a3, _mm512_load_ps((const float *)(p + i + 192)));
	}
	return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

static int zmm_read;

static void
read_task(void *arg, size_t t)
{
	struct rd *r = arg;
	size_t a = t * r->per, b = a + r->per > r->n ? r->n : a + r->per;
	if (a >= b)
		return;
	float s = 0;
	// AVX2 loads for every path, so that every path has the same baseline
	// (zmm loads, -p avx512r, read the same within the noise here)
	if (r->simd == EMU_SIMD_AVX512 && zmm_read)
		s = read_avx512(r->p + a, b - a);
	else if (emu_have_simd())
		s = read_avx2(r->p + a, b - a);
	else
		for (size_t i = a; i + 4 <= b; i += 64)
			s += (float)r->p[i];
	r->sum[t % 64] += s;
}

// read n bytes at p on the pool: the same number of tasks as a conv of
// that size gets (a few per thread), each a contiguous part
static void
read_pool(struct emu *e, const void *p, size_t n, int simd)
{
	struct rd r = {.p = p, .n = n, .simd = simd};
	size_t nt = (size_t)emu_nthreads(e) * 4;
	r.per = (n / nt + 255) / 256 * 256;
	emu_parallel(e, read_task, &r, nt);
	for (int i = 0; i < 64; i++)
		sink += r.sum[i];
}

// --- the FMA peak ----------------------------------------------------------

#define PEAK_ITERS 20000000L

__attribute__((target("avx2,fma"))) static float
fma_avx2(void)
{
	__m256 a[12], m = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(1e-3f);
	for (int k = 0; k < 12; k++)
		a[k] = _mm256_set1_ps((float)k);
	for (long i = 0; i < PEAK_ITERS; i++)
#pragma GCC unroll 12
		for (int k = 0; k < 12; k++)
			a[k] = _mm256_fmadd_ps(a[k], m, c);
	for (int k = 1; k < 12; k++)
		a[0] = _mm256_add_ps(a[0], a[k]);
	float v[8];
	_mm256_storeu_ps(v, a[0]);
	return v[0];
}

__attribute__((target("avx512f"))) static float
fma_avx512(void)
{
	__m512 a[12], m = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(1e-3f);
	for (int k = 0; k < 12; k++)
		a[k] = _mm512_set1_ps((float)k);
	for (long i = 0; i < PEAK_ITERS; i++)
#pragma GCC unroll 12
		for (int k = 0; k < 12; k++)
			a[k] = _mm512_fmadd_ps(a[k], m, c);
	for (int k = 1; k < 12; k++)
		a[0] = _mm512_add_ps(a[0], a[k]);
	return _mm512_reduce_add_ps(a[0]);
}

// the plain kernel's instruction: scalar fmaf, 8 chains (what the ref's
// inner loop can reach at best)
static float
fma_scalar(void)
{
	float a[8], m = 0.999f, c = 1e-3f;
	for (int k = 0; k < 8; k++)
		a[k] = (float)k;
	for (long i = 0; i < PEAK_ITERS / 8; i++) {
		for (int k = 0; k < 8; k++)
			a[k] = fmaf(a[k], m, c);
		__asm__ volatile("" : "+m"(a)); // no vectorising across chains
	}
	return a[0] + a[7];
}

struct pk {
	int simd;
	float out[64];
	double cpu[64]; // each task's thread CPU seconds
};

static double
thread_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void
peak_task(void *arg, size_t t)
{
	struct pk *k = arg;
	double c = thread_now();
	k->out[t % 64] = k->simd == EMU_SIMD_AVX512 ? fma_avx512()
	                 : k->simd == EMU_SIMD_AVX2 ? fma_avx2()
	                                            : fma_scalar();
	k->cpu[t % 64] = thread_now() - c;
}

// GFLOP/s of all threads at once (wall), and of one thread by its own CPU
// time (*one: the median task's; what a core gives while it runs)
static double
fma_peak(struct emu *e, int simd, double *one)
{
	struct pk k = {.simd = simd};
	int nt = emu_nthreads(e);
	double t = now();
	emu_parallel(e, peak_task, &k, (size_t)nt);
	t = now() - t;
	double lanes = simd == EMU_SIMD_AVX512 ? 16 : simd == EMU_SIMD_AVX2 ? 8 : 1;
	double iters = simd == EMU_SIMD_REF ? PEAK_ITERS / 8 * 8.0 : PEAK_ITERS * 12.0;
	double cmax = 0;
	for (int i = 0; i < nt; i++) {
		sink += k.out[i];
		cmax = k.cpu[i] > cmax ? k.cpu[i] : cmax;
	}
	*one = 2.0 * lanes * iters / cmax / 1e9;
	return 2.0 * lanes * iters * nt / t / 1e9;
}

// --- kernels through the whole path ----------------------------------------

struct prog {
	struct emu_kernel *k;
	void *in, *out;
	size_t W;
};

static char blob_path[256];

static void
fill_w(uint16_t *w, size_t n, uint32_t s)
{
	for (size_t i = 0; i < n; i++) {
		s = s * 1664525u + 1013904223u;
		w[i] = ad_f32_to_fp16(0.05f * ((float)(s >> 8) / 16777216.0f - 0.5f));
	}
}

// a projection cin -> cout, or (inter > 0) the fused FFN hidden=cin,
// inter, width W
static struct prog
make(struct emu *e, size_t cin, size_t cout, size_t inter, size_t W)
{
	char err[AD_ERRLEN];
	char *mil;
	int rc;
	if (inter) {
		uint16_t *g = malloc(inter * cin * 2), *u = malloc(inter * cin * 2), *d = malloc(inter * cin * 2);
		fill_w(g, inter * cin, 1), fill_w(u, inter * cin, 2), fill_w(d, inter * cin, 3);
		struct ane_wsrc gs = {g, AD_TYPE_F16, inter * cin}, us = {u, AD_TYPE_F16, inter * cin},
				ds = {d, AD_TYPE_F16, inter * cin};
		rc = ane_blob_write_ffn(blob_path, &gs, &us, &ds, err);
		free(g), free(u), free(d);
		mil = rc ? NULL : ane_mil_ffn((int)cin, (int)inter, (int)W, err);
	} else {
		uint16_t *w = malloc(cout * cin * 2);
		fill_w(w, cout * cin, 1);
		rc = ane_blob_write_proj(blob_path, &(struct ane_wsrc){w, AD_TYPE_F16, cout * cin}, 1, err);
		free(w);
		mil = rc ? NULL : ane_mil_proj((int)cin, (int)cout, (int)W, err);
	}
	struct emu_file f = {.name = "w.bin", .path = blob_path};
	struct prog p = {.k = mil ? emu_compile(e, mil, &f, 1, err) : NULL, .W = W};
	free(mil);
	unlink(blob_path);
	if (!p.k) {
		fprintf(stderr, "compile: %s\n", err);
		exit(1);
	}
	p.in = calloc(1, emu_input_capacity(p.k));
	p.out = calloc(1, emu_output_capacity(p.k));
	size_t C = emu_input_layout(p.k, 0)->channels;
	float *x = malloc(W * C * sizeof(float));
	for (size_t i = 0; i < W * C; i++)
		x[i] = (float)((i * 7) % 13) * 0.1f - 0.6f;
	ane_scatter_f32(emu_input_layout(p.k, 0), p.in, x, W, C, err);
	free(x);
	return p;
}

static void
drop(struct prog *p)
{
	emu_kernel_free(p->k);
	free(p->in), free(p->out);
}

static void
eval(struct prog *p)
{
	char err[AD_ERRLEN];
	if (emu_eval(p->k, (const void *const *)&p->in, &p->out, p->W, err)) {
		fprintf(stderr, "eval: %s\n", err);
		exit(1);
	}
}

// a batch of evals (or reads of buf, when p is NULL) lasting about 50 ms
static int
batch(struct emu *e, struct prog *p, const void *buf, size_t n, int simd)
{
	double one = now();
	if (p)
		eval(p);
	else
		read_pool(e, buf, n, simd);
	one = now() - one;
	int k = (int)(0.05 / (one > 1e-6 ? one : 1e-6));
	return k < 1 ? 1 : k > 2000 ? 2000 : k;
}

// seconds per eval of p and per read of buf (n bytes; buf NULL: none), the
// two alternating within each repeat so that both see the same machine:
// warm (a batch back to back), cold (each after streaming evict; evict
// NULL: none; of pc if set). cpu: process CPU time over threads x wall of
// the warm evals.
// kp evals of p back to back: seconds per eval, and the process's CPU
// time over threads x wall (%)
static void
warm_evals(struct emu *e, struct prog *p, int kp, double *sec, double *cpu)
{
	double t = now(), c = cpu_now();
	for (int i = 0; i < kp; i++)
		eval(p);
	t = now() - t;
	*sec = t / kp;
	*cpu = (cpu_now() - c) / t / emu_nthreads(e) * 100;
}

static void
measure(struct emu *e, struct prog *p, struct prog *pc, const void *buf, size_t n, const void *evict, size_t nevict,
        int simd, double *warm, double *cold, double *rwarm, double *rcold, double *cpu)
{
	int kp = batch(e, p, NULL, 0, simd), kr = buf ? batch(e, NULL, buf, n, simd) : 0;
	for (int r = 0; r < REPEATS; r++) {
		double t;
		warm_evals(e, p, kp, &warm[r], &cpu[r]);
		if (buf) {
			t = now();
			for (int i = 0; i < kr; i++)
				read_pool(e, buf, n, simd);
			rwarm[r] = (now() - t) / kr;
		}
		if (!evict)
			continue;
		double sp = 0, sr = 0;
		for (int i = 0; i < 5; i++) {
			read_pool(e, evict, nevict, simd);
			t = now();
			eval(pc ? pc : p);
			sp += now() - t;
			if (buf) {
				read_pool(e, evict, nevict, simd);
				t = now();
				read_pool(e, buf, n, simd);
				sr += now() - t;
			}
		}
		cold[r] = sp / 5;
		rcold[r] = sr / 5;
	}
}

// 2 MiB aligned, on huge pages where the kernel gives them (as the emu's
// panels), touched
static void *
huge_buf(size_t n)
{
	size_t len = (n + (2u << 20) - 1) / (2u << 20) * (2u << 20);
	void *p = aligned_alloc(2u << 20, len);
	if (!p) {
		fprintf(stderr, "out of memory\n");
		exit(1);
	}
	madvise(p, len, MADV_HUGEPAGE);
	memset(p, 1, len);
	return p;
}

struct shape {
	const char *name;
	size_t cin, cout;
};

// GB/s from seconds, per repeat
static struct st
gbs(const double *t, double bytes)
{
	double v[REPEATS];
	for (int r = 0; r < REPEATS; r++)
		v[r] = bytes / t[r] / 1e9;
	return stats(v);
}

// per-repeat ratio a[r] / b[r] of two time series (b's speed over a's...)
static struct st
ratio(const double *num, const double *den)
{
	double v[REPEATS];
	for (int r = 0; r < REPEATS; r++)
		v[r] = num[r] / den[r];
	return stats(v);
}

struct busy {
	pthread_t caller;
	int helped; // tasks run by a worker
};

// 20 us of work; counts the tasks a worker ran
static void
busy_task(void *arg, size_t t)
{
	struct busy *b = arg;
	double t0 = now();
	while (now() - t0 < 20e-6)
		;
	if (!pthread_equal(pthread_self(), b->caller))
		__atomic_add_fetch(&b->helped, 1, __ATOMIC_RELAXED);
}

// the pool's wake-up on decode-sized jobs: one 20 us task per thread, back
// to back (the workers still polling) and 1 ms apart (asleep again); the
// wall time per job (20 us when every thread takes one at once) and the
// share of tasks a worker ran
static void
bench_pool(struct emu *e)
{
	int nt = emu_nthreads(e);
	for (int gap = 0; gap < 2; gap++) {
		double v[REPEATS], h[REPEATS];
		for (int r = 0; r < REPEATS; r++) {
			struct busy b = {.caller = pthread_self()};
			int n = gap ? 50 : 500;
			double sum = 0;
			for (int i = 0; i < n; i++) {
				if (gap) {
					struct timespec ts = {0, 1000000};
					nanosleep(&ts, NULL);
				}
				double t = now();
				emu_parallel(e, busy_task, &b, (size_t)nt);
				sum += now() - t;
			}
			v[r] = sum / n * 1e6;
			h[r] = 100.0 * b.helped / ((double)n * (nt - 1));
		}
		struct st a = stats(v), c = stats(h);
		printf("pool, %d tasks of 20 us %s: %.1f us per job [%.1f, %.1f], workers ran %.0f%% [%.0f, %.0f] of their share\n",
		       nt, gap ? "1 ms apart" : "back to back", a.med, a.lo, a.hi, c.med, c.lo, c.hi);
	}
}

static double
thread_cpu(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

// -k: the one-column kernel alone (emu_conv_simd, one stream per thread as
// in a model-sized context) on the calling thread, weights from DRAM,
// against a plain read of as many bytes on the same thread; each the best
// of 15 by the thread's own CPU time, alternating, so that a busy machine
// (time slices lost to others) hurts neither
static void
bench_alone(int simd, const void *evict, size_t nevict)
{
	static const struct shape shapes[] = {
		{"smollm2 head", 576, 49152},
		{"qwen2.5 ffn up", 896, 4864},
		{"qwen2.5 ffn down", 4864, 896},
		{"smollm2 ffn up", 576, 1536},
	};
	printf("kernel alone, 1 column, 1 thread, from DRAM, best of 15 by thread CPU time\n");
	for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
		const struct shape *s = &shapes[si];
		size_t nb = emu_panel_bytes(s->cout, s->cin);
		uint16_t *w = malloc(s->cout * s->cin * 2), *pn = huge_buf(nb);
		fill_w(w, s->cout * s->cin, 5);
		emu_pack(w, s->cout, s->cin, pn);
		free(w);
		void *buf = huge_buf(nb);
		float *x = calloc(s->cin, 4), *y = calloc(s->cout, 4);
		double bk = 1e9, br = 1e9;
		for (int r = 0; r < 15; r++) {
			struct rd rr = {.p = evict, .n = nevict, .per = nevict, .simd = simd};
			read_task(&rr, 0);
			double t = thread_cpu();
			emu_conv_simd(simd, pn, s->cout, s->cin, x, 1, y, 0, (s->cout + 15) / 16);
			t = thread_cpu() - t;
			bk = t < bk ? t : bk;
			read_task(&rr, 0);
			struct rd rb = {.p = buf, .n = nb, .per = nb, .simd = simd};
			t = thread_cpu();
			read_task(&rb, 0);
			t = thread_cpu() - t;
			br = t < br ? t : br;
			sink += rr.sum[0] + rb.sum[0] + y[0];
		}
		printf("  %-18s %5.1f MiB: kernel %7.0f us %5.1f GB/s, read %7.0f us %5.1f GB/s, ratio %.2f\n", s->name,
		       nb / 1048576.0, bk * 1e6, nb / bk / 1e9, br * 1e6, nb / br / 1e9, br / bk);
		fflush(stdout);
		free(pn), free(buf), free(x), free(y);
	}
}

static void
bench_path(int simd, int nth, int quick, const void *evict, size_t nevict)
{
	char err[AD_ERRLEN];
	struct emu *e = emu_open(&(struct emu_opts){.threads = nth, .simd = simd}, err);
	if (!e) {
		fprintf(stderr, "emu: %s\n", err);
		exit(1);
	}
	double pk[REPEATS], pk1[REPEATS];
	for (int r = 0; r < REPEATS; r++)
		pk[r] = fma_peak(e, simd, &pk1[r]);
	struct st peak = stats(pk), peak1 = stats(pk1);
	printf("\n== path %s, %d thread(s)\n", emu_simd_name(simd), nth);
	printf("peak fp32 FMA, all threads: %.1f GFLOP/s [%.1f, %.1f]; per thread, by its CPU time: %.1f [%.1f, %.1f]\n",
	       peak.med, peak.lo, peak.hi, peak1.med, peak1.lo, peak1.hi);
	if (nth > 1)
		bench_pool(e);
	static const struct shape shapes[] = {
		{"smollm2 ffn up", 576, 1536}, {"smollm2 ffn down", 1536, 576},    {"smollm2 qkv", 576, 960},
		{"smollm2 head", 576, 49152},  {"qwen2.5 ffn up", 896, 4864},      {"qwen2.5 ffn down", 4864, 896},
		{"qwen2.5 o", 896, 896},       {"qwen2.5 head chunk", 896, 32768},
	};
	static const int quick_set[] = {0, 3, 4, 5};
	int nshapes = quick ? 4 : (int)(sizeof shapes / sizeof shapes[0]);
	// cold evals run in a context that also holds a model's worth of weights
	// (the ane-worker's case: the emu then streams one panel at a time, which
	// reads DRAM best); warm ones in a context of that kernel alone
	struct emu *em = emu_open(&(struct emu_opts){.threads = nth, .simd = simd}, err);
	if (!em) {
		fprintf(stderr, "emu: %s\n", err);
		exit(1);
	}
	struct prog ballast = make(em, 896, 40960, 0, 1); // 70 MiB
	printf("decode, 1 column: weight GB/s of the conv and of a plain read of as many bytes; "
	       "ratio = read time / conv time, per repeat; cold: in a context holding 70 MiB "
	       "more\n");
	printf("%-20s %6s | %-22s %-22s %-18s | %-22s %-22s %-18s | %-6s %s\n", "", "MiB", "warm conv", "warm read",
	       "ratio", "cold conv", "cold read", "ratio", "cpu%", "us (warm, cold)");
	for (int si = 0; si < nshapes; si++) {
		const struct shape *s = &shapes[quick ? quick_set[si] : si];
		struct prog p = make(e, s->cin, s->cout, 0, 1);
		double bytes = (double)emu_weight_bytes(p.k);
		double w[REPEATS], c[REPEATS], u[REPEATS], rw[REPEATS], rc[REPEATS];
		void *buf = huge_buf((size_t)bytes);
		struct prog pc = make(em, s->cin, s->cout, 0, 1);
		measure(e, &p, &pc, buf, (size_t)bytes, evict, nevict, simd, w, c, rw, rc, u);
		drop(&pc);
		free(buf);
		struct st cw = gbs(w, bytes), cc = gbs(c, bytes), bw = gbs(rw, bytes), bc = gbs(rc, bytes),
			  cp = stats(u), qw = ratio(rw, w), qc = ratio(rc, c);
		printf("%-20s %6.1f | %5.1f [%5.1f, %5.1f]  %5.1f [%5.1f, %5.1f]  %4.2f [%4.2f, %4.2f] | %5.1f [%5.1f, %5.1f]  %5.1f [%5.1f, %5.1f]  %4.2f [%4.2f, %4.2f] | %3.0f    %.0f, %.0f\n",
		       s->name, bytes / 1048576, cw.med, cw.lo, cw.hi, bw.med, bw.lo, bw.hi, qw.med, qw.lo, qw.hi,
		       cc.med, cc.lo, cc.hi, bc.med, bc.lo, bc.hi, qc.med, qc.lo, qc.hi, cp.med, bytes / cw.med / 1e3,
		       bytes / cc.med / 1e3);
		fflush(stdout);
		drop(&p);
	}
	drop(&ballast);
	emu_close(em);
	// each repeat measures the peak just before its GEMMs and takes the
	// ratio of the two: on a shared machine the peak alone swung by 2x
	// between repeats, and a ratio of two medians taken minutes apart said
	// little
	printf("prefill, 64 columns: GFLOP/s; ratio to the peak measured just before, per repeat; per core: "
	       "flop over the process's CPU seconds, ratio to the peak per thread (its CPU time), per repeat\n");
	printf("%-20s %6s | %-22s %-18s | %-22s %-18s | %-22s | %s\n", "", "MiB", "GFLOP/s", "ratio", "per core",
	       "ratio", "us per eval", "cpu%");
	for (int si = 0; si < nshapes; si++) {
		const struct shape *s = &shapes[quick ? quick_set[si] : si];
		if (s->cout > 8192 && simd == EMU_SIMD_REF)
			continue; // seconds per repeat
		struct prog p = make(e, s->cin, s->cout, 0, 64);
		double flop = 2.0 * s->cin * s->cout * 64;
		double w[REPEATS], u[REPEATS], g[REPEATS], gc[REPEATS], q[REPEATS], qc[REPEATS];
		int kp = batch(e, &p, NULL, 0, simd);
		for (int r = 0; r < REPEATS; r++) {
			double one, all = fma_peak(e, simd, &one);
			warm_evals(e, &p, kp, &w[r], &u[r]);
			g[r] = flop / w[r] / 1e9;
			gc[r] = g[r] / (u[r] / 100 * nth);
			q[r] = g[r] / all;
			qc[r] = gc[r] / one;
		}
		struct st gf = stats(g), gcs = stats(gc), tw = stats(w), cp = stats(u), qs = stats(q), qcs = stats(qc);
		printf("%-20s %6.1f | %5.1f [%5.1f, %5.1f]  %4.2f [%4.2f, %4.2f] | %5.1f [%5.1f, %5.1f]  %4.2f [%4.2f, "
		       "%4.2f] | %6.0f [%6.0f, %6.0f] | %3.0f\n",
		       s->name, (double)emu_weight_bytes(p.k) / 1048576, gf.med, gf.lo, gf.hi, qs.med, qs.lo, qs.hi,
		       gcs.med, gcs.lo, gcs.hi, qcs.med, qcs.lo, qcs.hi, tw.med * 1e6, tw.lo * 1e6, tw.hi * 1e6,
		       cp.med);
		fflush(stdout);
		drop(&p);
	}
	if (!quick) {
		static const struct shape ffns[] = {{"smollm2 ffn", 576, 1536}, {"qwen2.5 ffn", 896, 4864}};
		printf("fused FFN program: its sigmoid, mul, mul op by op (no_fuse) and fused, "
		       "alternating within each repeat; wall us and CPU us (all threads) per eval\n");
		printf("%-20s %-4s | %-26s %-26s | %-26s %-26s | %s\n", "", "cols", "op by op, wall", "fused, wall",
		       "op by op, cpu", "fused, cpu", "gain (cpu)");
		for (int fi = 0; fi < 2; fi++)
			for (size_t W = 1; W <= 64; W *= 64) {
				if (simd == EMU_SIMD_REF && W > 1)
					continue;
				struct emu *ef[2];
				struct prog pf[2];
				for (int nf = 0; nf < 2; nf++) {
					ef[nf] = emu_open(
						&(struct emu_opts){.threads = nth, .simd = simd, .no_fuse = nf}, err);
					if (!ef[nf]) {
						fprintf(stderr, "emu: %s\n", err);
						exit(1);
					}
					pf[nf] = make(ef[nf], ffns[fi].cin, 0, ffns[fi].cout, W);
				}
				int k = batch(ef[0], &pf[0], NULL, 0, simd);
				double t[2][REPEATS], c[2][REPEATS];
				for (int r = 0; r < REPEATS; r++)
					for (int nf = 1; nf >= 0; nf--) {
						double t0 = now(), c0 = cpu_now();
						for (int i = 0; i < k; i++)
							eval(&pf[nf]);
						t[nf][r] = (now() - t0) / k * 1e6;
						c[nf][r] = (cpu_now() - c0) / k * 1e6;
					}
				struct st w1 = stats(t[1]), w0 = stats(t[0]), c1 = stats(c[1]), c0 = stats(c[0]);
				printf("%-20s %-4zu | %7.0f [%7.0f, %7.0f]  %7.0f [%7.0f, %7.0f]  | %7.0f [%7.0f, %7.0f]  %7.0f [%7.0f, %7.0f]  | %.2fx\n",
				       ffns[fi].name, W, w1.med, w1.lo, w1.hi, w0.med, w0.lo, w0.hi, c1.med, c1.lo,
				       c1.hi, c0.med, c0.lo, c0.hi, c1.med / c0.med);
				fflush(stdout);
				for (int nf = 0; nf < 2; nf++) {
					drop(&pf[nf]);
					emu_close(ef[nf]);
				}
			}
	}
	emu_close(e);
}

int
main(int argc, char **argv)
{
	int nth = 2, only = EMU_SIMD_AUTO, quick = 0, alone = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-t") && i + 1 < argc) {
			nth = atoi(argv[++i]);
		} else if (!strcmp(argv[i], "-p") && i + 1 < argc) {
			i++;
			for (int l = EMU_SIMD_REF; l <= EMU_SIMD_AVX512; l++)
				if (!strcmp(argv[i], emu_simd_name(l)))
					only = l;
			if (!strcmp(argv[i], "avx512r")) {
				only = EMU_SIMD_AVX512;
				zmm_read = 1;
			}
			if (only == EMU_SIMD_AUTO) {
				fprintf(stderr, "-p: ref, avx2 or avx512\n");
				return 2;
			}
		} else if (!strcmp(argv[i], "-q")) {
			quick = 1;
		} else if (!strcmp(argv[i], "-k")) {
			alone = 1;
		} else {
			fprintf(stderr, "usage: %s [-t threads] [-p ref|avx2|avx512] [-q] [-k]\n", argv[0]);
			return 2;
		}
	}
	if (nth < 1 || nth > 64)
		nth = 2;
	const char *tmp = getenv("TMPDIR");
	snprintf(blob_path, sizeof blob_path, "%s/bench-emu-%d.bin", tmp ? tmp : "/tmp", (int)getpid());
	int top = emu_cpu_simd();
	printf("emu conv bench: %d thread(s); this CPU's best path: %s\n", nth, emu_simd_name(top));
	if (only > top) {
		fprintf(stderr, "path %s: this CPU lacks it\n", emu_simd_name(only));
		return 1;
	}
	size_t nevict = 128u << 20;
	uint8_t *evict = aligned_alloc(4096, nevict);
	memset(evict, 1, nevict);
	for (int l = top; l >= EMU_SIMD_REF; l--) {
		if (only != EMU_SIMD_AUTO && only != l)
			continue;
		if (!alone) {
			bench_path(l, nth, quick, evict, nevict);
		} else if (l > EMU_SIMD_REF) {
			printf("\n== path %s\n", emu_simd_name(l));
			bench_alone(l, evict, nevict);
		}
	}
	free(evict);
	return 0;
}
