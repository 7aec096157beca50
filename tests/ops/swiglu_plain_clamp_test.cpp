// DeepSeek-V4's clamped SwiGLU, silu(min(gate, limit)) * clamp(up, -limit, limit): swiglu_clamped with
// alpha 1 and no up shift, alone, in a dense MLP and in moe_experts, against what transformers'
// DeepseekV4Experts._apply_gate / DeepseekV4MLP / DeepseekV4Experts returned
// (tests/data/ops/swiglu_plain_clamp.json, from tools/reference/make_op_fixtures.py), on every backend.
#include <vector>

#include <gtest/gtest.h>

#include "op_fixtures.h"

namespace day0::test {
namespace {

WeightView f32_weight(const float* data, int64_t rows, int64_t cols) {
  return {.format = WeightFormat::kF32, .rows = rows, .cols = cols, .data = data};
}

TEST(SwigluPlainClamp, MatchesTransformersActivationMlpAndExperts) {
  const nlohmann::json f = op_fixture("swiglu_plain_clamp");
  const int64_t t = f.at("tokens"), h = f.at("hidden"), inter = f.at("inter"), n_experts = f.at("experts");
  const int64_t k = f.at("top_k");
  const float limit = f.at("limit");
  const auto gate_up = fixture_floats(f, "gate_up"), x = fixture_floats(f, "x");
  const auto mlp_gate = fixture_floats(f, "mlp_gate"), mlp_up = fixture_floats(f, "mlp_up");
  const auto mlp_down = fixture_floats(f, "mlp_down");
  const auto gate_up_proj = fixture_floats(f, "gate_up_proj"), down_proj = fixture_floats(f, "down_proj");
  const auto expert_ids = fixture_ints(f, "expert_ids");
  const auto expert_weights = fixture_floats(f, "expert_weights");
  std::vector<ExpertWeights> experts(static_cast<size_t>(n_experts));
  for (int64_t e = 0; e < n_experts; ++e) {
    experts[static_cast<size_t>(e)].gate = f32_weight(gate_up_proj.data() + e * 2 * inter * h, 2 * inter, h);
    experts[static_cast<size_t>(e)].down = f32_weight(down_proj.data() + e * h * inter, h, inter);
  }
  for (auto& nb : every_backend()) {
    SCOPED_TRACE(nb.label);
    Backend& be = *nb.backend;
    // The activation alone, on the gate and up halves of a fused row.
    std::vector<float> act(static_cast<size_t>(t * inter));
    const ConstMatrix fused(gate_up.data(), t, 2 * inter);
    be.swiglu_clamped({.gate = fused.col_slice(0, inter),
                       .up = fused.col_slice(inter, inter),
                       .out = Matrix(act.data(), t, inter),
                       .limit = limit,
                       .alpha = 1.0f,
                       .up_shift = 0.0f});
    be.synchronize();
    EXPECT_LT(error_of_range(act, fixture_floats(f, "act")), 1e-6);
    // The dense MLP: gate and up projections, the activation, the down projection.
    std::vector<float> g(static_cast<size_t>(t * inter)), u(g.size()), mlp_out(static_cast<size_t>(t * h));
    be.matmul({.x = ConstMatrix(x.data(), t, h),
               .w = f32_weight(mlp_gate.data(), inter, h),
               .y = Matrix(g.data(), t, inter)});
    be.matmul({.x = ConstMatrix(x.data(), t, h),
               .w = f32_weight(mlp_up.data(), inter, h),
               .y = Matrix(u.data(), t, inter)});
    be.swiglu_clamped({.gate = ConstMatrix(g.data(), t, inter),
                       .up = ConstMatrix(u.data(), t, inter),
                       .out = Matrix(g.data(), t, inter),
                       .limit = limit,
                       .alpha = 1.0f,
                       .up_shift = 0.0f});
    be.matmul({.x = ConstMatrix(g.data(), t, inter),
               .w = f32_weight(mlp_down.data(), h, inter),
               .y = Matrix(mlp_out.data(), t, h)});
    be.synchronize();
    EXPECT_LT(error_of_range(mlp_out, fixture_floats(f, "mlp_out")), 1e-5);
    // The routed experts: fused gate_up rows (gate half first), weighted and summed per token.
    std::vector<float> experts_out(static_cast<size_t>(t * h));
    be.moe_experts({.x = ConstMatrix(x.data(), t, h),
                    .expert_ids = {expert_ids.data(), t, k},
                    .expert_weights = ConstMatrix(expert_weights.data(), t, k),
                    .experts = experts,
                    .layout = GateUpLayout::kConcatenated,
                    .clamped = true,
                    .limit = limit,
                    .alpha = 1.0f,
                    .up_shift = 0.0f,
                    .out = Matrix(experts_out.data(), t, h)});
    be.synchronize();
    EXPECT_LT(error_of_range(experts_out, fixture_floats(f, "experts_out")), 1e-5);
  }
}

}  // namespace
}  // namespace day0::test
