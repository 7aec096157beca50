// Qwen3MoeForCausalLM: Qwen3 attention (q/k norm, explicit head_dim) and softmax top-k routed
// experts without a shared expert (Qwen3-Coder's shared_expert_intermediate_size: 0 is ignored, as
// transformers ignores it).
#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {

Status parse_qwen3_moe(const ConfigReader& cfg, ModelSpec& spec) {
  FamilyDefaults defaults;
  defaults.rms_norm_eps = 1e-6;
  defaults.rope_theta = 10000.0;
  defaults.max_position_embeddings = 32768;
  defaults.head_dim = 128;
  D0_RETURN_IF_ERROR(parse_core(cfg, defaults, spec));
  D0_RETURN_IF_ERROR(parse_attention_bias(cfg, spec));
  spec.qk_norm = true;
  MoeSpec moe;
  // transformers 5 saves the attribute name num_local_experts (attribute_map alias of num_experts).
  D0_ASSIGN_OR_RETURN(moe.n_experts, aliased_int(cfg, {"num_experts", "num_local_experts"}, 1, kMaxExperts));
  D0_ASSIGN_OR_RETURN(moe.experts_per_token, cfg.required_int("num_experts_per_tok", 1, moe.n_experts));
  D0_ASSIGN_OR_RETURN(moe.expert_intermediate, cfg.required_int("moe_intermediate_size"));
  D0_ASSIGN_OR_RETURN(moe.norm_topk_prob, cfg.optional_bool("norm_topk_prob", false));
  spec.moe = moe;
  D0_RETURN_IF_ERROR(parse_qwen_moe_layers(cfg, spec));
  return parse_qwen_sliding(cfg, spec);
}

void write_qwen3_moe(const ModelSpec& spec, nlohmann::json& out) {
  out["attention_bias"] = spec.qkv_bias;
  out["num_experts"] = spec.moe->n_experts;
  out["num_experts_per_tok"] = spec.moe->experts_per_token;
  out["moe_intermediate_size"] = spec.moe->expert_intermediate;
  out["norm_topk_prob"] = spec.moe->norm_topk_prob;
  write_qwen_moe_layers(spec, out);
  write_qwen_sliding(spec, out);
}

void weights_qwen3_moe(const ModelSpec& s, WeightTableBuilder& b) {
  qwen_moe_weights(s, b);
}

const FamilyRegistrar kFamily({
    .model_types = {"qwen3_moe"},
    .architectures = {"Qwen3MoeForCausalLM"},
    .summary = "GQA with q/k RMSNorm, softmax top-k MoE",
    .parse = parse_qwen3_moe,
    .write = write_qwen3_moe,
    .weights = weights_qwen3_moe,
});

}  // namespace day0::families
