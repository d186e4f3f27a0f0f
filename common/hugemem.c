// hugemem.c - buffers and an arena on 2 MiB pages (hugemem.h).
#include "hugemem.h"

#include <pthread.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define ALIGN 64
#define DEFAULT_CHUNK ((size_t)32 << 20)

void *
ad_huge_map(size_t len, int fd)
{
	len = (len ? len + 4095 : 4096) / 4096 * 4096;
	size_t span = len + AD_HUGE_PAGE;
	unsigned char *r = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (r == MAP_FAILED)
		return NULL;
	unsigned char *a = (unsigned char *)(((uintptr_t)r + AD_HUGE_PAGE - 1) & ~(uintptr_t)(AD_HUGE_PAGE - 1));
	void *m = fd < 0 ? mmap(a, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0)
	                 : mmap(a, len, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0);
	if (m == MAP_FAILED) {
		munmap(r, span);
		return NULL;
	}
	if (a > r)
		munmap(r, (size_t)(a - r));
	if (r + span > a + len)
		munmap(a + len, (size_t)(r + span - (a + len)));
#ifdef MADV_HUGEPAGE
	madvise(a, len / AD_HUGE_PAGE * AD_HUGE_PAGE, MADV_HUGEPAGE);
#endif
	return a;
}

void
ad_prefault(void *p, size_t n)
{
	if (!p || !n)
		return;
	uintptr_t a = (uintptr_t)p & ~(uintptr_t)4095, b = ((uintptr_t)p + n + 4095) & ~(uintptr_t)4095;
#ifdef __linux__
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
	if (madvise((void *)a, b - a, MADV_POPULATE_WRITE) == 0)
		return;
#endif
	// the first and last page only partly ours: the bytes at p and p + n - 1
	for (uintptr_t q = a; q < b; q += 4096) {
		unsigned char *c = (unsigned char *)(q < (uintptr_t)p ? (uintptr_t)p : q);
		if ((uintptr_t)c >= (uintptr_t)p + n)
			c = (unsigned char *)p + n - 1;
		__atomic_fetch_add(c, 0, __ATOMIC_RELAXED);
	}
}

void
ad_ready_range(struct ad_ready *r, void *base, size_t size, size_t off, size_t n)
{
	if (!base || !n || off > size || n > size - off)
		return;
	const size_t np = (size + 4095) / 4096;
	if (r->npieces < np) {
		uint64_t *b = calloc((np + 63) / 64, sizeof *b);
		if (!b)
			return;
		free(r->bits);
		r->bits = b;
		r->npieces = np;
	}
	const size_t p1 = (off + n + 4095) / 4096;
	for (size_t p = off / 4096; p < p1;) {
		if (r->bits[p / 64] >> (p % 64) & 1) {
			p++;
			continue;
		}
		size_t q = p;
		for (; q < p1 && !(r->bits[q / 64] >> (q % 64) & 1); q++)
			r->bits[q / 64] |= (uint64_t)1 << (q % 64);
		size_t end = q * 4096 < size ? q * 4096 : size;
		ad_prefault((char *)base + p * 4096, end - p * 4096);
		p = q;
	}
}

void
ad_ready_clear(struct ad_ready *r)
{
	free(r->bits);
	r->bits = NULL;
	r->npieces = 0;
}

void
ad_huge_unmap(void *p, size_t len)
{
	if (p)
		munmap(p, (len ? len + 4095 : 4096) / 4096 * 4096);
}

struct chunk {
	struct chunk *next;
	unsigned char *base;
	size_t size, used; // used: the bump offset (a chunk of its own: size)
	size_t live;       // allocations not yet released
	int own;           // one allocation's chunk
};

struct ad_huge_arena {
	pthread_mutex_t mu;
	size_t chunk;
	struct chunk *chunks; // newest first; the newest shared one takes allocations
	struct chunk *cur;
	size_t bytes;
};

struct ad_huge_arena *
ad_huge_arena_new(size_t chunk)
{
	struct ad_huge_arena *a = calloc(1, sizeof *a);
	if (!a)
		return NULL;
	if (!chunk)
		chunk = DEFAULT_CHUNK;
	a->chunk = (chunk + AD_HUGE_PAGE - 1) / AD_HUGE_PAGE * AD_HUGE_PAGE;
	pthread_mutex_init(&a->mu, NULL);
	return a;
}

static void
chunk_free(struct ad_huge_arena *a, struct chunk *c)
{
	a->bytes -= c->size;
	ad_huge_unmap(c->base, c->size);
	free(c);
}

void
ad_huge_arena_free(struct ad_huge_arena *a)
{
	if (!a)
		return;
	while (a->chunks) {
		struct chunk *c = a->chunks;
		a->chunks = c->next;
		chunk_free(a, c);
	}
	pthread_mutex_destroy(&a->mu);
	free(a);
}

static struct chunk *
chunk_new(struct ad_huge_arena *a, size_t size, int own)
{
	struct chunk *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	if (!(c->base = ad_huge_map(size, -1))) {
		free(c);
		return NULL;
	}
	c->size = size;
	c->own = own;
	c->next = a->chunks;
	a->chunks = c;
	a->bytes += size;
	return c;
}

void *
ad_huge_arena_alloc(struct ad_huge_arena *a, size_t n)
{
	n = (n ? n + ALIGN - 1 : ALIGN) / ALIGN * ALIGN;
	void *p = NULL;
	pthread_mutex_lock(&a->mu);
	if (n > a->chunk / 4) {
		struct chunk *c = chunk_new(a, n, 1);
		if (c) {
			c->used = n;
			c->live = 1;
			p = c->base;
		}
	} else {
		if (!a->cur || a->cur->size - a->cur->used < n) {
			// the old one goes once its last allocation does
			struct chunk *c = chunk_new(a, a->chunk, 0);
			if (c)
				a->cur = c;
		}
		if (a->cur && a->cur->size - a->cur->used >= n) {
			p = a->cur->base + a->cur->used;
			a->cur->used += n;
			a->cur->live++;
		}
	}
	pthread_mutex_unlock(&a->mu);
	return p;
}

void
ad_huge_arena_release(struct ad_huge_arena *a, void *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&a->mu);
	struct chunk **pp = &a->chunks;
	while (*pp && !((unsigned char *)p >= (*pp)->base && (unsigned char *)p < (*pp)->base + (*pp)->used))
		pp = &(*pp)->next;
	struct chunk *c = *pp;
	if (!c || !c->live) {
		fprintf(stderr, "ad_huge_arena_release: %p is not allocated from this arena\n", p);
		abort();
	}
	if (--c->live == 0) {
		if (c == a->cur) {
			c->used = 0;
		} else {
			*pp = c->next;
			chunk_free(a, c);
		}
	}
	pthread_mutex_unlock(&a->mu);
}

size_t
ad_huge_arena_bytes(const struct ad_huge_arena *a)
{
	pthread_mutex_lock((pthread_mutex_t *)&a->mu);
	size_t b = a->bytes;
	pthread_mutex_unlock((pthread_mutex_t *)&a->mu);
	return b;
}

const char *
ad_huge_thp_mode(char *buf, size_t cap)
{
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
	if (!f)
		return NULL;
	char line[128] = {0};
	const char *r = NULL;
	if (fgets(line, sizeof line, f)) {
		char *o = strchr(line, '['), *c = o ? strchr(o, ']') : NULL;
		if (o && c && (size_t)(c - o) <= cap) {
			memcpy(buf, o + 1, (size_t)(c - o - 1));
			buf[c - o - 1] = 0;
			r = buf;
		}
	}
	fclose(f);
	return r;
}

long long
ad_huge_process_bytes(void)
{
#ifdef __linux__
	FILE *f = fopen("/proc/self/smaps_rollup", "r");
	if (!f)
		return -1;
	long long total = 0;
	int seen = 0;
	char line[256];
	while (fgets(line, sizeof line, f)) {
		unsigned long long kb;
		if (sscanf(line, "AnonHugePages: %llu", &kb) == 1 || sscanf(line, "ShmemPmdMapped: %llu", &kb) == 1 ||
		    sscanf(line, "FilePmdMapped: %llu", &kb) == 1) {
			total += (long long)kb * 1024;
			seen = 1;
		}
	}
	fclose(f);
	return seen ? total : -1;
#else
	return -1;
#endif
}

void
ad_heap_trim(void)
{
#ifdef __GLIBC__
	malloc_trim(0);
#endif
}
