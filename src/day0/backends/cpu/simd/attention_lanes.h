#pragma once
// The per-lane step of SimdKernels::attend_span_lanes that every level runs alike: a lane whose largest
// visible score of the span beats its running maximum rescales what it holds by exp(m - m') (0 while m
// is -inf, nothing held yet), the way the one-query-at-a-time path does.
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

}  // namespace day0::cpu
