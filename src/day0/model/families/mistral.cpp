// MistralForCausalLM: Llama without biases, with an optional sliding window on every layer
// (MistralConfig defaults sliding_window to 4096 when the key is absent; null disables it).
#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {

Status parse_mistral(const ConfigReader& cfg, ModelSpec& spec) {
  FamilyDefaults defaults;
  defaults.rms_norm_eps = 1e-6;
  defaults.rope_theta = 10000.0;
  defaults.max_position_embeddings = 4096 * 32;
  D0_RETURN_IF_ERROR(parse_core(cfg, defaults, spec));
  int64_t window = 4096;
  if (cfg.contains("sliding_window")) {
    D0_ASSIGN_OR_RETURN(window, cfg.optional_int("sliding_window", 0, 0));  // null or 0: no window
  }
  set_all_sliding(spec, window);
  return Status::ok();
}

void write_mistral(const ModelSpec& spec, nlohmann::json& out) {
  out["sliding_window"] =
      spec.sliding_window > 0 ? nlohmann::json(spec.sliding_window) : nlohmann::json(nullptr);
}

// Weights: a dense SwiGLU `mlp.` in every layer.
void weights_mistral(const ModelSpec& s, WeightTableBuilder& b) {
  dense_decoder_weights(s, b);
}

const FamilyRegistrar kFamily({
    .model_types = {"mistral"},
    .architectures = {"MistralForCausalLM"},
    .summary = "GQA without biases, optional sliding window, SwiGLU MLP",
    .parse = parse_mistral,
    .write = write_mistral,
    .weights = weights_mistral,
});

}  // namespace day0::families
