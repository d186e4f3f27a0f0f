// cpu-need.c - the x86 features this build's files were compiled for
// (cpu-level.h). Compiled with the build's flags like every other file, so
// the compiler's own feature macros say what -march gave it; data only, so
// no instruction of that level is in here.
#include "cpu-level.h"

#ifndef AD_X86_LEVEL
#define AD_X86_LEVEL ""
#endif

const char ad_cpu_built_for[] = AD_X86_LEVEL;

const unsigned ad_cpu_need = 0
#ifdef __SSE3__
                             | AD_CPU_SSE3
#endif
#ifdef __SSSE3__
                             | AD_CPU_SSSE3
#endif
#ifdef __SSE4_1__
                             | AD_CPU_SSE41
#endif
#ifdef __SSE4_2__
                             | AD_CPU_SSE42
#endif
#ifdef __POPCNT__
                             | AD_CPU_POPCNT
#endif
#ifdef __GCC_HAVE_SYNC_COMPARE_AND_SWAP_16
                             | AD_CPU_CX16
#endif
#ifdef __AVX__
                             | AD_CPU_AVX
#endif
#ifdef __AVX2__
                             | AD_CPU_AVX2
#endif
#ifdef __FMA__
                             | AD_CPU_FMA
#endif
#ifdef __F16C__
                             | AD_CPU_F16C
#endif
#ifdef __BMI__
                             | AD_CPU_BMI1
#endif
#ifdef __BMI2__
                             | AD_CPU_BMI2
#endif
#ifdef __LZCNT__
                             | AD_CPU_LZCNT
#endif
#ifdef __MOVBE__
                             | AD_CPU_MOVBE
#endif
#ifdef __AVX512F__
                             | AD_CPU_AVX512F
#endif
#ifdef __AVX512DQ__
                             | AD_CPU_AVX512DQ
#endif
#ifdef __AVX512CD__
                             | AD_CPU_AVX512CD
#endif
#ifdef __AVX512BW__
                             | AD_CPU_AVX512BW
#endif
#ifdef __AVX512VL__
                             | AD_CPU_AVX512VL
#endif
	;
