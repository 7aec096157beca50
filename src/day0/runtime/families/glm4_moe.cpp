// GLM-4.5: GQA with q/k/v bias (attention_bias), optional per-head q/k norm, partial RoPE (the forward
// pass reads partial_rotary_factor); DeepSeek-V3-style MoE after first_k_dense_replace.
#include "day0/runtime/families/family_binders.h"

namespace day0::families {

Status bind_deepseek_moe(WeightBinder& b, const std::string& p, MoeWeights& out);

Status bind_glm4_moe(WeightBinder& b, const Names& names, ModelWeights& out) {
  const ModelSpec& s = b.spec();
  if (!s.moe) return invalid_argument("GLM-4.5 spec without MoE settings");
  D0_RETURN_IF_ERROR(bind::embeddings_and_head(b, out, names.prefix, names.head));
  for (int64_t n = 0; n < s.n_layers; ++n) {
    const std::string p = names.layer(n);
    const LayerSpec& ls = s.layers[static_cast<size_t>(n)];
    LayerWeights& l = out.layers[static_cast<size_t>(n)];
    D0_RETURN_IF_ERROR(bind_layer_norms(b, p, l));
    D0_RETURN_IF_ERROR(bind::gqa_attention(b, p + "self_attn.", s.qkv_bias, false, s.qk_norm, l.attn));
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
