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
  // Dispatch by counting sort into the workspace (reused between calls: no allocation once warm):
  // the (token, weight) pairs of local expert e are order[start[e] .. start[e + 1]).
  Workspace local;
  Workspace& ws = c.ws ? *c.ws : local;
  const size_t n_experts = a.experts.size();  // the experts held here: ids first_expert ...
  const int64_t routed = a.routed_experts();
  // The local expert a pick goes to, or -1: a zero-computation expert (an id past the real ones: its
  // weighted input is added here, not dispatched) or one another rank holds (expert parallelism).
  auto local_expert = [&](int32_t id) -> int64_t {
    const int64_t e = id - a.first_expert;
    return id < routed && e >= 0 && e < static_cast<int64_t>(n_experts) ? e : -1;
  };
  ws.moe_start.assign(n_experts + 1, 0);
  for (int64_t t = 0; t < a.x.rows; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t id = a.expert_ids.row(t)[j];
      if (id >= routed) c.k.axpy(a.expert_weights.row(t)[j], a.x.row(t), a.out.row(t), h);
      const int64_t e = local_expert(id);
      if (e >= 0) ++ws.moe_start[static_cast<size_t>(e) + 1];
    }
  }
  for (size_t e = 0; e < n_experts; ++e) ws.moe_start[e + 1] += ws.moe_start[e];
  ws.moe_fill.assign(ws.moe_start.begin(), ws.moe_start.end() - 1);
  ws.moe_tokens.resize(static_cast<size_t>(a.x.rows * k));
  ws.moe_weights.resize(static_cast<size_t>(a.x.rows * k));
  for (int64_t t = 0; t < a.x.rows; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = local_expert(a.expert_ids.row(t)[j]);
      if (e < 0) continue;
      const int64_t slot = ws.moe_fill[static_cast<size_t>(e)]++;
      ws.moe_tokens[static_cast<size_t>(slot)] = static_cast<int32_t>(t);
      ws.moe_weights[static_cast<size_t>(slot)] = a.expert_weights.row(t)[j];
    }
  }
  auto grow = [](std::vector<float>& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  };
  std::vector<float>& xe = ws.moe_x;
  std::vector<float>& gate_up = ws.moe_gate_up;
  std::vector<float>& act = ws.moe_act;
  std::vector<float>& down = ws.moe_down;
  for (size_t e = 0; e < n_experts; ++e) {
    const int64_t first = ws.moe_start[e];
    const int64_t n = ws.moe_start[e + 1] - first;
    if (n == 0) continue;
    const int32_t* tokens_e = ws.moe_tokens.data() + first;
    const float* weights_e = ws.moe_weights.data() + first;
    const ExpertWeights& ew = a.experts[e];
    const int64_t inter = ew.down.cols;
    grow(xe, n * h);
    for (int64_t i = 0; i < n; ++i) {
      const float* src = a.x.row(tokens_e[i]);
      float* dst = xe.data() + i * h;
      const float s = a.input_scaling ? weights_e[i] : 1.0f;
      for (int64_t col = 0; col < h; ++col) dst[col] = src[col] * s;
    }
    const ConstMatrix xm{xe.data(), n, h};
    grow(gate_up, n * 2 * inter);
    const Matrix gu{gate_up.data(), n, 2 * inter};
    if (a.layout == GateUpLayout::kSeparate) {
      matmul(c, {.x = xm, .w = ew.gate, .bias = ew.gate_bias, .y = gu.col_slice(0, inter), .exact = a.exact});
      matmul(c, {.x = xm, .w = ew.up, .bias = ew.up_bias, .y = gu.col_slice(inter, inter), .exact = a.exact});
    } else {
      matmul(c, {.x = xm, .w = ew.gate, .bias = ew.gate_bias, .y = gu, .exact = a.exact});
    }
    grow(act, n * inter);
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
    grow(down, n * h);
    matmul(c, {.x = ConstMatrix{act.data(), n, inter},
               .w = ew.down,
               .bias = ew.down_bias,
               .y = Matrix{down.data(), n, h},
               .exact = a.exact});
    for (int64_t i = 0; i < n; ++i) {
      const float w = a.input_scaling ? 1.0f : weights_e[i];
      c.k.axpy(w, down.data() + i * h, a.out.row(tokens_e[i]), h);
    }
  }
}

}  // namespace day0::cpu
