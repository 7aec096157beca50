// DeepseekV2ForCausalLM: MLA (interleaved RoPE) + DeepSeekMoE with softmax scoring and greedy or
// group-limited-greedy selection. Defaults follow DeepSeek-V2's configuration class.
#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {

Status parse_deepseek_v2(const ConfigReader& cfg, ModelSpec& spec) {
  // The reference keeps the router in float32: its logits and the routing weights.
  spec.router_logits_f32 = true;
  spec.routing_weights_f32 = true;
  FamilyDefaults defaults;
  defaults.rms_norm_eps = 1e-6;
  defaults.rope_theta = 10000.0;
  defaults.max_position_embeddings = 2048;
  D0_RETURN_IF_ERROR(parse_core(cfg, defaults, spec));
  D0_RETURN_IF_ERROR(parse_mla(cfg, MlaDefaults{}, spec));
  spec.rope_layout = RopeLayout::kInterleaved;
  DeepseekMoeDefaults moe;
  moe.scoring = "softmax";
  moe.topk_method = "greedy";
  moe.norm_topk_prob = false;
  moe.routed_scaling_factor = 1.0;
  moe.first_k_dense_replace = 0;
  return parse_deepseek_moe(cfg, moe, spec);
}

void write_deepseek_v2(const ModelSpec& spec, nlohmann::json& out) {
  write_mla(spec, out);
  write_deepseek_moe(spec, out);
}

// Weights: MLA attention, dense `mlp.` before first_k_dense_replace, then the DeepSeekMoE block.
void weights_deepseek_v2(const ModelSpec& s, WeightTableBuilder& b) {
  weights::decoder(s, b, [&](WeightTableBuilder& lb, const LayerSpec& l) { deepseek_ffn_weights(s, lb, l); });
}

const FamilyRegistrar kFamily({
    .model_types = {"deepseek_v2"},
    .architectures = {"DeepseekV2ForCausalLM"},
    .summary = "MLA, softmax MoE (greedy or group-limited) with shared experts",
    .parse = parse_deepseek_v2,
    .write = write_deepseek_v2,
    .weights = weights_deepseek_v2,
});

}  // namespace day0::families
