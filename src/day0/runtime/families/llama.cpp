// Llama, Mistral, Qwen2, Qwen3: GQA attention (biases and per-head q/k norms as the spec says) and a
// dense SwiGLU in every layer.
#include "day0/runtime/families/family_binders.h"

namespace day0::families {

Status bind_llama(WeightBinder& b, const Names& names, ModelWeights& out) {
  const ModelSpec& s = b.spec();
  D0_RETURN_IF_ERROR(bind::embeddings_and_head(b, out, names.prefix, names.head));
  for (int64_t n = 0; n < s.n_layers; ++n) {
    const std::string p = names.layer(n);
    LayerWeights& l = out.layers[static_cast<size_t>(n)];
    D0_RETURN_IF_ERROR(bind_layer_norms(b, p, l));
    D0_RETURN_IF_ERROR(bind::gqa_attention(b, p + "self_attn.", s.qkv_bias, s.o_bias, s.qk_norm, l.attn));
    const int64_t width = s.layers[static_cast<size_t>(n)].dense_intermediate > 0
                              ? s.layers[static_cast<size_t>(n)].dense_intermediate
                              : s.intermediate_size;
    D0_RETURN_IF_ERROR(bind::dense_mlp(b, p + "mlp.", width, s.mlp_bias, l.mlp));
  }
  return Status::ok();
}

}  // namespace day0::families
