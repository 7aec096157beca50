// SolarOpenForCausalLM (Upstage Solar Open 100B): GLM-4.5's MoE on a Llama attention. transformers
// derives it from Glm4Moe and takes away the dense layers (every layer is a MoE: sigmoid + correction
// bias, noaux_tc groups, renormalised, x routed_scaling_factor, one shared expert), the q/k norm and
// the partial RoPE (Llama's half-split rotation of the whole head); q/k/v biases per attention_bias, o
// never. Checked against transformers' models/solar_open (configuration_solar_open.py,
// modular_solar_open.py, modeling_solar_open.py).
#include <fmt/format.h>

#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {

// Keys the release inherits from GLM-4.5's config that SolarOpen's code never reads (it hard-codes one
// value): require_released refuses another value, naming this code.
constexpr const char* kImplementation = "Solar Open";

namespace {

Status parse_solar_open(const ConfigReader& cfg, ModelSpec& spec) {
  // The reference keeps the router in float32: its logits and the routing weights.
  spec.router_logits_f32 = true;
  spec.routing_weights_f32 = true;
  FamilyDefaults defaults;  // SolarOpenConfig
  defaults.rms_norm_eps = 1e-5;
  defaults.rope_theta = 1000000.0;
  defaults.max_position_embeddings = 131072;
  defaults.head_dim = 128;
  // No dense MLP: releases still carry GLM's intermediate_size (10240), which no layer uses.
  defaults.require_intermediate = false;
  defaults.training_only_attention_dropout = true;  // LlamaAttention drops in training only
  D0_RETURN_IF_ERROR(parse_core(cfg, defaults, spec));
  D0_ASSIGN_OR_RETURN(spec.intermediate_size, cfg.optional_int("intermediate_size", 0, 0));
  // The rotary tables shrink with the factor but the rotation spans the whole head: only 1 runs.
  if (spec.partial_rotary_factor != 1.0) {
    return unsupported(
        fmt::format("{}: partial_rotary_factor: {} is not supported (Solar Open rotates the "
                    "whole head; Day0 implements 1)",
                    cfg.source(), spec.partial_rotary_factor));
  }
  D0_ASSIGN_OR_RETURN(spec.qkv_bias, cfg.optional_bool("attention_bias", false));
  spec.o_bias = false;
  D0_RETURN_IF_ERROR(require_released(cfg, "use_qk_norm", false, kImplementation));
  D0_RETURN_IF_ERROR(require_released(cfg, "first_k_dense_replace", 0, kImplementation));
  D0_RETURN_IF_ERROR(require_released(cfg, "scoring_func", "sigmoid", kImplementation));
  D0_RETURN_IF_ERROR(require_released(cfg, "topk_method", "noaux_tc", kImplementation));
  DeepseekMoeDefaults moe = glm4_moe_defaults();
  moe.first_k_dense_replace = 0;  // every layer a MoE
  return parse_deepseek_moe(cfg, moe, spec);
}

void write_solar_open(const ModelSpec& spec, nlohmann::json& out) {
  out["attention_bias"] = spec.qkv_bias;
  write_deepseek_moe(spec, out);
  // SolarOpenConfig has none of these: the class fixes them.
  for (const char* key : {"scoring_func", "topk_method", "moe_layer_freq", "first_k_dense_replace"}) {
    out.erase(key);
  }
}

// Weights: GQA (q/k/v bias per attention_bias) with GLM-4.5's MoE in every layer (mlp.gate, its
// correction bias, mlp.experts.{E}.*, mlp.shared_experts.*), then any MTP layers laid out as GLM's.
void weights_solar_open(const ModelSpec& s, WeightTableBuilder& b) {
  const weights::LayerFfn ffn = [&](WeightTableBuilder& lb, const LayerSpec& l) {
    deepseek_ffn_weights(s, lb, l);
  };
  weights::decoder(s, b, ffn);
  weights::deepseek_mtp_layers(s, b, ffn);
}

const FamilyRegistrar kFamily({
    .model_types = {"solar_open"},
    .architectures = {"SolarOpenForCausalLM"},
    .summary = "GQA, sigmoid noaux_tc MoE with a correction bias and a shared expert in every layer",
    .parse = parse_solar_open,
    .write = write_solar_open,
    .weights = weights_solar_open,
});

}  // namespace
}  // namespace day0::families
