// cpu-level.h - the CPU check every program makes before anything else runs.
//
// The build compiles every file for one x86-64 level (ANEDVD_X86_LEVEL,
// x86-64-v3 by default: AVX2, FMA, F16C, BMI1/2, LZCNT, MOVBE), so on a CPU
// without those the first such instruction would stop the program with
// SIGILL and no word. Instead a constructor (cpu-level.c) compares the
// features the build was compiled for (ad_cpu_need, cpu-need.c, written
// from the compiler's own feature macros) with the CPU's (ad_cpu_have), and
// when some are missing prints what the CPU lacks and how to build for it,
// and exits 1.
//
// The contract that makes this safe:
// - cpu-level.c is compiled for the plain x86-64 level (cpu-level.cmake
//   overrides -march for it alone), so the check itself has no AVX or
//   other VEX-encoded instruction (tests/cpu-level.cmake disassembles it);
// - cpu-need.c holds data only, so compiling it for the build's level
//   puts no instruction of that level anywhere;
// - the constructor has priority 101, the first of the program's own: it
//   runs before main() and before every other constructor the program has
//   (the shared libraries' run earlier still; they are not built here);
// - each program links the object library anedvd_cpu_level itself (a
//   constructor in a static library would be dropped by the linker).
//
// Test hook: ANEDVD_CPU_HIDE=avx2,fma,... makes the check treat those
// features as missing, so the tests can see every program refuse to start.
#ifndef AD_CPU_LEVEL_H
#define AD_CPU_LEVEL_H

#include <stdio.h>

// the x86 features a build may be compiled for, one bit each
enum ad_cpu_feature {
	AD_CPU_SSE3 = 1u << 0,
	AD_CPU_SSSE3 = 1u << 1,
	AD_CPU_SSE41 = 1u << 2,
	AD_CPU_SSE42 = 1u << 3,
	AD_CPU_POPCNT = 1u << 4,
	AD_CPU_CX16 = 1u << 5,
	AD_CPU_AVX = 1u << 6, // with the OS saving the ymm registers
	AD_CPU_AVX2 = 1u << 7,
	AD_CPU_FMA = 1u << 8,
	AD_CPU_F16C = 1u << 9,
	AD_CPU_BMI1 = 1u << 10,
	AD_CPU_BMI2 = 1u << 11,
	AD_CPU_LZCNT = 1u << 12,
	AD_CPU_MOVBE = 1u << 13,
	AD_CPU_AVX512F = 1u << 14, // with the OS saving the zmm and opmask registers
	AD_CPU_AVX512DQ = 1u << 15,
	AD_CPU_AVX512CD = 1u << 16,
	AD_CPU_AVX512BW = 1u << 17,
	AD_CPU_AVX512VL = 1u << 18,
};
#define AD_CPU_N_FEATURES 19

// the features the build's files were compiled for, and the -march level
// they were compiled with ("x86-64-v3", "native", ...; "" when none)
extern const unsigned ad_cpu_need;
extern const char ad_cpu_built_for[];

// this CPU's features (CPUID and XGETBV); 0 off x86-64
unsigned ad_cpu_have(void);

// the features named in a comma-separated list ("avx2,fma"; the names of
// ad_cpu_feature_name, any case); unknown names are ignored
unsigned ad_cpu_parse(const char *list);

// the name of one feature bit ("AVX2"), or NULL
const char *ad_cpu_feature_name(unsigned bit);

// the check: 0 when have holds every feature of need; else -1 after
// printing to out, as program prog, the features missing, the level the
// build was made for (built_for) and how to build for this CPU
int ad_cpu_check(unsigned have, unsigned need, const char *built_for, const char *prog, FILE *out);

#endif
