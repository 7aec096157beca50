// Feed-forward blocks: dense SwiGLU, and MoE (router -> top-k -> experts, plus a shared expert that
// Qwen2-MoE gates with sigmoid(x . w)).
#include <algorithm>

#include "day0/runtime/blocks.h"

namespace day0::blocks {

void dense_mlp(const Context& c, const DenseMlpWeights& w, ConstMatrix h, Matrix out) {
  const int64_t t = h.rows, width = w.gate.w.rows;
  Buffer gate(c.arena, t, width), up(c.arena, t, width), act(c.arena, t, width);  // [T, intermediate]
  linear(c, h, w.gate, gate.m);
  linear(c, h, w.up, up.m);
  c.be.swiglu({gate.m, up.m, act.m});
  round_activations(c, act.m);
  matmul(c, act.m, w.down, out);  // [T, hidden]: this rank's FFN columns' share under tensor parallelism
  finish_row_parallel(c, out);
}

void moe(const Context& c, const MoeWeights& w, ConstMatrix h, Matrix out) {
  const ModelSpec& s = c.spec;
  const MoeSpec& m = *s.moe;
  // LongCat-Flash scores its zero-computation experts beside the real ones.
  const int64_t t = h.rows, e = m.n_experts + m.n_zero_experts, k = m.experts_per_token;
  Buffer logits(c.arena, t, e);  // [T, E (+ zero experts)]
  matmul(c, h, w.router, logits.m);
  // DeepSeek / GLM / LongCat-Flash compute router logits in float32; the others run the gate in the
  // activation dtype.
  const bool fp32_router = s.family == Family::kDeepseekV2 || s.family == Family::kDeepseekV3 ||
                           s.family == Family::kDeepseekV32 || s.family == Family::kGlm4Moe ||
                           s.family == Family::kLongcatFlash;
  if (!fp32_router) round_activations(c, logits.m);
  // MiniMax-M2 keeps its float32 routing weights: the expert output is scaled in float32, then rounded.
  const bool fp32_weights = fp32_router || s.family == Family::kMinimaxM2;

  // [T, k] expert ids, from the step's arena (4-byte slots)
  auto* ids = reinterpret_cast<int32_t*>(c.arena.take(t * k));
  Buffer weights(c.arena, t, k);  // [T, k]
  MoeRouterArgs r;
  r.logits = logits.m;
  r.correction_bias = w.correction_bias;
  r.scoring = m.scoring;
  r.method = m.topk_method;
  r.top_k = k;
  r.n_group = m.n_group;
  r.topk_group = m.topk_group;
  r.norm_topk_prob = m.norm_topk_prob;
  r.renorm_eps = fp32_router ? 1e-20f : 0.0f;
  r.routed_scaling_factor = static_cast<float>(m.routed_scaling_factor);
  r.expert_ids = MatrixView<int32_t>(ids, t, k);
  r.expert_weights = weights.m;
  c.be.moe_router(r);
  if (!fp32_weights) round_activations(c, weights.m);

  MoeExpertsArgs x;
  x.x = h;
  x.expert_ids = MatrixView<const int32_t>(ids, t, k);
  x.expert_weights = weights.m;
  x.experts = w.experts;
  x.layout = w.layout;
  x.clamped = m.swiglu_limit > 0;
  x.limit = static_cast<float>(m.swiglu_limit > 0 ? m.swiglu_limit : 7.0);
  x.alpha = static_cast<float>(m.swiglu_alpha);
  x.input_scaling = m.topk_method == TopkMethod::kLogitsThenSigmoid;
  x.n_zero_experts = m.n_zero_experts;
  x.out = out;
  x.exact = c.exact();
  c.be.moe_experts(x);
  round_activations(c, out);

  if (!w.shared.present()) return;
  Buffer shared(c.arena, t, s.hidden_size);  // [T, H]
  dense_mlp(c, w.shared, h, shared.m);
  if (w.shared_gate.present()) {
    Buffer g(c.arena, t, 1);  // [T, 1] sigmoid gate per token
    linear(c, h, w.shared_gate, g.m);
    c.be.sigmoid({g.m, g.m});
    round_activations(c, g.m);
    c.be.mul({shared.m, g.m, shared.m});
    round_activations(c, shared.m);
  }
  c.be.add({out, shared.m, out});
  round_activations(c, out);
}

}  // namespace day0::blocks
