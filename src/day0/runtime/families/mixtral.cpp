// Mixtral: Llama attention; every layer a sparse MoE `block_sparse_moe` with experts w1 (gate),
// w3 (up), w2 (down) and a softmax router.
#include "day0/runtime/families/family_binders.h"

namespace day0::families {

Status bind_mixtral(WeightBinder& b, const Names& names, ModelWeights& out) {
  const ModelSpec& s = b.spec();
  if (!s.moe) return invalid_argument("mixtral spec without MoE settings");
  D0_RETURN_IF_ERROR(bind::embeddings_and_head(b, out, names.prefix, names.head));
  for (int64_t n = 0; n < s.n_layers; ++n) {
    const std::string p = names.layer(n);
    LayerWeights& l = out.layers[static_cast<size_t>(n)];
    D0_RETURN_IF_ERROR(bind_layer_norms(b, p, l));
    D0_RETURN_IF_ERROR(bind::gqa_attention(b, p + "self_attn.", s.qkv_bias, s.o_bias, false, l.attn));
    const std::string moe = p + "block_sparse_moe.";
    D0_ASSIGN_OR_RETURN(l.moe.router, b.linear(moe + "gate.weight", s.moe->n_experts, s.hidden_size));
    D0_RETURN_IF_ERROR(bind::separate_experts(b, moe + "experts.", "w1", "w3", "w2", l.moe));
  }
  return Status::ok();
}

}  // namespace day0::families
