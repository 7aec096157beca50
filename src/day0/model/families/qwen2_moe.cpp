// Qwen2MoeForCausalLM: Qwen2 attention (q/k/v bias), softmax top-k routed experts (renormalised only
// with norm_topk_prob, default false) plus a shared expert gated by sigmoid(x . w).
#include <algorithm>

#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {

Status parse_qwen_moe_layers(const ConfigReader& cfg, ModelSpec& spec) {
  D0_ASSIGN_OR_RETURN(int64_t step, cfg.optional_int("decoder_sparse_step", 1, 1));
  D0_ASSIGN_OR_RETURN(std::vector<int64_t> mlp_only, cfg.optional_int_list("mlp_only_layers", 0, kMaxLayers));
  const bool has_experts = spec.moe && spec.moe->n_experts > 0;
  for (int64_t n = 0; n < spec.n_layers; ++n) {
    LayerSpec& layer = spec.layers[static_cast<size_t>(n)];
    const bool dense_only = std::find(mlp_only.begin(), mlp_only.end(), n) != mlp_only.end();
    layer.moe = has_experts && !dense_only && (n + 1) % step == 0;
    layer.dense_intermediate = layer.moe ? 0 : spec.intermediate_size;
  }
  return Status::ok();
}

void write_qwen_moe_layers(const ModelSpec& spec, nlohmann::json& out) {
  out["decoder_sparse_step"] = 1;
  nlohmann::json mlp_only = nlohmann::json::array();
  for (int64_t n = 0; n < spec.n_layers; ++n) {
    if (!spec.layers[static_cast<size_t>(n)].moe) mlp_only.push_back(n);
  }
  out["mlp_only_layers"] = mlp_only;
}

Status parse_qwen2_moe(const ConfigReader& cfg, ModelSpec& spec) {
  FamilyDefaults defaults;
  defaults.rms_norm_eps = 1e-6;
  defaults.rope_theta = 10000.0;
  defaults.max_position_embeddings = 32768;
  D0_RETURN_IF_ERROR(parse_core(cfg, defaults, spec));
  D0_ASSIGN_OR_RETURN(spec.qkv_bias, cfg.optional_bool("qkv_bias", true));
  MoeSpec moe;
  D0_ASSIGN_OR_RETURN(moe.n_experts, aliased_int(cfg, {"num_experts", "num_local_experts"}, 1, kMaxExperts));
  D0_ASSIGN_OR_RETURN(moe.experts_per_token, cfg.required_int("num_experts_per_tok", 1, moe.n_experts));
  D0_ASSIGN_OR_RETURN(moe.expert_intermediate, cfg.required_int("moe_intermediate_size"));
  D0_ASSIGN_OR_RETURN(moe.shared_intermediate, cfg.required_int("shared_expert_intermediate_size", 0));
  moe.n_shared_experts = moe.shared_intermediate > 0 ? 1 : 0;
  moe.shared_expert_gate = moe.shared_intermediate > 0;
  D0_ASSIGN_OR_RETURN(moe.norm_topk_prob, cfg.optional_bool("norm_topk_prob", false));
  spec.moe = moe;
  D0_RETURN_IF_ERROR(parse_qwen_moe_layers(cfg, spec));
  return parse_qwen_sliding(cfg, spec);
}

void write_qwen2_moe(const ModelSpec& spec, nlohmann::json& out) {
  out["num_experts"] = spec.moe->n_experts;
  out["num_experts_per_tok"] = spec.moe->experts_per_token;
  out["moe_intermediate_size"] = spec.moe->expert_intermediate;
  out["shared_expert_intermediate_size"] = spec.moe->shared_intermediate;
  out["norm_topk_prob"] = spec.moe->norm_topk_prob;
  write_qwen_moe_layers(spec, out);
  write_qwen_sliding(spec, out);
}

// Weights (Qwen2-MoE and Qwen3-MoE): sparse layers hold `mlp.gate`, `mlp.experts.{E}` and, with a
// shared expert, `mlp.shared_expert` gated by `mlp.shared_expert_gate` [1, H]; the rest a dense mlp.
void qwen_moe_ffn(const ModelSpec& s, WeightTableBuilder& lb, const LayerSpec& layer) {
  if (!layer.moe) return weights::dense_mlp(s, lb, "mlp.", layer.dense_intermediate, false);
  weights::router(s, lb, "mlp.gate.weight");
  weights::separate_experts(s, lb, "mlp.experts.{E}.");
  if (s.moe->shared_intermediate <= 0) return;
  weights::shared_expert(s, lb, "mlp.shared_expert.", s.moe->shared_intermediate);
  if (s.moe->shared_expert_gate) {
    lb.add("mlp.shared_expert_gate.weight", {1, s.hidden_size}, WeightStorage::kKeptF32,
           TensorRole::kSharedExpert, weights::kReplicated, WeightSlot::kSharedExpertGate);
  }
}

void qwen_moe_weights(const ModelSpec& s, WeightTableBuilder& b) {
  weights::decoder(s, b, [&](WeightTableBuilder& lb, const LayerSpec& layer) { qwen_moe_ffn(s, lb, layer); });
}

void weights_qwen2_moe(const ModelSpec& s, WeightTableBuilder& b) {
  qwen_moe_weights(s, b);
}

const FamilyRegistrar kFamily({
    .model_types = {"qwen2_moe"},
    .architectures = {"Qwen2MoeForCausalLM"},
    .summary = "GQA with q/k/v biases, softmax top-k MoE plus a sigmoid-gated shared expert",
    .parse = parse_qwen2_moe,
    .write = write_qwen2_moe,
    .weights = weights_qwen2_moe,
});

}  // namespace day0::families
