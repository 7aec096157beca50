// Register-only AVX-512 loops measuring the arithmetic peak (machine_limits.cpp). 12 independent
// accumulators hide the FMA latency.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

namespace day0 {

double fma_loop_avx512(int64_t iterations) {
  __m512 acc[12];
  for (auto& a : acc) a = _mm512_set1_ps(1.0f);
  const __m512 m = _mm512_set1_ps(0.999999f);
  const __m512 c = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iterations; ++i) {
    for (auto& a : acc) a = _mm512_fmadd_ps(a, m, c);
  }
  __m512 s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm512_add_ps(s, acc[j]);
  volatile float sink = _mm512_reduce_add_ps(s);
  (void)sink;
  return static_cast<double>(iterations) * 12 * 16 * 2;
}

double bf16_loop_avx512(int64_t iterations) {
  __m512 acc[12];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80);  // 1.0 in BF16
  const __m512bh y = (__m512bh)_mm512_set1_epi16(0x3380);  // ~6e-8
  for (int64_t i = 0; i < iterations; ++i) {
    for (auto& a : acc) a = _mm512_dpbf16_ps(a, x, y);
  }
  __m512 s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm512_add_ps(s, acc[j]);
  volatile float sink = _mm512_reduce_add_ps(s);
  (void)sink;
  return static_cast<double>(iterations) * 12 * 32 * 2;  // 32 products, each a multiply and an add
}

double int8_vnni_loop_avx512(int64_t iterations) {
  __m512i acc[12];
  for (auto& a : acc) a = _mm512_setzero_si512();
  const __m512i x = _mm512_set1_epi8(1);   // unsigned activations
  const __m512i y = _mm512_set1_epi8(-1);  // signed codes: the sums stay small
  for (int64_t i = 0; i < iterations; ++i) {
    for (auto& a : acc) a = _mm512_dpbusd_epi32(a, x, y);
  }
  __m512i s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm512_add_epi32(s, acc[j]);
  volatile int sink = _mm512_reduce_add_epi32(s);
  (void)sink;
  return static_cast<double>(iterations) * 12 * 64 * 2;  // 64 byte products, each a multiply and an add
}

}  // namespace day0
