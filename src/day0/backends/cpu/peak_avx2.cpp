// Register-only AVX2 FMA loop measuring the arithmetic peak on AVX2-only machines.
#include <immintrin.h>

#include <cstdint>

namespace day0 {

double fma_loop_avx2(int64_t iterations) {
  __m256 acc[12];
  for (auto& a : acc) a = _mm256_set1_ps(1.0f);
  const __m256 m = _mm256_set1_ps(0.999999f);
  const __m256 c = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iterations; ++i) {
    for (auto& a : acc) a = _mm256_fmadd_ps(a, m, c);
  }
  __m256 s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm256_add_ps(s, acc[j]);
  alignas(32) float out[8];
  _mm256_store_ps(out, s);
  volatile float sink = out[0];
  (void)sink;
  return static_cast<double>(iterations) * 12 * 8 * 2;
}

}  // namespace day0
