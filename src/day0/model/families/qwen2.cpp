// Qwen2ForCausalLM: Llama with q/k/v biases (never o), optional sliding window on the upper layers.
#include <fmt/format.h>

#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {

Status parse_qwen_sliding(const ConfigReader& cfg, ModelSpec& spec) {
  D0_ASSIGN_OR_RETURN(bool use_sliding, cfg.optional_bool("use_sliding_window", false));
  // transformers 5 writes sliding_window 0 (4.x: null) when use_sliding_window is false.
  D0_ASSIGN_OR_RETURN(int64_t window, cfg.optional_int("sliding_window", 4096, 0));
  if (use_sliding && window == 0) {
    return cfg.mismatch("sliding_window", "a positive window when use_sliding_window is true");
  }
  D0_ASSIGN_OR_RETURN(int64_t max_window_layers, cfg.optional_int("max_window_layers", 28, 0));
  spec.sliding_window = use_sliding ? window : 0;
  if (cfg.present("layer_types")) {
    spec.sliding_window = window;  // layer_types decides which layers use it
    D0_ASSIGN_OR_RETURN(bool applied, apply_layer_types(cfg, spec));
    (void)applied;
    if (count_masked_layers(spec, AttentionMask::kSliding) == 0) spec.sliding_window = 0;
    return Status::ok();
  }
  if (!use_sliding) return Status::ok();
  for (int64_t n = max_window_layers; n < spec.n_layers; ++n) {
    spec.layers[static_cast<size_t>(n)].mask = AttentionMask::kSliding;
    spec.layers[static_cast<size_t>(n)].window = window;
  }
  if (count_masked_layers(spec, AttentionMask::kSliding) == 0) spec.sliding_window = 0;
  return Status::ok();
}

void write_qwen_sliding(const ModelSpec& spec, nlohmann::json& out) {
  const bool sliding = count_masked_layers(spec, AttentionMask::kSliding) > 0;
  out["use_sliding_window"] = sliding;
  out["sliding_window"] = sliding ? nlohmann::json(spec.sliding_window) : nlohmann::json(nullptr);
  if (sliding) write_layer_types(spec, out);
  out["max_window_layers"] = spec.n_layers;
  for (int64_t n = 0; n < spec.n_layers; ++n) {
    if (spec.layers[static_cast<size_t>(n)].mask == AttentionMask::kSliding) {
      out["max_window_layers"] = n;
      break;
    }
  }
}

Status parse_qwen2(const ConfigReader& cfg, ModelSpec& spec) {
  FamilyDefaults defaults;
  defaults.rms_norm_eps = 1e-6;
  defaults.rope_theta = 10000.0;
  defaults.max_position_embeddings = 32768;
  D0_RETURN_IF_ERROR(parse_core(cfg, defaults, spec));
  D0_ASSIGN_OR_RETURN(spec.qkv_bias, cfg.optional_bool("qkv_bias", true));
  return parse_qwen_sliding(cfg, spec);
}

void write_qwen2(const ModelSpec& spec, nlohmann::json& out) {
  write_qwen_sliding(spec, out);
}

// Weights: a dense SwiGLU `mlp.` in every layer.
void weights_qwen2(const ModelSpec& s, WeightTableBuilder& b) {
  dense_decoder_weights(s, b);
}

const FamilyRegistrar kFamily({
    .model_types = {"qwen2"},
    .architectures = {"Qwen2ForCausalLM"},
    .summary = "GQA with q/k/v biases, sliding window on upper layers, SwiGLU MLP",
    .parse = parse_qwen2,
    .write = write_qwen2,
    .weights = weights_qwen2,
});

}  // namespace day0::families
