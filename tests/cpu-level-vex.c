// cpu-level-vex.c - instructions the CPU check must not contain, for
// test-cpu-level.sh to show that its scan finds them: VEX (AVX2, FMA and
// BMI2, the last with no 'v' in its name) and EVEX (AVX-512).
#include <immintrin.h>
#include <stdint.h>

__attribute__((target("avx2,fma"))) void
vex_fma(float *y, const float *a, const float *b)
{
	_mm256_storeu_ps(y, _mm256_fmadd_ps(_mm256_loadu_ps(a), _mm256_loadu_ps(b), _mm256_loadu_ps(y)));
}

__attribute__((target("bmi2"))) uint64_t
vex_pdep(uint64_t x, uint64_t m)
{
	return _pdep_u64(x, m);
}

__attribute__((target("avx512f"))) void
evex_add(float *y, const float *a)
{
	_mm512_storeu_ps(y, _mm512_add_ps(_mm512_loadu_ps(a), _mm512_loadu_ps(y)));
}
