// MiniMaxM2ForCausalLM (MiniMax-M2 / M2.1 / M2.5): GQA with partial RoPE (rotary_dim of head_dim) and
// one RMSNorm of q and one of k over all heads at once (before the head split), every FFN a sigmoid-routed
// MoE: the correction bias only selects, the selected unbiased sigmoids are renormalised (no epsilon, no
// scaling), no shared expert. Tensors keep Mixtral's names (block_sparse_moe, experts w1 / w3 / w2).
#include <fmt/format.h>
#include <cmath>

#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {

// The release carries switches that transformers' MiniMaxM2 model never reads (it hard-codes the released
// values): require_released refuses another value, naming this code.
constexpr const char* kImplementation = "MiniMax-M2";

namespace {

// attn_type_list: 1 = softmax attention in every layer (0, MiniMax-M1's lightning attention, is
// another family).
Status check_attention_types(const ConfigReader& cfg, const ModelSpec& spec) {
  D0_ASSIGN_OR_RETURN(std::vector<int64_t> types, cfg.optional_int_list("attn_type_list", 0, 1));
  if (types.empty()) return Status::ok();
  if (static_cast<int64_t>(types.size()) != spec.n_layers) {
    return cfg.invalid("attn_type_list", fmt::format("expected {} entries (num_hidden_layers), found {}",
                                                     spec.n_layers, types.size()));
  }
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] != 1) {
      return unsupported(
          fmt::format("{}: attn_type_list[{}]: {} (linear attention) is not supported; "
                      "MiniMax-M2 layers are all softmax attention (1)",
                      cfg.source(), i, types[i]));
    }
  }
  return Status::ok();
}

}  // namespace

Status parse_minimax_m2(const ConfigReader& cfg, ModelSpec& spec) {
  // The routing weights stay float32: the expert output is scaled in float32, then rounded.
  spec.routing_weights_f32 = true;
  FamilyDefaults defaults;  // MiniMaxM2Config
  defaults.rms_norm_eps = 1e-6;
  defaults.rope_theta = 5e6;
  defaults.max_position_embeddings = 196608;
  defaults.head_dim = 128;
  D0_RETURN_IF_ERROR(parse_core(cfg, defaults, spec));
  // Releases give rotary_dim (64 of 128); transformers turns it into partial_rotary_factor unless
  // that is given too (transformers 5 saves both). Without either, every dimension rotates.
  bool explicit_factor = cfg.present("partial_rotary_factor");
  for (const char* rope : {"rope_parameters", "rope_scaling"}) {
    const nlohmann::json& j = cfg.json();
    if (j.contains(rope) && j.at(rope).is_object() && j.at(rope).contains("partial_rotary_factor")) {
      explicit_factor = true;
    }
  }
  if (cfg.present("rotary_dim")) {
    D0_ASSIGN_OR_RETURN(int64_t rotary_dim, cfg.required_int("rotary_dim", 1, spec.head_dim));
    const double factor = static_cast<double>(rotary_dim) / static_cast<double>(spec.head_dim);
    if (explicit_factor && std::fabs(factor - spec.partial_rotary_factor) > 1e-12) {
      return cfg.invalid("rotary_dim",
                         fmt::format("{} of head_dim {} disagrees with partial_rotary_factor {}", rotary_dim,
                                     spec.head_dim, spec.partial_rotary_factor));
    }
    spec.partial_rotary_factor = factor;
  } else {
    cfg.mark_used("rotary_dim");
  }
  spec.qk_norm = true;
  spec.qk_norm_full_width = true;
  D0_RETURN_IF_ERROR(require_released(cfg, "use_qk_norm", true, kImplementation));
  D0_RETURN_IF_ERROR(require_released(cfg, "qk_norm_type", "per_layer", kImplementation));
  D0_RETURN_IF_ERROR(require_released(cfg, "scoring_func", "sigmoid", kImplementation));
  D0_RETURN_IF_ERROR(require_released(cfg, "use_routing_bias", true, kImplementation));
  D0_RETURN_IF_ERROR(require_released(cfg, "shared_intermediate_size", 0, kImplementation));
  D0_RETURN_IF_ERROR(check_attention_types(cfg, spec));
  // Multi-token-prediction modules: transformers builds none and the release publishes no usable
  // weights for them (MiniMax-AI/MiniMax-M2 issue 47); decoding never uses them.
  ignore_keys(cfg, {"use_mtp", "num_mtp_modules", "mtp_transformer_layers"});

  MoeSpec moe;
  D0_ASSIGN_OR_RETURN(moe.n_experts,
                      aliased_int(cfg, {"num_local_experts", "num_experts"}, 1, kMaxExperts, int64_t{256}));
  D0_ASSIGN_OR_RETURN(moe.experts_per_token, cfg.optional_int("num_experts_per_tok", 8, 1, moe.n_experts));
  moe.expert_intermediate = spec.intermediate_size;  // no dense MLP: intermediate_size is the expert width
  moe.scoring = RouterScoring::kSigmoid;
  moe.topk_method = TopkMethod::kNoauxTc;  // one group: plain top-k of sigmoid + bias
  moe.correction_bias = true;
  moe.norm_topk_prob = true;
  spec.moe = moe;
  for (auto& layer : spec.layers) {
    layer.moe = true;
    layer.dense_intermediate = 0;
  }
  return Status::ok();
}

void write_minimax_m2(const ModelSpec& spec, nlohmann::json& out) {
  out["num_local_experts"] = spec.moe->n_experts;
  out["num_experts_per_tok"] = spec.moe->experts_per_token;
  const double rotary = spec.partial_rotary_factor * static_cast<double>(spec.head_dim);
  if (rotary == std::floor(rotary)) {
    out["rotary_dim"] = static_cast<int64_t>(rotary);
  } else {
    out["partial_rotary_factor"] = spec.partial_rotary_factor;
  }
  out["use_qk_norm"] = true;
  out["qk_norm_type"] = "per_layer";
  out["scoring_func"] = "sigmoid";
  out["use_routing_bias"] = true;
}

// Weights: q_norm [n_heads * head_dim] / k_norm [n_kv_heads * head_dim] (split with their heads under
// TP, which then needs an all-reduce of the sum of squares), `block_sparse_moe.` router, its
// correction bias beside (not under) the gate, and Mixtral-named experts.
void weights_minimax_m2(const ModelSpec& s, WeightTableBuilder& b) {
  weights::decoder(s, b, [&](WeightTableBuilder& lb, const LayerSpec&) {
    weights::router(s, lb, "block_sparse_moe.gate.weight");
    lb.add("block_sparse_moe.e_score_correction_bias", {s.moe->n_experts}, WeightStorage::kF32,
           TensorRole::kRouter, weights::kReplicated, WeightSlot::kCorrectionBias);
    weights::separate_experts(s, lb, "block_sparse_moe.experts.{E}.", {"w1", "w3", "w2"});
  });
}

const FamilyRegistrar kFamily({
    .model_types = {"minimax_m2"},
    .architectures = {"MiniMaxM2ForCausalLM"},
    .summary = "GQA with full-width q/k norm and partial RoPE, sigmoid MoE with a correction bias",
    .parse = parse_minimax_m2,
    .write = write_minimax_m2,
    .weights = weights_minimax_m2,
});

}  // namespace day0::families
