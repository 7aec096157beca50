// Blocks every family uses: activation rounding, RMSNorm, projections, RoPE frequencies per sequence.
#include <algorithm>

#include "day0/core/numeric.h"
#include "day0/runtime/blocks.h"

namespace day0::blocks {

void round_activations(const Context& c, Matrix m) {
  if (!c.bf16()) return;
  for (int64_t r = 0; r < m.rows; ++r) {
    float* row = m.row(r);
    for (int64_t j = 0; j < m.cols; ++j) row[j] = bf16_to_f32(f32_to_bf16(row[j]));
  }
}

void rms_norm(const Context& c, ConstMatrix x, std::span<const float> weight, float eps, Matrix y) {
  // HF Llama-style norms cast x * rsqrt(...) to the activation dtype before multiplying by the weight;
  // gpt-oss keeps its norms in float32 and casts the weighted result.
  if (!c.bf16() || weight.empty() || c.spec.family == Family::kGptOss) {
    c.be.rms_norm({x, weight, eps, y});
    round_activations(c, y);
    return;
  }
  c.be.rms_norm({x, {}, eps, y});
  round_activations(c, y);
  const ConstMatrix w(weight.data(), 1, static_cast<int64_t>(weight.size()));
  c.be.mul({y, w, y});
  round_activations(c, y);
}

void matmul(const Context& c, ConstMatrix x, const Linear& w, Matrix y) {
  c.be.matmul({.x = x, .w = w.w, .bias = w.bias, .y = y, .exact = c.exact()});
}

void linear(const Context& c, ConstMatrix x, const Linear& w, Matrix y) {
  matmul(c, x, w, y);
  round_activations(c, y);
}

RopeFrequencies rope_for_sequence(const Context& c, int64_t s, int64_t rotary_dim) {
  if (c.spec.rope.type != RopeType::kDynamic) return c.rope;
  const size_t i = static_cast<size_t>(s);
  const int64_t seq_len = c.layout.pos0[i] + c.layout.rows[i];
  auto f =
      rope_frequencies(c.spec.rope_theta, rotary_dim, c.spec.rope, c.spec.max_position_embeddings, seq_len);
  D0_CHECK_MSG(f.is_ok(), f.status().to_string());
  return std::move(f).value();
}

}  // namespace day0::blocks
