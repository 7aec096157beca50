// SeedOssForCausalLM (ByteDance Seed-OSS): Llama's decoder with q/k/v biases on by default
// (attention_bias), the o_proj bias under a switch of its own (attention_out_bias, default off), an
// optional MLP bias and an explicit head_dim (class default 128). Checked against transformers'
// models/seed_oss (configuration_seed_oss.py, modular_seed_oss.py). Its dropouts act in training only.
#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"

namespace day0::families {
namespace {

Status parse_seed_oss(const ConfigReader& cfg, ModelSpec& spec) {
  FamilyDefaults defaults;  // SeedOssConfig
  defaults.rms_norm_eps = 1e-6;
  defaults.rope_theta = 10000.0;
  defaults.max_position_embeddings = 524288;
  defaults.head_dim = 128;
  defaults.training_only_attention_dropout = true;  // releases ship 0.1; SeedOssAttention drops in training
  D0_RETURN_IF_ERROR(parse_core(cfg, defaults, spec));
  D0_ASSIGN_OR_RETURN(spec.qkv_bias, cfg.optional_bool("attention_bias", true));
  D0_ASSIGN_OR_RETURN(spec.o_bias, cfg.optional_bool("attention_out_bias", false));
  D0_ASSIGN_OR_RETURN(spec.mlp_bias, cfg.optional_bool("mlp_bias", false));
  ignore_keys(cfg, {"residual_dropout"});
  return Status::ok();
}

void write_seed_oss(const ModelSpec& spec, nlohmann::json& out) {
  out["attention_bias"] = spec.qkv_bias;
  out["attention_out_bias"] = spec.o_bias;
  out["mlp_bias"] = spec.mlp_bias;
}

const FamilyRegistrar kFamily({
    .model_types = {"seed_oss"},
    .architectures = {"SeedOssForCausalLM"},
    .summary = "GQA with q/k/v biases and a separate o_proj bias switch, SwiGLU MLP",
    .parse = parse_seed_oss,
    .write = write_seed_oss,
    .weights = dense_decoder_weights,  // a dense SwiGLU `mlp.` in every layer, Llama's names
});

}  // namespace
}  // namespace day0::families
