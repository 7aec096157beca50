// Glm4MoeLiteForCausalLM (GLM-4.7-Flash): DeepSeek-V3's MLA (q LoRA, rope_interleave) under GLM-4.5's
// sigmoid noaux_tc MoE with shared experts. Checked against transformers' models/glm4_moe_lite
// (configuration_glm4_moe_lite.py, modular_glm4_moe_lite.py). mlp_layer_types places the MoE (class
// default: the first layer dense); transformers hard-codes the router and never reads the release's
// first_k_dense_replace, topk_method or scoring_func, so those are accepted only where they agree.
#include <fmt/format.h>

#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {
namespace {

// Switches Glm4MoeLite never reads (it routes with sigmoid + noaux_tc): only those values are accepted
// (require_released), and refusals name this code.
constexpr const char* kImplementation = "transformers' Glm4MoeLite";

Status parse_glm4_moe_lite(const ConfigReader& cfg, ModelSpec& spec) {
  // Glm4MoeLiteTopkRouter keeps its logits and the routing weights in float32.
  spec.router_logits_f32 = true;
  spec.routing_weights_f32 = true;
  const ConfigReader& core = cfg;
  FamilyDefaults defaults;  // Glm4MoeLiteConfig
  defaults.rms_norm_eps = 1e-5;
  defaults.rope_theta = 10000.0;
  defaults.max_position_embeddings = 202752;
  // head_dim is qk_rope_head_dim's alias (2048 / 20 heads need not divide).
  D0_RETURN_IF_ERROR(parse_core_rope_head_dim(core, defaults, "Glm4MoeLite", spec));
  D0_RETURN_IF_ERROR(parse_mla(core, {.q_lora_rank = 768, .qk_nope_head_dim = 192, .v_head_dim = 256}, spec));
  // head_dim is an attribute_map alias of qk_rope_head_dim: both given, they must agree.
  if (cfg.present("head_dim")) {
    D0_ASSIGN_OR_RETURN(int64_t head_dim, cfg.required_int("head_dim"));
    if (head_dim != spec.mla->qk_rope_head_dim) {
      return cfg.invalid("head_dim",
                         fmt::format("{} disagrees with qk_rope_head_dim ({}); they name the same "
                                     "setting",
                                     head_dim, spec.mla->qk_rope_head_dim));
    }
  }
  D0_ASSIGN_OR_RETURN(bool interleave, cfg.optional_bool("rope_interleave", true));
  spec.rope_layout = interleave ? RopeLayout::kInterleaved : RopeLayout::kHalfSplit;
  DeepseekMoeDefaults moe = glm4_moe_defaults();
  moe.routed_scaling_factor = 1.8;  // Glm4MoeLiteConfig's default
  D0_RETURN_IF_ERROR(parse_deepseek_moe(core, moe, spec));
  D0_RETURN_IF_ERROR(require_released(cfg, "scoring_func", "sigmoid", kImplementation));
  D0_RETURN_IF_ERROR(require_released(cfg, "topk_method", "noaux_tc", kImplementation));
  return apply_mlp_layer_types_or_first_dense(cfg, spec);
}

void write_glm4_moe_lite(const ModelSpec& spec, nlohmann::json& out) {
  write_mla(spec, out);
  write_deepseek_moe(spec, out);
  out["rope_interleave"] = spec.rope_layout == RopeLayout::kInterleaved;
  // transformers ignores these; mlp_layer_types says where the MoE is.
  for (const char* key : {"first_k_dense_replace", "scoring_func", "moe_layer_freq"}) out.erase(key);
  nlohmann::json types = nlohmann::json::array();
  for (const LayerSpec& l : spec.layers) types.push_back(l.moe ? "sparse" : "dense");
  out["mlp_layer_types"] = types;
}

// Weights: DeepSeek-V3's names (MLA, mlp.gate + e_score_correction_bias, experts, shared_experts), then
// num_nextn_predict_layers MTP layers (model.layers.47 in the release), which transformers skips.
void weights_glm4_moe_lite(const ModelSpec& s, WeightTableBuilder& b) {
  const weights::LayerFfn ffn = [&](WeightTableBuilder& lb, const LayerSpec& l) {
    deepseek_ffn_weights(s, lb, l);
  };
  weights::decoder(s, b, ffn);
  weights::deepseek_mtp_layers(s, b, ffn);
}

const FamilyRegistrar kFamily({
    .model_types = {"glm4_moe_lite"},
    .architectures = {"Glm4MoeLiteForCausalLM"},
    .summary = "MLA, sigmoid noaux_tc MoE with shared experts placed by mlp_layer_types",
    .parse = parse_glm4_moe_lite,
    .write = write_glm4_moe_lite,
    .weights = weights_glm4_moe_lite,
});

}  // namespace
}  // namespace day0::families
