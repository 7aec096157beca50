// Qwen3ForCausalLM: explicit head_dim (class default 128), per-head RMSNorm of q and k before RoPE,
// attention_bias (default false) on all four projections.
#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {

Status parse_qwen3(const ConfigReader& cfg, ModelSpec& spec) {
  FamilyDefaults defaults;
  defaults.rms_norm_eps = 1e-6;
  defaults.rope_theta = 10000.0;
  defaults.max_position_embeddings = 32768;
  defaults.head_dim = 128;
  D0_RETURN_IF_ERROR(parse_core(cfg, defaults, spec));
  D0_RETURN_IF_ERROR(parse_attention_bias(cfg, spec));
  spec.qk_norm = true;
  return parse_qwen_sliding(cfg, spec);
}

void write_qwen3(const ModelSpec& spec, nlohmann::json& out) {
  out["attention_bias"] = spec.qkv_bias;
  write_qwen_sliding(spec, out);
}

// Weights: a dense SwiGLU `mlp.` in every layer.
void weights_qwen3(const ModelSpec& s, WeightTableBuilder& b) {
  dense_decoder_weights(s, b);
}

const FamilyRegistrar kFamily({
    .model_types = {"qwen3"},
    .architectures = {"Qwen3ForCausalLM"},
    .summary = "GQA with per-head q/k RMSNorm, SwiGLU MLP",
    .parse = parse_qwen3,
    .write = write_qwen3,
    .weights = weights_qwen3,
});

}  // namespace day0::families
