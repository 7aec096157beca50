// MoE experts on the cpu backend: tokens grouped by expert (dispatch), each active expert's SwiGLU MLP
// run as batched matmuls over its tokens, outputs scattered back weighted (combine). Experts nobody
// chose are skipped, so a decode step reads only the top-k experts' weights.
#include <algorithm>
#include <cmath>
#include <vector>

#include "day0/backends/cpu/cpu_ops.h"
#include "day0/backends/reference/reference_kernels.h"
#include "day0/ops/kernel_checks.h"

namespace day0::cpu {

void moe_experts(const Context& c, const MoeExpertsArgs& a) {
  check_args(a);
  const int64_t h = a.x.cols;
  const int64_t k = a.expert_ids.cols;
  if (!a.accumulate) {
    for (int64_t t = 0; t < a.out.rows; ++t) std::fill(a.out.row(t), a.out.row(t) + h, 0.0f);
  }
  std::vector<std::vector<int32_t>> tokens(a.experts.size());
  std::vector<std::vector<float>> weights(a.experts.size());
  for (int64_t t = 0; t < a.x.rows; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const auto e = static_cast<size_t>(a.expert_ids.row(t)[j]);
      tokens[e].push_back(static_cast<int32_t>(t));
      weights[e].push_back(a.expert_weights.row(t)[j]);
    }
  }
  std::vector<float> xe;
  std::vector<float> gate_up;
  std::vector<float> act;
  std::vector<float> down;
  for (size_t e = 0; e < a.experts.size(); ++e) {
    const auto n = static_cast<int64_t>(tokens[e].size());
    if (n == 0) continue;
    const ExpertWeights& ew = a.experts[e];
    const int64_t inter = ew.down.cols;
    xe.resize(static_cast<size_t>(n * h));
    for (int64_t i = 0; i < n; ++i) {
      const float* src = a.x.row(tokens[e][static_cast<size_t>(i)]);
      float* dst = xe.data() + i * h;
      const float s = a.input_scaling ? weights[e][static_cast<size_t>(i)] : 1.0f;
      for (int64_t col = 0; col < h; ++col) dst[col] = src[col] * s;
    }
    const ConstMatrix xm{xe.data(), n, h};
    gate_up.resize(static_cast<size_t>(n * 2 * inter));
    const Matrix gu{gate_up.data(), n, 2 * inter};
    if (a.layout == GateUpLayout::kSeparate) {
      matmul(c, {.x = xm, .w = ew.gate, .bias = ew.gate_bias, .y = gu.col_slice(0, inter), .exact = a.exact});
      matmul(c, {.x = xm, .w = ew.up, .bias = ew.up_bias, .y = gu.col_slice(inter, inter), .exact = a.exact});
    } else {
      matmul(c, {.x = xm, .w = ew.gate, .bias = ew.gate_bias, .y = gu, .exact = a.exact});
    }
    act.resize(static_cast<size_t>(n * inter));
    for (int64_t i = 0; i < n; ++i) {
      const float* row = gate_up.data() + i * 2 * inter;
      float* out = act.data() + i * inter;
      for (int64_t col = 0; col < inter; ++col) {
        const bool il = a.layout == GateUpLayout::kInterleaved;
        const float g = il ? row[2 * col] : row[col];
        const float u = il ? row[2 * col + 1] : row[inter + col];
        out[col] = a.clamped ? static_cast<float>(ref::clamped_swiglu_of(g, u, a.limit, a.alpha))
                             : g / (1.0f + std::exp(-g)) * u;
      }
    }
    down.resize(static_cast<size_t>(n * h));
    matmul(c, {.x = ConstMatrix{act.data(), n, inter},
               .w = ew.down,
               .bias = ew.down_bias,
               .y = Matrix{down.data(), n, h},
               .exact = a.exact});
    for (int64_t i = 0; i < n; ++i) {
      const float w = a.input_scaling ? 1.0f : weights[e][static_cast<size_t>(i)];
      c.k.axpy(w, down.data() + i * h, a.out.row(tokens[e][static_cast<size_t>(i)]), h);
    }
  }
}

}  // namespace day0::cpu
