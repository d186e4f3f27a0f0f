// test-cpu-level.c - the CPU check every program makes first (common/cpu-level.h),
// with feature sets injected: a CPU that lacks what the build was compiled
// for gets a message naming each missing feature and the way to build for
// it, and the check fails; one that has everything passes in silence.
#include "cpu-level.h"
#include "t.h"

#define V2 (AD_CPU_SSE3 | AD_CPU_SSSE3 | AD_CPU_SSE41 | AD_CPU_SSE42 | AD_CPU_POPCNT | AD_CPU_CX16)
#define V3                                                                                                             \
	(V2 | AD_CPU_AVX | AD_CPU_AVX2 | AD_CPU_FMA | AD_CPU_F16C | AD_CPU_BMI1 | AD_CPU_BMI2 | AD_CPU_LZCNT |         \
	 AD_CPU_MOVBE)

// the check's output for have/need, into buf; its return value
static int
run(unsigned have, unsigned need, const char *level, char *buf, size_t cap)
{
	FILE *f = fmemopen(buf, cap, "w");
	REQUIRE(f);
	memset(buf, 0, cap);
	int rc = ad_cpu_check(have, need, level, "anedvd-x", f);
	fclose(f);
	return rc;
}

static void
test_has_all(void)
{
	char out[1024];
	CHECK(run(V3, V3, "x86-64-v3", out, sizeof out) == 0);
	CHECK(out[0] == 0, "printed '%s'", out);
	CHECK(run(V3 | AD_CPU_AVX512F, V3, "x86-64-v3", out, sizeof out) == 0);
	// a build for the plain level needs nothing
	CHECK(run(0, 0, "x86-64", out, sizeof out) == 0 && out[0] == 0);
}

static void
test_lacks_avx2(void)
{
	char out[1024];
	CHECK(run(V3 & ~AD_CPU_AVX2, V3, "x86-64-v3", out, sizeof out) == -1);
	CHECK(strstr(out, "anedvd-x: this CPU lacks AVX2, which this build of anedvd needs") != NULL, "%s", out);
	CHECK(strstr(out, "compiled for -march=x86-64-v3") != NULL, "%s", out);
	CHECK(strstr(out, "cmake -S . -B build -DANEDVD_X86_LEVEL=x86-64\n") != NULL, "%s", out);
	CHECK(strstr(out, "FMA") == NULL, "names only what is missing: %s", out);
}

static void
test_plain_cpu(void)
{
	// a CPU of the plain x86-64 level (SSE2 only) under a v3 build: every
	// feature of v3 is named, in order
	char out[1024];
	CHECK(run(0, V3, "x86-64-v3", out, sizeof out) == -1);
	CHECK(strstr(out, "lacks SSE3, SSSE3, SSE4.1, SSE4.2, POPCNT, CMPXCHG16B, AVX, AVX2, FMA, F16C, BMI1, BMI2, "
	                  "LZCNT, MOVBE, which") != NULL,
	      "%s", out);
	// a v2 CPU under a v2 build passes, under a v4 build it lacks AVX-512
	CHECK(run(V2, V2, "x86-64-v2", out, sizeof out) == 0);
	unsigned v4 = V3 | AD_CPU_AVX512F | AD_CPU_AVX512DQ | AD_CPU_AVX512CD | AD_CPU_AVX512BW | AD_CPU_AVX512VL;
	CHECK(run(V3, v4, "native", out, sizeof out) == -1);
	CHECK(strstr(out, "lacks AVX512F, AVX512DQ, AVX512CD, AVX512BW, AVX512VL, which") != NULL, "%s", out);
	CHECK(strstr(out, "-march=native") != NULL, "%s", out);
}

static void
test_parse(void)
{
	CHECK(ad_cpu_parse("avx2,FMA") == (AD_CPU_AVX2 | AD_CPU_FMA));
	CHECK(ad_cpu_parse("sse4.1,bogus,,avx512vl") == (AD_CPU_SSE41 | AD_CPU_AVX512VL));
	CHECK(ad_cpu_parse("") == 0 && ad_cpu_parse(NULL) == 0);
	CHECK(ad_cpu_parse("avx") == AD_CPU_AVX, "a prefix of a longer name is not it");
	for (int i = 0; i < AD_CPU_N_FEATURES; i++)
		CHECK(ad_cpu_parse(ad_cpu_feature_name(1u << i)) == 1u << i, "bit %d", i);
	CHECK(ad_cpu_feature_name(1u << AD_CPU_N_FEATURES) == NULL);
}

static void
test_this_build(void)
{
	// what the build was compiled for, from the compiler's own macros
#if defined(__x86_64__)
	if (!strcmp(ad_cpu_built_for, "x86-64-v3"))
		CHECK(ad_cpu_need == V3, "need %#x", ad_cpu_need);
	if (!strcmp(ad_cpu_built_for, "x86-64"))
		CHECK(ad_cpu_need == 0, "need %#x", ad_cpu_need);
	// this CPU runs the build (else this test would not have started)
	CHECK((ad_cpu_have() & ad_cpu_need) == ad_cpu_need);
	CHECK((ad_cpu_have() & V2) == V2, "any CPU of the last decade has x86-64-v2");
#endif
}

int
main(void)
{
	T_RUN(test_has_all);
	T_RUN(test_lacks_avx2);
	T_RUN(test_plain_cpu);
	T_RUN(test_parse);
	T_RUN(test_this_build);
	return t_done();
}
