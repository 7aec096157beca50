// gpt-oss: GQA with biases on all four projections and attention sinks; every layer MoE with a biased
// router and fused gate_up experts (gate at even rows) stored MXFP4 (or plain, dequantised), with biases.
#include <fmt/format.h>

#include "day0/runtime/families/family_binders.h"

namespace day0::families {

Status bind_gpt_oss(WeightBinder& b, const Names& names, ModelWeights& out) {
  const ModelSpec& s = b.spec();
  if (!s.moe) return invalid_argument("gpt-oss spec without MoE settings");
  const MoeSpec& m = *s.moe;
  const int64_t h = s.hidden_size, i = m.expert_intermediate, e_n = m.n_experts;
  D0_RETURN_IF_ERROR(bind::embeddings_and_head(b, out, names.prefix, names.head));
  for (int64_t n = 0; n < s.n_layers; ++n) {
    const std::string p = names.layer(n);
    LayerWeights& l = out.layers[static_cast<size_t>(n)];
    D0_RETURN_IF_ERROR(bind_layer_norms(b, p, l));
    D0_RETURN_IF_ERROR(bind::gqa_attention(b, p + "self_attn.", true, true, false, l.attn));
    D0_ASSIGN_OR_RETURN(l.attn.sinks, b.vector(p + "self_attn.sinks", s.n_heads));
    D0_ASSIGN_OR_RETURN(l.moe.router, b.linear(p + "mlp.router.weight", e_n, h, true));
    l.moe.layout = GateUpLayout::kInterleaved;
    l.moe.experts.resize(static_cast<size_t>(e_n));
    const std::string ex = p + "mlp.experts.";
    const bool quantized = b.has(ex + "gate_up_proj_blocks");
    for (int64_t e = 0; e < e_n; ++e) {
      ExpertWeights& w = l.moe.experts[static_cast<size_t>(e)];
      if (quantized) {
        D0_ASSIGN_OR_RETURN(w.gate, b.mxfp4(ex + "gate_up_proj", e, e_n, 2 * i, h));
        D0_ASSIGN_OR_RETURN(w.down, b.mxfp4(ex + "down_proj", e, e_n, h, i));
      } else {
        // Dequantised checkpoints store x @ W: gate_up [E, H, 2I], down [E, I, H].
        D0_ASSIGN_OR_RETURN(w.gate, b.stacked_transposed(ex + "gate_up_proj", e, e_n, 2 * i, h));
        D0_ASSIGN_OR_RETURN(w.down, b.stacked_transposed(ex + "down_proj", e, e_n, h, i));
      }
      D0_ASSIGN_OR_RETURN(w.gate_bias, b.stacked_vector(ex + "gate_up_proj_bias", e, e_n, 2 * i));
      D0_ASSIGN_OR_RETURN(w.down_bias, b.stacked_vector(ex + "down_proj_bias", e, e_n, h));
    }
  }
  return Status::ok();
}

}  // namespace day0::families
