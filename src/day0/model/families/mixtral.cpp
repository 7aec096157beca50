// MixtralForCausalLM: Llama attention without biases, every FFN a softmax top-k MoE that always
// renormalises the selected weights; experts are intermediate_size wide.
#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {

Status parse_mixtral(const ConfigReader& cfg, ModelSpec& spec) {
  FamilyDefaults defaults;
  defaults.rms_norm_eps = 1e-5;
  defaults.rope_theta = 1e6;
  defaults.max_position_embeddings = 4096 * 32;
  D0_RETURN_IF_ERROR(parse_core(cfg, defaults, spec));
  MoeSpec moe;
  D0_ASSIGN_OR_RETURN(moe.n_experts, aliased_int(cfg, {"num_local_experts", "num_experts"}, 1, kMaxExperts));
  D0_ASSIGN_OR_RETURN(moe.experts_per_token, cfg.optional_int("num_experts_per_tok", 2, 1, moe.n_experts));
  moe.expert_intermediate = spec.intermediate_size;
  moe.norm_topk_prob = true;
  spec.moe = moe;
  for (auto& layer : spec.layers) {
    layer.moe = true;
    layer.dense_intermediate = 0;
  }
  // null or 0: no window.
  D0_ASSIGN_OR_RETURN(int64_t window, cfg.optional_int("sliding_window", 0, 0));
  set_all_sliding(spec, window);
  return Status::ok();
}

void write_mixtral(const ModelSpec& spec, nlohmann::json& out) {
  out["num_local_experts"] = spec.moe->n_experts;
  out["num_experts_per_tok"] = spec.moe->experts_per_token;
  out["intermediate_size"] = spec.moe->expert_intermediate;
  out["sliding_window"] =
      spec.sliding_window > 0 ? nlohmann::json(spec.sliding_window) : nlohmann::json(nullptr);
}

// Weights: `block_sparse_moe.gate` and experts w1 (gate), w3 (up), w2 (down) in every layer.
void weights_mixtral(const ModelSpec& s, WeightTableBuilder& b) {
  weights::decoder(s, b, [&](WeightTableBuilder& lb, const LayerSpec&) {
    weights::router(s, lb, "block_sparse_moe.gate.weight");
    weights::separate_experts(s, lb, "block_sparse_moe.experts.{E}.", {"w1", "w3", "w2"});
  });
}

const FamilyRegistrar kFamily({
    .model_types = {"mixtral"},
    .architectures = {"MixtralForCausalLM"},
    .summary = "GQA, softmax top-k MoE of SwiGLU experts",
    .parse = parse_mixtral,
    .write = write_mixtral,
    .weights = weights_mixtral,
});

}  // namespace day0::families
