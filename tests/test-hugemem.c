// test-hugemem.c - common/hugemem.h: ad_huge_map's mappings; the arena's
// allocations (aligned, disjoint, small ones packed into shared chunks, a
// large one in a chunk of its own), its chunks released when their last
// allocation goes and the newest one reused, a foreign pointer refused
// (abort); ad_huge_process_bytes, which must see a chunk's first huge
// page where the kernel gives an advised range transparent huge pages;
// and ad_prefault and ad_ready_range, by mincore.
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "hugemem.h"
#include "t.h"

#define MiB ((size_t)1 << 20)

// anonymous: zeroed, writable, on a huge-page boundary at every size; a
// file: its bytes, read-only, on a boundary too; a bad descriptor: NULL
static void
test_map(void)
{
	static const size_t sizes[] = {0, 1, 100, 4096, AD_HUGE_PAGE - 1, AD_HUGE_PAGE, 5 * MiB + 123};
	for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
		unsigned char *p = ad_huge_map(sizes[k], -1);
		REQUIRE(p, "%zu bytes", sizes[k]);
		CHECK((uintptr_t)p % AD_HUGE_PAGE == 0, "%zu bytes at %p", sizes[k], (void *)p);
		size_t nz = 0;
		for (size_t i = 0; i < sizes[k]; i++)
			nz += p[i] != 0;
		CHECK(nz == 0, "%zu bytes: %zu not zero", sizes[k], nz);
		memset(p, 0xa5, sizes[k]);
		ad_huge_unmap(p, sizes[k]);
	}
	ad_huge_unmap(NULL, 10);
	char path[600];
	snprintf(path, sizeof path, "%s/map.bin", t_tmpdir());
	int fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0600);
	REQUIRE(fd >= 0);
	const size_t n = 3 * MiB + 17;
	unsigned char *w = malloc(n);
	REQUIRE(w);
	for (size_t i = 0; i < n; i++)
		w[i] = (unsigned char)(i * 7 + 1);
	REQUIRE(write(fd, w, n) == (ssize_t)n);
	unsigned char *m = ad_huge_map(n, fd);
	REQUIRE(m);
	CHECK((uintptr_t)m % AD_HUGE_PAGE == 0);
	CHECK(memcmp(m, w, n) == 0, "the file's bytes");
	ad_huge_unmap(m, n);
	close(fd);
	unlink(path);
	free(w);
	CHECK(ad_huge_map(4096, 12345) == NULL, "a descriptor that is not open");
}

// n allocations of the given sizes, each filled with its index; then every
// byte checked: no two overlap
static void
test_arena_disjoint(void)
{
	struct ad_huge_arena *a = ad_huge_arena_new(4 * MiB);
	REQUIRE(a);
	enum { N = 64 };
	unsigned char *p[N];
	size_t sz[N];
	for (int i = 0; i < N; i++) {
		sz[i] = (size_t)(i * 7919 % 300000) + (size_t)i; // 0 .. ~300 KB, some 0
		if (i % 16 == 5)
			sz[i] = 3 * MiB; // over a quarter of a chunk: a chunk of its own
		p[i] = ad_huge_arena_alloc(a, sz[i]);
		REQUIRE(p[i], "allocation %d of %zu bytes", i, sz[i]);
		CHECK((uintptr_t)p[i] % 64 == 0, "allocation %d at %p", i, (void *)p[i]);
		memset(p[i], i, sz[i]);
	}
	for (int i = 0; i < N; i++)
		for (size_t b = 0; b < sz[i]; b++)
			if (p[i][b] != (unsigned char)i) {
				CHECK(0, "allocation %d byte %zu: %d", i, b, p[i][b]);
				break;
			}
	for (int i = 0; i < N; i++)
		for (int j = i + 1; j < N; j++)
			CHECK(p[i] + sz[i] <= p[j] || p[j] + sz[j] <= p[i] || !sz[i] || !sz[j], "%d and %d overlap", i,
			      j);
	for (int i = 0; i < N; i++)
		ad_huge_arena_release(a, p[i]);
	ad_huge_arena_release(a, NULL);
	// all that is left is the newest shared chunk, empty, to be reused
	CHECK(ad_huge_arena_bytes(a) == 4 * MiB, "%zu", ad_huge_arena_bytes(a));
	ad_huge_arena_free(a);
	ad_huge_arena_free(NULL);
}

static void
test_arena_chunks(void)
{
	struct ad_huge_arena *a = ad_huge_arena_new(3 * MiB); // rounded up to 4 MiB
	REQUIRE(a);
	CHECK(ad_huge_arena_bytes(a) == 0);
	// 1 MiB each: four to a chunk, the fifth in a second one
	unsigned char *p[5];
	for (int i = 0; i < 5; i++)
		REQUIRE(p[i] = ad_huge_arena_alloc(a, MiB));
	CHECK(ad_huge_arena_bytes(a) == 8 * MiB, "%zu", ad_huge_arena_bytes(a));
	CHECK(p[1] == p[0] + MiB && p[3] == p[0] + 3 * MiB, "packed in order");
	CHECK((uintptr_t)p[0] % AD_HUGE_PAGE == 0 && (uintptr_t)p[4] % AD_HUGE_PAGE == 0, "chunks on huge pages");
	// the first chunk goes with its last allocation, not before
	for (int i = 0; i < 3; i++)
		ad_huge_arena_release(a, p[i]);
	CHECK(ad_huge_arena_bytes(a) == 8 * MiB, "%zu", ad_huge_arena_bytes(a));
	ad_huge_arena_release(a, p[3]);
	CHECK(ad_huge_arena_bytes(a) == 4 * MiB, "%zu", ad_huge_arena_bytes(a));
	// the newest one, emptied, is reused from its start
	ad_huge_arena_release(a, p[4]);
	CHECK(ad_huge_arena_bytes(a) == 4 * MiB, "%zu", ad_huge_arena_bytes(a));
	unsigned char *q = ad_huge_arena_alloc(a, 100);
	CHECK(q == p[4], "reused: %p against %p", (void *)q, (void *)p[4]);
	// a large one: its own chunk, released with it
	unsigned char *big = ad_huge_arena_alloc(a, 2 * MiB);
	REQUIRE(big);
	CHECK(ad_huge_arena_bytes(a) == 6 * MiB, "%zu", ad_huge_arena_bytes(a));
	ad_huge_arena_release(a, big);
	CHECK(ad_huge_arena_bytes(a) == 4 * MiB, "%zu", ad_huge_arena_bytes(a));
	ad_huge_arena_release(a, q);
	ad_huge_arena_free(a); // with nothing left and with something left (below)
	a = ad_huge_arena_new(0);
	REQUIRE(a);
	REQUIRE(ad_huge_arena_alloc(a, 1000));
	CHECK(ad_huge_arena_bytes(a) == 32 * MiB, "the default chunk: %zu", ad_huge_arena_bytes(a));
	ad_huge_arena_free(a);
}

// a pointer the arena never gave, or one given back twice: abort
static void
test_arena_refuses(void)
{
	for (int k = 0; k < 2; k++) {
		fflush(NULL);
		pid_t pid = fork();
		REQUIRE(pid >= 0);
		if (pid == 0) {
			struct ad_huge_arena *a = ad_huge_arena_new(0);
			char *p = ad_huge_arena_alloc(a, 64);
			if (k == 0) {
				char other[64];
				ad_huge_arena_release(a, other);
			} else {
				ad_huge_arena_release(a, p);
				ad_huge_arena_release(a, p);
			}
			_exit(0);
		}
		int st = 0;
		waitpid(pid, &st, 0);
		CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "case %d: status %#x", k, st);
	}
}

static void
test_process_bytes(void)
{
#ifdef __linux__
	long long before = ad_huge_process_bytes();
	CHECK(before >= 0, "%lld", before);
	struct ad_huge_arena *a = ad_huge_arena_new(8 * MiB);
	REQUIRE(a);
	unsigned char *p = ad_huge_arena_alloc(a, MiB), *q = ad_huge_arena_alloc(a, MiB);
	REQUIRE(p && q);
	memset(p, 1, MiB);
	memset(q, 2, MiB);
	long long after = ad_huge_process_bytes();
	char mode[32];
	const char *m = ad_huge_thp_mode(mode, sizeof mode);
	// two small buffers in one advised, aligned chunk: one huge page
	if (m && strcmp(m, "never"))
		CHECK(after - before >= (long long)(2 * MiB), "transparent huge pages (%s): %lld -> %lld", m, before,
		      after);
	else
		printf("test_process_bytes: transparent huge pages %s here: not checked that the arena has them\n",
		       m ? m : "unknown");
	ad_huge_arena_free(a);
	CHECK(!m || !strcmp(m, "always") || !strcmp(m, "madvise") || !strcmp(m, "never"), "%s", m);
	CHECK(ad_huge_thp_mode(mode, 3) == NULL || strlen(mode) < 3, "a buffer too small: %s", mode);
#else
	CHECK(ad_huge_process_bytes() == -1);
#endif
}

// pages of a fresh mapping resident by mincore
static int
resident(unsigned char *p, size_t npages, unsigned char *vec)
{
	if (mincore(p, npages * 4096, vec))
		return -1;
	int n = 0;
	for (size_t i = 0; i < npages; i++)
		n += vec[i] & 1;
	return n;
}

// ad_prefault and ad_ready_range: the pages of the range, and only
// those, become resident; no byte changes (the buffer may be in use); a
// range outside the buffer is ignored; a piece marked is not made present
// again, and ad_ready_clear forgets the marks
static void
test_prefault(void)
{
	const size_t np = 16;
	unsigned char vec[16];
	unsigned char *p = mmap(NULL, np * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	REQUIRE(p != MAP_FAILED);
	if (resident(p, np, vec) != 0) {
		printf("  skipped: mincore reports untouched anonymous pages resident\n");
		munmap(p, np * 4096);
		return;
	}
	p[5 * 4096 + 7] = 42;
	ad_prefault(p + 2 * 4096 + 100, 4096); // pages 2 and 3
	ad_prefault(p + 5 * 4096, 1);
	REQUIRE(resident(p, np, vec) >= 0);
	CHECK((vec[2] & 1) && (vec[3] & 1), "pages 2 and 3 not resident");
	CHECK(!(vec[1] & 1) && !(vec[4] & 1) && !(vec[6] & 1), "a page outside the range resident");
	CHECK(p[5 * 4096 + 7] == 42 && p[2 * 4096 + 100] == 0, "a byte changed");
	ad_prefault(p, 0);
	ad_prefault(NULL, 100);

	struct ad_ready r = {0};
	ad_ready_range(&r, p, np * 4096, 8 * 4096 + 10, 3 * 4096); // pieces 8 to 11
	ad_ready_range(&r, p, np * 4096, np * 4096 - 10, 20);      // past the end: ignored
	REQUIRE(resident(p, np, vec) >= 0);
	CHECK((vec[8] & 1) && (vec[9] & 1) && (vec[10] & 1) && (vec[11] & 1), "pieces 8 to 11 not resident");
	CHECK(!(vec[12] & 1) && !(vec[15] & 1) && !(vec[7] & 1), "a page outside the range resident");
	CHECK(r.bits && r.npieces == np && r.bits[0] == 0xf00u, "marks %#llx",
	      r.bits ? (unsigned long long)r.bits[0] : 0);
	// a marked piece is taken as present: dropped behind the marks' back,
	// it stays out
	REQUIRE(madvise(p + 9 * 4096, 4096, MADV_DONTNEED) == 0);
	ad_ready_range(&r, p, np * 4096, 9 * 4096, 4096);
	REQUIRE(resident(p, np, vec) >= 0);
	CHECK(!(vec[9] & 1), "a marked piece was made present again");
	ad_ready_clear(&r);
	CHECK(!r.bits && r.npieces == 0);
	ad_ready_range(&r, p, np * 4096, 9 * 4096, 4096);
	REQUIRE(resident(p, np, vec) >= 0);
	CHECK(vec[9] & 1, "after ad_ready_clear the piece was not made present");
	ad_ready_clear(&r);
	munmap(p, np * 4096);
}

int
main(void)
{
	T_RUN(test_map);
	T_RUN(test_arena_disjoint);
	T_RUN(test_arena_chunks);
	T_RUN(test_arena_refuses);
	T_RUN(test_process_bytes);
	T_RUN(test_prefault);
	return t_done();
}
