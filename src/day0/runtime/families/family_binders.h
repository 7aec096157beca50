#pragma once
// One weight binder per family (one file each): Hugging Face tensor names -> ModelWeights.
#include "day0/runtime/model_weights.h"

namespace day0::families {

// `prefix` is "model." (or "language_model.model." inside a multimodal wrapper); `head` the lm_head name.
struct Names {
  std::string prefix = "model.";
  std::string head = "lm_head.weight";
  std::string layer(int64_t n) const { return prefix + "layers." + std::to_string(n) + "."; }
};

Status bind_llama(WeightBinder& b, const Names& names, ModelWeights& out);  // llama, mistral, qwen2, qwen3
Status bind_mixtral(WeightBinder& b, const Names& names, ModelWeights& out);
Status bind_qwen_moe(WeightBinder& b, const Names& names, ModelWeights& out);  // qwen2_moe, qwen3_moe
Status bind_deepseek(WeightBinder& b, const Names& names, ModelWeights& out);  // v2, v3 / kimi
Status bind_glm4_moe(WeightBinder& b, const Names& names, ModelWeights& out);
Status bind_gpt_oss(WeightBinder& b, const Names& names, ModelWeights& out);
Status bind_llama4_text(WeightBinder& b, const Names& names, ModelWeights& out);

// Norms of a pre-norm decoder layer: input_layernorm and post_attention_layernorm.
Status bind_layer_norms(WeightBinder& b, const std::string& layer_prefix, LayerWeights& out);

}  // namespace day0::families
