// DeepSeek-V2 / V3 / Kimi K2: multi-head latent attention; dense MLP before first_k_dense_replace,
// then routed experts (+ e_score_correction_bias for noaux_tc) and shared experts.
#include "day0/runtime/families/family_binders.h"

namespace day0::families {

// DeepSeek-style MoE block under `<layer>mlp.`: shared by DeepSeek and GLM-4.5.
Status bind_deepseek_moe(WeightBinder& b, const std::string& p, MoeWeights& out) {
  const ModelSpec& s = b.spec();
  const MoeSpec& m = *s.moe;
  D0_ASSIGN_OR_RETURN(out.router, b.linear(p + "mlp.gate.weight", m.n_experts, s.hidden_size));
  if (m.correction_bias) {
    D0_ASSIGN_OR_RETURN(out.correction_bias, b.vector(p + "mlp.gate.e_score_correction_bias", m.n_experts));
  }
  D0_RETURN_IF_ERROR(bind::separate_experts(b, p + "mlp.experts.", "gate_proj", "up_proj", "down_proj", out));
  const int64_t shared =
      m.shared_intermediate > 0 ? m.shared_intermediate : m.n_shared_experts * m.expert_intermediate;
  if (shared > 0)
    D0_RETURN_IF_ERROR(bind::dense_mlp(b, p + "mlp.shared_experts.", shared, false, out.shared));
  return Status::ok();
}

Status bind_deepseek(WeightBinder& b, const Names& names, ModelWeights& out) {
  const ModelSpec& s = b.spec();
  if (!s.mla || !s.moe) return invalid_argument("DeepSeek spec without MLA or MoE settings");
  D0_RETURN_IF_ERROR(bind::embeddings_and_head(b, out, names.prefix, names.head));
  for (int64_t n = 0; n < s.n_layers; ++n) {
    const std::string p = names.layer(n);
    const LayerSpec& ls = s.layers[static_cast<size_t>(n)];
    LayerWeights& l = out.layers[static_cast<size_t>(n)];
    D0_RETURN_IF_ERROR(bind_layer_norms(b, p, l));
    D0_RETURN_IF_ERROR(bind::mla_attention(b, p + "self_attn.", l.attn));
    if (ls.moe) {
      D0_RETURN_IF_ERROR(bind_deepseek_moe(b, p, l.moe));
    } else {
      const int64_t width = ls.dense_intermediate > 0 ? ls.dense_intermediate : s.intermediate_size;
      D0_RETURN_IF_ERROR(bind::dense_mlp(b, p + "mlp.", width, false, l.mlp));
    }
  }
  return Status::ok();
}

}  // namespace day0::families
