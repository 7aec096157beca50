// Llama 4 text model: GQA (NoPE / chunked layers are the forward pass's business); `feed_forward` is a
// dense SwiGLU or an MoE with a top-k sigmoid router, fused experts stored x @ W (gate_up [E, H, 2I]
// with gate the first half, down [E, I, H]) and a shared expert.
#include "day0/runtime/families/family_binders.h"

namespace day0::families {

Status bind_llama4_text(WeightBinder& b, const Names& names, ModelWeights& out) {
  const ModelSpec& s = b.spec();
  D0_RETURN_IF_ERROR(bind::embeddings_and_head(b, out, names.prefix, names.head));
  for (int64_t n = 0; n < s.n_layers; ++n) {
    const std::string p = names.layer(n);
    const LayerSpec& ls = s.layers[static_cast<size_t>(n)];
    LayerWeights& l = out.layers[static_cast<size_t>(n)];
    D0_RETURN_IF_ERROR(bind_layer_norms(b, p, l));
    D0_RETURN_IF_ERROR(bind::gqa_attention(b, p + "self_attn.", s.qkv_bias, s.o_bias, false, l.attn));
    const std::string ff = p + "feed_forward.";
    if (!ls.moe) {
      const int64_t width = ls.dense_intermediate > 0 ? ls.dense_intermediate : s.intermediate_size;
      D0_RETURN_IF_ERROR(bind::dense_mlp(b, ff, width, false, l.mlp));
      continue;
    }
    if (!s.moe) return invalid_argument("Llama 4 MoE layer without MoE settings");
    const MoeSpec& m = *s.moe;
    D0_ASSIGN_OR_RETURN(l.moe.router, b.linear(ff + "router.weight", m.n_experts, s.hidden_size));
    l.moe.layout = GateUpLayout::kConcatenated;
    l.moe.experts.resize(static_cast<size_t>(m.n_experts));
    for (int64_t e = 0; e < m.n_experts; ++e) {
      ExpertWeights& w = l.moe.experts[static_cast<size_t>(e)];
      D0_ASSIGN_OR_RETURN(w.gate, b.stacked_transposed(ff + "experts.gate_up_proj", e, m.n_experts,
                                                       2 * m.expert_intermediate, s.hidden_size));
      D0_ASSIGN_OR_RETURN(w.down, b.stacked_transposed(ff + "experts.down_proj", e, m.n_experts,
                                                       s.hidden_size, m.expert_intermediate));
    }
    const int64_t shared = m.shared_intermediate > 0 ? m.shared_intermediate : m.expert_intermediate;
    D0_RETURN_IF_ERROR(bind::dense_mlp(b, ff + "shared_expert.", shared, false, l.moe.shared));
  }
  return Status::ok();
}

}  // namespace day0::families
