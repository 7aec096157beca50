// ExaoneMoeForCausalLM (K-EXAONE): pre-norm GQA without biases, per-head q/k RMSNorm before RoPE, layers
// sliding (window) or global by layer_types, the global ones without positional encoding (NoPE) whenever
// a window is configured; DeepSeek-V3's sigmoid noaux_tc router (float32, correction bias for selection
// only, group-limited, renormalised, x routed_scaling_factor) over num_experts experts plus
// num_shared_experts shared ones, dense layers placed by mlp_layer_types / first_k_dense_replace. Checked
// against transformers' models/exaone_moe (configuration_exaone_moe.py, modular_exaone_moe.py).
// The release's multi-token-prediction module mtp.* (one layer with a dense MLP) is dropped on load.
#include <fmt/format.h>

#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {
namespace {

constexpr const char* kExaoneCode = "transformers' ExaoneMoe";

// ExaoneMoeConfig's MoE keys under the names the DeepSeek MoE reader takes, with its class defaults.
Result<nlohmann::json> exaone_merged(const ConfigReader& cfg) {
  nlohmann::json out = cfg.json();
  D0_ASSIGN_OR_RETURN(out["n_routed_experts"], cfg.optional_int("num_experts", 64, 1, kMaxExperts));
  D0_ASSIGN_OR_RETURN(out["n_shared_experts"], cfg.optional_int("num_shared_experts", 1, 0, kMaxExperts));
  D0_ASSIGN_OR_RETURN(out["num_experts_per_tok"], cfg.optional_int("num_experts_per_tok", 8, 1));
  D0_ASSIGN_OR_RETURN(out["moe_intermediate_size"], cfg.optional_int("moe_intermediate_size", 1024, 1));
  return out;
}

// Release keys transformers never reads that repeat the MoE placement (is_moe_layer; the historical
// first_last_k_dense_replace): accepted only where they agree with it.
Status check_moe_placement(const ConfigReader& cfg, const ModelSpec& spec) {
  D0_ASSIGN_OR_RETURN(std::vector<int64_t> flags, cfg.optional_int_list("is_moe_layer", 0, 1));
  if (cfg.present("is_moe_layer") && static_cast<int64_t>(flags.size()) != spec.n_layers) {
    return cfg.invalid("is_moe_layer", fmt::format("expected {} entries (num_hidden_layers), found {}",
                                                   spec.n_layers, flags.size()));
  }
  std::optional<int64_t> dense;
  if (cfg.present("first_last_k_dense_replace")) {
    D0_ASSIGN_OR_RETURN(dense, cfg.required_int("first_last_k_dense_replace", 0));
  }
  for (int64_t n = 0; n < spec.n_layers; ++n) {
    const bool moe = spec.layers[static_cast<size_t>(n)].moe;
    const bool by_flag = flags.empty() ? moe : flags[static_cast<size_t>(n)] != 0;
    const bool by_count = dense ? n >= *dense : moe;
    if (by_flag != moe || by_count != moe) {
      return unsupported(fmt::format(
          "{}: is_moe_layer / first_last_k_dense_replace disagree with the MoE layers transformers builds "
          "(layer {} is {}); Day0 will not guess which one the checkpoint follows",
          cfg.source(), n, moe ? "sparse" : "dense"));
    }
  }
  return Status::ok();
}

// layer_types decide; absent, every sliding_window_pattern-th layer is global (an integer pattern: a
// letter pattern or none stops transformers' config class, so Day0 refuses it too).
Status apply_exaone_layers(const ConfigReader& cfg, ModelSpec& spec) {
  const bool windowed = cfg.present("sliding_window") || !cfg.contains("sliding_window");
  spec.sliding_window = 0;
  if (windowed) {
    D0_ASSIGN_OR_RETURN(spec.sliding_window, cfg.optional_int("sliding_window", 4096, 1));
  }
  cfg.mark_used("sliding_window");
  D0_ASSIGN_OR_RETURN(bool listed, apply_layer_types(cfg, spec));
  cfg.mark_used("sliding_window_pattern");
  if (!listed) {
    const nlohmann::json pattern =
        cfg.contains("sliding_window_pattern") ? cfg.json().at("sliding_window_pattern") : nlohmann::json(4);
    if (!windowed || !pattern.is_number_integer() || pattern.get<int64_t>() <= 0) {
      return unsupported(fmt::format(
          "{}: sliding_window_pattern: {} without layer_types is not supported (transformers derives "
          "layer_types from a positive integer pattern and a window only)",
          cfg.source(), describe_json(pattern)));
    }
    const int64_t every = pattern.get<int64_t>();
    for (int64_t n = 0; n < spec.n_layers; ++n) {
      if ((n + 1) % every == 0) continue;
      spec.layers[static_cast<size_t>(n)].mask = AttentionMask::kSliding;
      spec.layers[static_cast<size_t>(n)].window = spec.sliding_window;
    }
  }
  // RoPE on sliding layers only, every layer without a window (ExaoneMoeAttention).
  for (LayerSpec& l : spec.layers) l.use_rope = !windowed || l.mask == AttentionMask::kSliding;
  return Status::ok();
}

Status parse_exaone_moe(const ConfigReader& cfg, ModelSpec& spec) {
  // The router (DeepSeek-V3's) keeps its logits and the routing weights in float32.
  spec.router_logits_f32 = true;
  spec.routing_weights_f32 = true;
  D0_ASSIGN_OR_RETURN(const nlohmann::json merged, exaone_merged(cfg));
  const ConfigReader core = cfg.derived(merged, "");
  FamilyDefaults defaults;  // ExaoneMoeConfig
  defaults.rms_norm_eps = 1e-5;
  defaults.rope_theta = 10000.0;
  defaults.max_position_embeddings = 2048;
  D0_RETURN_IF_ERROR(parse_core(core, defaults, spec));
  spec.qk_norm = true;  // per head, before RoPE
  D0_RETURN_IF_ERROR(require_released(cfg, "attention_bias", false, kExaoneCode));
  D0_RETURN_IF_ERROR(require_released(cfg, "mlp_bias", false, kExaoneCode));
  DeepseekMoeDefaults moe = glm4_moe_defaults();  // sigmoid, noaux_tc, renormalised, one shared expert
  moe.routed_scaling_factor = 2.5;
  D0_RETURN_IF_ERROR(parse_deepseek_moe(core, moe, spec));
  D0_RETURN_IF_ERROR(require_released(cfg, "scoring_func", "sigmoid", kExaoneCode));
  D0_RETURN_IF_ERROR(require_released(cfg, "topk_method", "noaux_tc", kExaoneCode));
  D0_ASSIGN_OR_RETURN(std::vector<std::string> mlp, cfg.optional_string_list("mlp_layer_types"));
  if (!mlp.empty()) {
    D0_RETURN_IF_ERROR(apply_mlp_layer_types(cfg, mlp, spec));
  }
  D0_RETURN_IF_ERROR(check_moe_placement(cfg, spec));
  return apply_exaone_layers(cfg, spec);
}

void write_exaone_moe(const ModelSpec& spec, nlohmann::json& out) {
  const MoeSpec& moe = *spec.moe;
  out["num_experts"] = moe.n_experts;
  out["num_shared_experts"] = moe.n_shared_experts;
  out["num_experts_per_tok"] = moe.experts_per_token;
  out["moe_intermediate_size"] = moe.expert_intermediate;
  out["n_group"] = moe.n_group;
  out["topk_group"] = moe.topk_group;
  out["norm_topk_prob"] = moe.norm_topk_prob;
  out["routed_scaling_factor"] = moe.routed_scaling_factor;
  out["first_k_dense_replace"] = first_moe_layer(spec);
  out["num_nextn_predict_layers"] = spec.n_mtp_layers;
  nlohmann::json mlp = nlohmann::json::array();
  for (const LayerSpec& l : spec.layers) mlp.push_back(l.moe ? "sparse" : "dense");
  out["mlp_layer_types"] = mlp;
  // No window (null) means RoPE on every layer; a window, NoPE on the global ones.
  out["sliding_window"] =
      spec.sliding_window > 0 ? nlohmann::json(spec.sliding_window) : nlohmann::json(nullptr);
  write_layer_types(spec, out);
}

// Weights: Llama's attention with q_norm / k_norm, the FFN a dense mlp or mlp.gate (float32),
// mlp.e_score_correction_bias (transformers moves it under mlp.gate on load and back on save),
// mlp.experts.{E}.* and mlp.shared_experts.*; then the MTP module: mtp.fc [H, 2H] over the normed
// [embedding | hidden], its three norms and mtp.layers.{k}, a decoder layer with a dense MLP.
void weights_exaone_moe(const ModelSpec& s, WeightTableBuilder& b) {
  const int64_t H = s.hidden_size;
  const weights::LayerFfn ffn = [&](WeightTableBuilder& lb, const LayerSpec& l) {
    if (!l.moe) return weights::dense_mlp(s, lb, "mlp.", l.dense_intermediate, false);
    weights::router(s, lb, "mlp.gate.weight");
    lb.add("mlp.e_score_correction_bias", {s.moe->n_experts}, WeightStorage::kF32, TensorRole::kRouter,
           weights::kReplicated, WeightSlot::kCorrectionBias);
    weights::separate_experts(s, lb, "mlp.experts.{E}.");
    weights::shared_expert(s, lb, "mlp.shared_experts.", s.moe->shared_intermediate);
  };
  weights::decoder(s, b, ffn);
  if (s.n_mtp_layers == 0) return;
  const auto norm = [&](const char* name) {
    b.add(name, {H}, WeightStorage::kKeptF32, TensorRole::kNorm, weights::kReplicated, WeightSlot::kNone);
  };
  b.begin_mtp_scope(s.n_layers, "mtp.");
  b.add("fc.weight", {H, 2 * H}, WeightStorage::kProjection, TensorRole::kAttention, weights::kReplicated,
        WeightSlot::kNone);
  norm("pre_fc_norm_embedding.weight");
  norm("pre_fc_norm_hidden.weight");
  norm("norm.weight");
  LayerSpec mtp_layer = s.layers.back();
  mtp_layer.moe = false;
  mtp_layer.dense_intermediate = s.intermediate_size;
  for (int64_t k = 0; k < s.n_mtp_layers; ++k) {
    b.begin_mtp_scope(s.n_layers + k, fmt::format("mtp.layers.{}.", k));
    weights::decoder_layer(s, b, mtp_layer, ffn);
  }
  b.end_layer();
}

const FamilyRegistrar kFamily({
    .model_types = {"exaone_moe"},
    // The release's config.json names the class ExaoneMoEForCausalLM; transformers' is ExaoneMoe...
    .architectures = {"ExaoneMoeForCausalLM", "ExaoneMoEForCausalLM"},
    .summary =
        "GQA with q/k norm, sliding layers with RoPE and global NoPE ones, sigmoid MoE + shared expert",
    .parse = parse_exaone_moe,
    .write = write_exaone_moe,
    .weights = weights_exaone_moe,
});

}  // namespace
}  // namespace day0::families
