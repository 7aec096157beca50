// GptOssForCausalLM: GQA with biases and learned attention sinks, alternating sliding (128) / full
// layers, YaRN RoPE, and every FFN a top-k-on-logits MoE with biased, clamped SwiGLU experts
// (MXFP4 in the release).
#include "day0/model/config_common.h"
#include "day0/model/families/families.h"

namespace day0::families {

Status parse_gpt_oss(const ConfigReader& cfg, ModelSpec& spec) {
  FamilyDefaults defaults;
  defaults.rms_norm_eps = 1e-5;
  defaults.rope_theta = 150000.0;
  defaults.max_position_embeddings = 131072;
  defaults.head_dim = 64;
  D0_RETURN_IF_ERROR(parse_core(cfg, defaults, spec));
  if (!cfg.contains("rope_scaling") && !cfg.contains("rope_parameters")) {
    // GptOssConfig's default RoPE: YaRN x32 over a 4096-token original context, no truncation.
    spec.rope.type = RopeType::kYarn;
    spec.rope.factor = 32.0;
    spec.rope.original_max_position = 4096;
    spec.rope.truncate = false;
  }
  D0_ASSIGN_OR_RETURN(bool bias, cfg.optional_bool("attention_bias", true));
  spec.qkv_bias = bias;
  spec.o_bias = bias;
  spec.attention_sinks = true;
  MoeSpec moe;
  D0_ASSIGN_OR_RETURN(moe.n_experts, cfg.required_int("num_local_experts", 1, kMaxExperts));
  D0_ASSIGN_OR_RETURN(int64_t legacy_k, cfg.optional_int("experts_per_token", 4, 1, moe.n_experts));
  D0_ASSIGN_OR_RETURN(moe.experts_per_token,
                      cfg.optional_int("num_experts_per_tok", legacy_k, 1, moe.n_experts));
  moe.expert_intermediate = spec.intermediate_size;
  moe.topk_method = TopkMethod::kLogitsThenSoftmax;
  moe.router_bias = true;
  moe.expert_bias = true;
  D0_ASSIGN_OR_RETURN(moe.swiglu_limit, cfg.optional_double("swiglu_limit", 7.0));
  spec.moe = moe;
  if (spec.weights.format == WeightFormat::kMxfp4 && spec.hidden_size % 32 != 0) {
    return cfg.invalid("hidden_size", "must be a multiple of 32 for MXFP4 experts");
  }
  if (spec.weights.format == WeightFormat::kMxfp4 && moe.expert_intermediate % 32 != 0) {
    return cfg.invalid("intermediate_size", "must be a multiple of 32 for MXFP4 experts");
  }
  for (auto& layer : spec.layers) {
    layer.moe = true;
    layer.dense_intermediate = 0;
  }
  D0_ASSIGN_OR_RETURN(spec.sliding_window, cfg.optional_int("sliding_window", 128, 1));
  D0_ASSIGN_OR_RETURN(bool listed, apply_layer_types(cfg, spec));
  if (!listed) {
    for (size_t n = 0; n < spec.layers.size(); n += 2) {
      spec.layers[n].mask = AttentionMask::kSliding;
      spec.layers[n].window = spec.sliding_window;
    }
  }
  return Status::ok();
}

void write_gpt_oss(const ModelSpec& spec, nlohmann::json& out) {
  out["attention_bias"] = spec.qkv_bias;
  out["num_local_experts"] = spec.moe->n_experts;
  out["num_experts_per_tok"] = spec.moe->experts_per_token;
  out["experts_per_token"] = spec.moe->experts_per_token;
  out["intermediate_size"] = spec.moe->expert_intermediate;
  out["swiglu_limit"] = spec.moe->swiglu_limit;
  out["sliding_window"] = spec.sliding_window;
  write_layer_types(spec, out);
}

}  // namespace day0::families
