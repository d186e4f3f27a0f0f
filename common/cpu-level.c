// cpu-level.c - the CPU check before anything else runs (cpu-level.h).
//
// Compiled for the plain x86-64 level whatever the build's level is: this
// file must run on any x86-64 CPU, to say what the CPU lacks rather than
// die of SIGILL. Keep it to plain C and libc calls.
#define _GNU_SOURCE
#include <errno.h> // program_invocation_short_name
#include <stdlib.h>
#include <string.h>
#include <strings.h> // strncasecmp
#include <unistd.h>

#include "cpu-level.h"

static const char *const names[AD_CPU_N_FEATURES] = {
	"SSE3", "SSSE3", "SSE4.1", "SSE4.2", "POPCNT",  "CMPXCHG16B", "AVX",      "AVX2",     "FMA",      "F16C",
	"BMI1", "BMI2",  "LZCNT",  "MOVBE",  "AVX512F", "AVX512DQ",   "AVX512CD", "AVX512BW", "AVX512VL",
};

const char *
ad_cpu_feature_name(unsigned bit)
{
	for (int i = 0; i < AD_CPU_N_FEATURES; i++)
		if (bit == 1u << i)
			return names[i];
	return NULL;
}

#if defined(__x86_64__) || defined(__i386__)
static void
cpuid(unsigned leaf, unsigned sub, unsigned r[4])
{
	__asm__ __volatile__("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3]) : "a"(leaf), "c"(sub));
}

unsigned
ad_cpu_have(void)
{
	unsigned r[4], max, maxext, c1, b7 = 0, cx = 0, xcr0 = 0, f = 0;
	cpuid(0, 0, r);
	max = r[0];
	cpuid(1, 0, r);
	c1 = r[2];
	if (max >= 7) {
		cpuid(7, 0, r);
		b7 = r[1];
	}
	cpuid(0x80000000u, 0, r);
	maxext = r[0];
	if (maxext >= 0x80000001u) {
		cpuid(0x80000001u, 0, r);
		cx = r[2];
	}
	if (c1 & (1u << 27)) { // OSXSAVE: the OS manages the extended state
		unsigned hi;
		__asm__ __volatile__("xgetbv" : "=a"(xcr0), "=d"(hi) : "c"(0));
	}
	int ymm = (xcr0 & 6) == 6, zmm = ymm && (xcr0 & 0xe0) == 0xe0; // the OS saves them
	f |= c1 & (1u << 0) ? AD_CPU_SSE3 : 0;
	f |= c1 & (1u << 9) ? AD_CPU_SSSE3 : 0;
	f |= c1 & (1u << 19) ? AD_CPU_SSE41 : 0;
	f |= c1 & (1u << 20) ? AD_CPU_SSE42 : 0;
	f |= c1 & (1u << 23) ? AD_CPU_POPCNT : 0;
	f |= c1 & (1u << 13) ? AD_CPU_CX16 : 0;
	f |= c1 & (1u << 22) ? AD_CPU_MOVBE : 0;
	f |= b7 & (1u << 3) ? AD_CPU_BMI1 : 0;
	f |= b7 & (1u << 8) ? AD_CPU_BMI2 : 0;
	f |= cx & (1u << 5) ? AD_CPU_LZCNT : 0;
	if (ymm) {
		f |= c1 & (1u << 28) ? AD_CPU_AVX : 0;
		f |= c1 & (1u << 12) ? AD_CPU_FMA : 0;
		f |= c1 & (1u << 29) ? AD_CPU_F16C : 0;
		f |= b7 & (1u << 5) ? AD_CPU_AVX2 : 0;
	}
	if (zmm) {
		f |= b7 & (1u << 16) ? AD_CPU_AVX512F : 0;
		f |= b7 & (1u << 17) ? AD_CPU_AVX512DQ : 0;
		f |= b7 & (1u << 28) ? AD_CPU_AVX512CD : 0;
		f |= b7 & (1u << 30) ? AD_CPU_AVX512BW : 0;
		f |= b7 & (1u << 31) ? AD_CPU_AVX512VL : 0;
	}
	return f;
}
#else
unsigned
ad_cpu_have(void)
{
	return 0;
}
#endif

unsigned
ad_cpu_parse(const char *list)
{
	unsigned f = 0;
	while (list && *list) {
		size_t n = strcspn(list, ",");
		for (int i = 0; i < AD_CPU_N_FEATURES; i++)
			if (strlen(names[i]) == n && strncasecmp(list, names[i], n) == 0)
				f |= 1u << i;
		list += n + (list[n] == ',');
	}
	return f;
}

int
ad_cpu_check(unsigned have, unsigned need, const char *built_for, const char *prog, FILE *out)
{
	unsigned lack = need & ~have;
	if (!lack)
		return 0;
	fprintf(out, "%s: this CPU lacks", prog);
	const char *sep = " ";
	for (int i = 0; i < AD_CPU_N_FEATURES; i++)
		if (lack & (1u << i)) {
			fprintf(out, "%s%s", sep, names[i]);
			sep = ", ";
		}
	fprintf(out,
	        ", which this build of anedvd needs (it was compiled for -march=%s).\n"
	        "%s: build anedvd for this CPU with: cmake -S . -B build -DANEDVD_X86_LEVEL=x86-64\n",
	        built_for && *built_for ? built_for : "?", prog);
	return -1;
}

static const char *
self_name(void)
{
#if defined(__APPLE__)
	return getprogname();
#elif defined(__GLIBC__)
	return program_invocation_short_name;
#else
	return "anedvd";
#endif
}

// priority 101: before main() and every other constructor of the program
__attribute__((constructor(101))) static void
cpu_level_gate(void)
{
	unsigned have = ad_cpu_have() & ~ad_cpu_parse(getenv("ANEDVD_CPU_HIDE"));
	if (ad_cpu_check(have, ad_cpu_need, ad_cpu_built_for, self_name(), stderr))
		_exit(1);
}
