// LlamaForCausalLM: GQA + SwiGLU, attention_bias on q/k/v/o, optional mlp_bias, RoPE scaling of
// any supported type (Llama 3.1: llama3).
#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {

Status parse_llama(const ConfigReader& cfg, ModelSpec& spec) {
  FamilyDefaults defaults;
  defaults.rms_norm_eps = 1e-6;
  defaults.rope_theta = 10000.0;
  defaults.max_position_embeddings = 2048;
  D0_RETURN_IF_ERROR(parse_core(cfg, defaults, spec));
  D0_RETURN_IF_ERROR(parse_attention_bias(cfg, spec));
  D0_ASSIGN_OR_RETURN(spec.mlp_bias, cfg.optional_bool("mlp_bias", false));
  return Status::ok();
}

void write_llama(const ModelSpec& spec, nlohmann::json& out) {
  out["attention_bias"] = spec.qkv_bias;
  out["mlp_bias"] = spec.mlp_bias;
}

void dense_decoder_weights(const ModelSpec& s, WeightTableBuilder& b) {
  weights::decoder(s, b, [&](WeightTableBuilder& lb, const LayerSpec& layer) {
    weights::dense_mlp(s, lb, "mlp.", layer.dense_intermediate, s.mlp_bias);
  });
}

// Weights: a dense SwiGLU `mlp.` in every layer.
void weights_llama(const ModelSpec& s, WeightTableBuilder& b) {
  dense_decoder_weights(s, b);
}

const FamilyRegistrar kFamily({
    .model_types = {"llama"},
    .architectures = {"LlamaForCausalLM"},
    .summary = "GQA, SwiGLU MLP, RoPE with llama3 / linear / dynamic / YaRN scaling",
    .parse = parse_llama,
    .write = write_llama,
    .weights = weights_llama,
});

}  // namespace day0::families
