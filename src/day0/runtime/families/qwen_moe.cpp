// Qwen2-MoE and Qwen3-MoE: Qwen attention; sparse layers hold a softmax router and experts, Qwen2-MoE
// adds a shared expert gated by sigmoid(x . w); `mlp_only_layers` are dense.
#include "day0/runtime/families/family_binders.h"

namespace day0::families {

Status bind_qwen_moe(WeightBinder& b, const Names& names, ModelWeights& out) {
  const ModelSpec& s = b.spec();
  if (!s.moe) return invalid_argument("qwen MoE spec without MoE settings");
  D0_RETURN_IF_ERROR(bind::embeddings_and_head(b, out, names.prefix, names.head));
  for (int64_t n = 0; n < s.n_layers; ++n) {
    const std::string p = names.layer(n);
    const LayerSpec& ls = s.layers[static_cast<size_t>(n)];
    LayerWeights& l = out.layers[static_cast<size_t>(n)];
    D0_RETURN_IF_ERROR(bind_layer_norms(b, p, l));
    D0_RETURN_IF_ERROR(bind::gqa_attention(b, p + "self_attn.", s.qkv_bias, s.o_bias, s.qk_norm, l.attn));
    if (!ls.moe) {
      const int64_t width = ls.dense_intermediate > 0 ? ls.dense_intermediate : s.intermediate_size;
      D0_RETURN_IF_ERROR(bind::dense_mlp(b, p + "mlp.", width, false, l.mlp));
      continue;
    }
    D0_ASSIGN_OR_RETURN(l.moe.router, b.linear(p + "mlp.gate.weight", s.moe->n_experts, s.hidden_size));
    D0_RETURN_IF_ERROR(
        bind::separate_experts(b, p + "mlp.experts.", "gate_proj", "up_proj", "down_proj", l.moe));
    if (s.moe->shared_intermediate > 0) {
      D0_RETURN_IF_ERROR(
          bind::dense_mlp(b, p + "mlp.shared_expert.", s.moe->shared_intermediate, false, l.moe.shared));
      if (s.moe->shared_expert_gate) {
        D0_ASSIGN_OR_RETURN(l.moe.shared_gate,
                            b.linear(p + "mlp.shared_expert_gate.weight", 1, s.hidden_size));
      }
    }
  }
  return Status::ok();
}

}  // namespace day0::families
