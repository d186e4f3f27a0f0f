// memread.c - the streaming-read baseline of memread.h.
#include "memread.h"
#include "clock.h"
#include "err.h"
#include "hugemem.h"
#include "pool.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#define BLOCK 256 // bytes a thread's loop takes per step

struct ad_memread {
	unsigned char *buf;
	size_t bytes, per; // per: a thread's share, a multiple of BLOCK
	int threads;
	struct ad_pool *pool;
	uint64_t sink[64]; // a sum per task (ad_memread_sum): no load can be left out
};

static void
read_task(void *arg, size_t task, int worker)
{
	(void)worker;
	struct ad_memread *r = arg;
	const unsigned char *p = r->buf + task * r->per;
#if defined(__AVX2__)
	__m256i a[8];
	for (int k = 0; k < 8; k++)
		a[k] = _mm256_setzero_si256();
	for (size_t i = 0; i < r->per; i += BLOCK)
		for (int k = 0; k < 8; k++)
			a[k] = _mm256_add_epi64(a[k], _mm256_load_si256((const __m256i *)(p + i) + k));
	for (int k = 1; k < 8; k++)
		a[0] = _mm256_add_epi64(a[0], a[k]);
	uint64_t t[4];
	_mm256_storeu_si256((__m256i *)t, a[0]);
	r->sink[task] = t[0] + t[1] + t[2] + t[3];
#else
	uint64_t a[8] = {0};
	const uint64_t *q = (const uint64_t *)p;
	for (size_t i = 0; i < r->per / 8; i += 8)
		for (int k = 0; k < 8; k++)
			a[k] += q[i + k];
	r->sink[task] = a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
#endif
}

struct ad_memread *
ad_memread_new(size_t bytes, int threads, char *err)
{
	if (threads < 1 || threads > 64) {
		ad_err(err, "a read on %d threads: 1 to 64", threads);
		return NULL;
	}
	if (bytes / (size_t)threads < BLOCK) {
		ad_err(err, "a read of %zu bytes on %d threads: at least %d a thread", bytes, threads, BLOCK);
		return NULL;
	}
	struct ad_memread *r = calloc(1, sizeof *r);
	if (!r) {
		ad_err(err, "out of memory");
		return NULL;
	}
	r->threads = threads;
	r->per = bytes / (size_t)threads / BLOCK * BLOCK;
	r->bytes = r->per * (size_t)threads;
	if (!(r->buf = ad_huge_map(r->bytes, -1))) {
		ad_err(err, "out of memory for a read of %zu bytes", bytes);
		free(r);
		return NULL;
	}
	for (size_t i = 0; i < r->bytes / 8; i++)
		((uint64_t *)r->buf)[i] = i * AD_MEMREAD_MUL;
	const struct ad_pool_opts po = {threads, 0, 0, "read"};
	if (!(r->pool = ad_pool_new(&po, err))) {
		ad_memread_free(r);
		return NULL;
	}
	return r;
}

void
ad_memread_free(struct ad_memread *r)
{
	if (!r)
		return;
	ad_pool_free(r->pool);
	ad_huge_unmap(r->buf, r->bytes);
	free(r);
}

size_t
ad_memread_bytes(const struct ad_memread *r)
{
	return r->bytes;
}

uint64_t
ad_memread_sum(const struct ad_memread *r)
{
	uint64_t s = 0;
	for (int k = 0; k < r->threads; k++)
		s += r->sink[k];
	return s;
}

double
ad_memread_pass(struct ad_memread *r)
{
	uint64_t t0 = ad_now_ns();
	ad_pool_run(r->pool, read_task, r, (size_t)r->threads);
	uint64_t ns = ad_now_ns() - t0;
	return ns ? (double)r->bytes / (double)ns : 0; // bytes per ns = GB/s
}
