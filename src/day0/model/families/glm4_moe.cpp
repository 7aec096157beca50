// Glm4MoeForCausalLM (GLM-4.5): GQA with q/k/v bias (attention_bias, never o), optional per-head
// q/k RMSNorm, partial RoPE (0.5), and the DeepSeek-V3 router (sigmoid + correction bias, noaux_tc)
// with shared experts after first_k_dense_replace dense layers.
#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {

Status parse_glm4_moe(const ConfigReader& cfg, ModelSpec& spec) {
  // The reference keeps the router in float32: its logits and the routing weights.
  spec.router_logits_f32 = true;
  spec.routing_weights_f32 = true;
  FamilyDefaults defaults;
  defaults.rms_norm_eps = 1e-5;
  defaults.rope_theta = 10000.0;
  defaults.max_position_embeddings = 131072;
  defaults.head_dim = 128;
  defaults.partial_rotary_factor = 0.5;  // Glm4MoeConfig's default; v5 writes it in rope_parameters
  D0_RETURN_IF_ERROR(parse_core(cfg, defaults, spec));
  D0_ASSIGN_OR_RETURN(spec.qkv_bias, cfg.optional_bool("attention_bias", false));
  D0_ASSIGN_OR_RETURN(spec.qk_norm, cfg.optional_bool("use_qk_norm", false));
  D0_RETURN_IF_ERROR(parse_deepseek_moe(cfg, glm4_moe_defaults(), spec));
  // Glm4Moe always routes with sigmoid + noaux_tc; its config has no such keys.
  spec.moe->scoring = RouterScoring::kSigmoid;
  spec.moe->topk_method = TopkMethod::kNoauxTc;
  spec.moe->correction_bias = true;
  return Status::ok();
}

void write_glm4_moe(const ModelSpec& spec, nlohmann::json& out) {
  out["attention_bias"] = spec.qkv_bias;
  out["use_qk_norm"] = spec.qk_norm;
  out["partial_rotary_factor"] = spec.partial_rotary_factor;
  write_deepseek_moe(spec, out);
  out.erase("scoring_func");
  out.erase("topk_method");
  out.erase("moe_layer_freq");
}

// Weights: GQA (q/k/v bias, q/k norm) with the DeepSeek-V3 FFN blocks and MTP layers.
void weights_glm4_moe(const ModelSpec& s, WeightTableBuilder& b) {
  const weights::LayerFfn ffn = [&](WeightTableBuilder& lb, const LayerSpec& l) {
    deepseek_ffn_weights(s, lb, l);
  };
  weights::decoder(s, b, ffn);
  weights::deepseek_mtp_layers(s, b, ffn);  // num_nextn_predict_layers, laid out as DeepSeek-V3's
}

const FamilyRegistrar kFamily({
    .model_types = {"glm4_moe"},
    .architectures = {"Glm4MoeForCausalLM"},
    .summary = "GQA with partial RoPE and q/k norm, sigmoid noaux_tc MoE with shared experts",
    .parse = parse_glm4_moe,
    .write = write_glm4_moe,
    .weights = weights_glm4_moe,
});

}  // namespace day0::families
