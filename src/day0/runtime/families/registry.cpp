// Family -> weight binder, and the entry point bind_model_weights().
#include <fmt/format.h>

#include "day0/runtime/families/family_binders.h"

namespace day0 {
namespace families {

Status bind_layer_norms(WeightBinder& b, const std::string& layer_prefix, LayerWeights& out) {
  const int64_t h = b.spec().hidden_size;
  D0_ASSIGN_OR_RETURN(out.input_norm, b.vector(layer_prefix + "input_layernorm.weight", h));
  D0_ASSIGN_OR_RETURN(out.post_norm, b.vector(layer_prefix + "post_attention_layernorm.weight", h));
  return Status::ok();
}

}  // namespace families

Result<std::shared_ptr<ModelWeights>> bind_model_weights(const ModelSpec& spec,
                                                         std::shared_ptr<const TensorSource> source) {
  if (static_cast<int64_t>(spec.layers.size()) != spec.n_layers) {
    return invalid_argument(
        fmt::format("model spec lists {} layers, expected {}", spec.layers.size(), spec.n_layers));
  }
  auto out = std::make_shared<ModelWeights>();
  out->source = std::move(source);
  out->layers.resize(static_cast<size_t>(spec.n_layers));
  WeightBinder b(spec, *out);
  families::Names names;
  // Llama 4 (and other multimodal releases) keep the text model under language_model.
  if (!b.has("model.embed_tokens.weight") && b.has("language_model.model.embed_tokens.weight")) {
    names.prefix = "language_model.model.";
    names.head = "language_model.lm_head.weight";
  }
  Status st;
  switch (spec.family) {
    case Family::kLlama:
    case Family::kMistral:
    case Family::kQwen2:
    case Family::kQwen3:
      st = families::bind_llama(b, names, *out);
      break;
    case Family::kMixtral:
      st = families::bind_mixtral(b, names, *out);
      break;
    case Family::kQwen2Moe:
    case Family::kQwen3Moe:
      st = families::bind_qwen_moe(b, names, *out);
      break;
    case Family::kDeepseekV2:
    case Family::kDeepseekV3:
      st = families::bind_deepseek(b, names, *out);
      break;
    case Family::kGlm4Moe:
      st = families::bind_glm4_moe(b, names, *out);
      break;
    case Family::kGptOss:
      st = families::bind_gpt_oss(b, names, *out);
      break;
    case Family::kLlama4Text:
      st = families::bind_llama4_text(b, names, *out);
      break;
  }
  if (!st.is_ok()) return st.with_context(fmt::format("binding {} weights", family_name(spec.family)));
  return out;
}

}  // namespace day0
