// test-memread.c - common/memread.h: a pass reads every word of the buffer
// once (the sum of the words, against the fill's own formula) on 1 to 3
// threads and several sizes, the size rounded as promised, and the refusals:
// too few bytes a thread, a thread count out of range, a buffer too large.
#include <stdint.h>
#include <string.h>

#include "err.h"
#include "memread.h"
#include "t.h"

// the too-large buffer must come back as NULL, not stop the test (ASan)
const char *__asan_default_options(void);
const char *
__asan_default_options(void)
{
	return "allocator_may_return_null=1";
}

static uint64_t
expect_sum(size_t bytes)
{
	uint64_t s = 0;
	for (uint64_t i = 0; i < bytes / 8; i++)
		s += i * AD_MEMREAD_MUL;
	return s;
}

static void
test_every_word(void)
{
	static const size_t sizes[] = {256, 4096, 100000, (size_t)3 << 20, ((size_t)5 << 20) + 12345};
	char err[AD_ERRLEN];
	for (int th = 1; th <= 3; th++)
		for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
			size_t n = sizes[k];
			if (n / (size_t)th < 256)
				continue;
			struct ad_memread *r = ad_memread_new(n, th, err);
			REQUIRE(r, "%zu bytes, %d threads: %s", n, th, err);
			size_t b = ad_memread_bytes(r);
			CHECK(b == n / (size_t)th / 256 * 256 * (size_t)th, "%zu bytes, %d threads: %zu", n, th, b);
			for (int pass = 0; pass < 2; pass++) {
				double g = ad_memread_pass(r);
				CHECK(g > 0, "%zu bytes, %d threads: %g GB/s", n, th, g);
				CHECK(ad_memread_sum(r) == expect_sum(b), "%zu bytes, %d threads: the sum of the words",
				      n, th);
			}
			ad_memread_free(r);
		}
	ad_memread_free(NULL);
}

static void
test_refusals(void)
{
	char err[AD_ERRLEN];
	err[0] = 0;
	CHECK(!ad_memread_new(511, 2, err) && strstr(err, "at least 256 a thread"), "%s", err);
	err[0] = 0;
	CHECK(!ad_memread_new(4096, 0, err) && strstr(err, "1 to 64"), "%s", err);
	err[0] = 0;
	CHECK(!ad_memread_new(4096, 65, err) && strstr(err, "1 to 64"), "%s", err);
	err[0] = 0;
	CHECK(!ad_memread_new(SIZE_MAX / 2, 2, err) && strstr(err, "out of memory"), "%s", err);
}

int
main(void)
{
	T_RUN(test_every_word);
	T_RUN(test_refusals);
	return t_done();
}
