#pragma once
// The per-lane step of SimdKernels::attend_span_lanes that every level runs alike: a lane whose largest
// visible score of the span beats its running maximum rescales what it holds by exp(m - m') (0 while m
// is -inf, nothing held yet), the way the one-query-at-a-time path does.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

namespace day0::cpu {

// shift[i]: lane i's largest visible score of the span (-inf: none) in, the maximum to subtract out.
// states[i * stride]: acc [dv], m, sum. scale(alpha, y, n): the level's y *= alpha.
template <typename ScaleFn>
inline void rescale_lanes(float* shift, int64_t nq, int64_t dv, float* states, int64_t stride,
                          ScaleFn scale) {
  for (int64_t i = 0; i < nq; ++i) {
    float* x = states + i * stride;
    float& m = x[dv];
    const float best = shift[i];
    if (best > m) {
      const float factor = std::isinf(m) ? 0.0f : std::exp(m - best);
      x[dv + 1] *= factor;
      scale(factor, x, dv);
      m = best;
    }
    shift[i] = m;
  }
}

namespace {  // NOLINT(cert-dcl59-cpp, google-build-namespaces): internal linkage, see weight_rows.h

// KB keys x 8 query lanes in one ymm register each, for the AVX2 and AVX-512 key-query tiles: the last
// 8 lanes where ldq is an odd multiple of 8 (a decode step of a group of up to 8 heads). k: [KB][ldk]
// rows, qt: [d][ldq] (lane-major), st: [KB][ldq].
template <int KB>
[[maybe_unused]] void key_query_tile8(const float* k, int64_t ldk, const float* qt, int64_t ldq, int64_t d,
                                      float* st) {
  __m256 acc[KB];
#pragma GCC unroll 8
  for (int j = 0; j < KB; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t c = 0; c < d; ++c) {
    const __m256 q = _mm256_loadu_ps(qt + c * ldq);
#pragma GCC unroll 8
    for (int j = 0; j < KB; ++j) acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(k[j * ldk + c]), q, acc[j]);
  }
#pragma GCC unroll 8
  for (int j = 0; j < KB; ++j) _mm256_storeu_ps(st + j * ldq, acc[j]);
}

}  // namespace
}  // namespace day0::cpu
