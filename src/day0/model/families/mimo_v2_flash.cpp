// MiMoV2FlashForCausalLM (Xiaomi MiMo-V2-Flash): GQA whose keys are wider than its values (head_dim 192,
// v_head_dim 128), values times attention_value_scale (0.707) after v_proj, sliding-window layers (window
// sliding_window keys with the query: 129 from the release's sliding_window_size 128) with twice the KV
// heads and a learned sink logit per head, full-attention layers (the first and every sixth) without sinks;
// RoPE per layer type on the first int(0.334 * 192) = 64 dims (theta 5e6 full, 1e4 sliding). FFN per
// mlp_layer_types: a dense SwiGLU (layer 0), else DeepSeek-V3's MoE without shared experts: float32 router,
// sigmoid + correction bias (noaux_tc groups), renormalised (+1e-20), x routed_scaling_factor, weights
// float32 until they scale the experts. Checked against transformers' models/mimo_v2_flash
// (configuration_mimo_v2_flash.py, modular_mimo_v2_flash.py, modeling_mimo_v2_flash.py); model.mtp.* (its
// multi-token-prediction layers) is dropped on load, as transformers drops it.
#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {
namespace {

// The release's remote-code keys transformers 5 does not read (it derives or hard-codes the same values):
// each must say what transformers computes, or the checkpoint would run as another model.
Status check_mimo_release_keys(const ConfigReader& cfg, const ModelSpec& spec, int64_t swa_kv) {
  auto agrees = [&](const char* key, double want) -> Status {
    cfg.mark_used(key);
    if (!cfg.present(key)) return Status::ok();
    D0_ASSIGN_OR_RETURN(double v, cfg.required_double(key));
    if (v == want) return Status::ok();
    return unsupported(
        fmt::format("{}: {}: {} disagrees with the {} transformers computes (MiMo-V2-Flash reads "
                    "the transformers 5 keys)",
                    cfg.source(), key, v, want));
  };
  const LayerRope& swa = *spec.sliding_rope;
  D0_RETURN_IF_ERROR(agrees("swa_num_attention_heads", static_cast<double>(spec.n_heads)));
  D0_RETURN_IF_ERROR(agrees("swa_num_key_value_heads", static_cast<double>(swa_kv)));
  D0_RETURN_IF_ERROR(agrees("swa_head_dim", static_cast<double>(spec.head_dim)));
  D0_RETURN_IF_ERROR(agrees("swa_v_head_dim", static_cast<double>(spec.value_head_dim)));
  D0_RETURN_IF_ERROR(agrees("layernorm_epsilon", spec.rms_norm_eps));
  D0_RETURN_IF_ERROR(agrees("rope_theta", spec.rope_theta));
  D0_RETURN_IF_ERROR(agrees("swa_rope_theta", swa.theta));
  D0_RETURN_IF_ERROR(agrees("partial_rotary_factor", spec.partial_rotary_factor));  // one for both kinds
  D0_RETURN_IF_ERROR(agrees("partial_rotary_factor", swa.partial_rotary_factor));
  D0_RETURN_IF_ERROR(require_released(cfg, "add_swa_attention_sink_bias", true, "MiMo-V2-Flash"));
  D0_RETURN_IF_ERROR(require_released(cfg, "add_full_attention_sink_bias", false, "MiMo-V2-Flash"));
  D0_RETURN_IF_ERROR(require_released(cfg, "scoring_func", "sigmoid", "MiMo-V2-Flash"));
  D0_RETURN_IF_ERROR(require_released(cfg, "topk_method", "noaux_tc", "MiMo-V2-Flash"));
  // hybrid_layer_pattern (1: sliding) and moe_layer_freq (1: MoE), one flag a layer.
  for (const auto& [key, sliding] :
       {std::pair{"hybrid_layer_pattern", true}, std::pair{"moe_layer_freq", false}}) {
    D0_ASSIGN_OR_RETURN(std::vector<int64_t> flags, cfg.optional_int_list(key, 0, 1));
    if (!flags.empty() && flags.size() != spec.layers.size()) {
      return cfg.invalid(key, fmt::format("expected {} entries (num_hidden_layers)", spec.layers.size()));
    }
    for (size_t i = 0; i < flags.size(); ++i) {
      const LayerSpec& l = spec.layers[i];
      if ((flags[i] == 1) != (sliding ? l.mask == AttentionMask::kSliding : l.moe)) {
        return unsupported(
            fmt::format("{}: {}[{}] = {} disagrees with the layers transformers builds from "
                        "layer_types / mlp_layer_types",
                        cfg.source(), key, i, flags[i]));
      }
    }
  }
  return Status::ok();
}

Status parse_mimo_v2_flash(const ConfigReader& cfg, ModelSpec& spec) {
  // The router runs in float32 (its weight is kept float32) and so do its top-k weights.
  spec.router_logits_f32 = true;
  spec.routing_weights_f32 = true;
  FamilyDefaults defaults;  // MiMoV2FlashConfig
  defaults.rms_norm_eps = 1e-5;
  defaults.rope_theta = 5000000.0;
  defaults.partial_rotary_factor = 0.334;
  defaults.max_position_embeddings = 131072;
  defaults.head_dim = 192;
  D0_RETURN_IF_ERROR(parse_core(cfg, defaults, spec));
  D0_RETURN_IF_ERROR(
      parse_rope_by_layer_type(cfg, LayerRope{.theta = 5000000.0, .partial_rotary_factor = 0.334},
                               LayerRope{.theta = 10000.0, .partial_rotary_factor = 0.334}, spec));
  if (!spec.sliding_rope)
    spec.sliding_rope = LayerRope{spec.rope_theta, spec.partial_rotary_factor, spec.rope};
  for (const double f : {spec.partial_rotary_factor, spec.sliding_rope->partial_rotary_factor}) {
    if (static_cast<int64_t>(static_cast<double>(spec.head_dim) * f) % 2 != 0) {
      return unsupported(
          fmt::format("{}: rope_parameters: partial_rotary_factor {} rotates an odd number of "
                      "the {} dimensions (Day0 implements even counts)",
                      cfg.source(), f, spec.head_dim));
    }
  }
  D0_ASSIGN_OR_RETURN(spec.value_head_dim, cfg.optional_int("v_head_dim", 128, 1));
  // attention_value_scale: absent 0.707, null 1 (the attention's fallback).
  D0_ASSIGN_OR_RETURN(
      spec.value_scale,
      cfg.optional_double("attention_value_scale", cfg.contains("attention_value_scale") ? 1.0 : 0.707));
  D0_ASSIGN_OR_RETURN(spec.qkv_bias, cfg.optional_bool("attention_bias", false));
  spec.attention_sinks = true;
  // The release's sliding_window_size counts the keys before the query; the config class adds it.
  D0_ASSIGN_OR_RETURN(spec.sliding_window, cfg.optional_int("sliding_window", 129, 1));
  if (cfg.present("sliding_window_size")) {
    D0_ASSIGN_OR_RETURN(int64_t before, cfg.required_int("sliding_window_size", 1));
    spec.sliding_window = before + 1;
  }
  D0_ASSIGN_OR_RETURN(bool listed, apply_layer_types(cfg, spec));
  const int64_t swa_kv = 2 * spec.n_kv_heads;  // MiMoV2FlashAttention doubles them on sliding layers
  for (int64_t i = 0; i < spec.n_layers; ++i) {
    LayerSpec& l = spec.layers[static_cast<size_t>(i)];
    if (!listed && i != 0 && (i + 1) % 6 != 0) {  // the class's pattern: the first and every sixth full
      l.mask = AttentionMask::kSliding;
      l.window = spec.sliding_window;
    }
    const bool sliding = l.mask == AttentionMask::kSliding;
    l.n_kv_heads = sliding ? swa_kv : 0;
    l.sinks = sliding;
  }

  MoeSpec moe;
  D0_ASSIGN_OR_RETURN(moe.n_experts, aliased_int(cfg, {"n_routed_experts", "num_local_experts"}, 1,
                                                 kMaxExperts, int64_t{256}));
  D0_ASSIGN_OR_RETURN(moe.experts_per_token, cfg.optional_int("num_experts_per_tok", 8, 1, moe.n_experts));
  D0_ASSIGN_OR_RETURN(moe.expert_intermediate, cfg.optional_int("moe_intermediate_size", 2048, 1));
  D0_ASSIGN_OR_RETURN(moe.n_group, cfg.optional_int("n_group", 1, 1, moe.n_experts));
  D0_ASSIGN_OR_RETURN(moe.topk_group, cfg.optional_int("topk_group", 1, 1, moe.n_group));
  if (moe.n_experts % moe.n_group != 0) return cfg.invalid("n_group", "must divide n_routed_experts");
  D0_ASSIGN_OR_RETURN(moe.norm_topk_prob, cfg.optional_bool("norm_topk_prob", true));
  // The release stores null, which the config class turns into 1.
  D0_ASSIGN_OR_RETURN(moe.routed_scaling_factor, cfg.optional_double("routed_scaling_factor", 1.0));
  moe.scoring = RouterScoring::kSigmoid;
  moe.topk_method = TopkMethod::kNoauxTc;
  moe.correction_bias = true;
  spec.moe = moe;
  D0_RETURN_IF_ERROR(apply_mlp_layer_types_or_first_dense(cfg, spec));
  // Multi-token prediction: transformers drops model.mtp.* on load and never runs it.
  ignore_keys(cfg, {"num_nextn_predict_layers"});
  return check_mimo_release_keys(cfg, spec, swa_kv);
}

void write_mimo_v2_flash(const ModelSpec& spec, nlohmann::json& out) {
  const MoeSpec& moe = *spec.moe;
  out["attention_bias"] = spec.qkv_bias;
  out["v_head_dim"] = value_head_dim(spec);
  out["attention_value_scale"] = spec.value_scale;
  out["sliding_window"] = spec.sliding_window > 0 ? spec.sliding_window : 129;
  write_layer_types(spec, out);
  write_rope_by_layer_type(spec, out);
  nlohmann::json mlp = nlohmann::json::array();
  for (const LayerSpec& l : spec.layers) mlp.push_back(l.moe ? "sparse" : "dense");
  out["mlp_layer_types"] = mlp;
  out["n_routed_experts"] = moe.n_experts;
  out["num_experts_per_tok"] = moe.experts_per_token;
  out["moe_intermediate_size"] = moe.expert_intermediate;
  out["n_group"] = moe.n_group;
  out["topk_group"] = moe.topk_group;
  out["norm_topk_prob"] = moe.norm_topk_prob;
  out["routed_scaling_factor"] = moe.routed_scaling_factor;
}

// Weights: GQA sized per layer (sliding layers' k_proj / v_proj twice the rows) with the sinks of the
// sliding layers, which the checkpoints store as self_attn.attention_sink_bias (transformers renames it
// on load); DeepSeek-V3's MoE block (mlp.gate float32, its correction bias, mlp.experts.{E}.*) or a dense
// mlp.*. model.mtp.* is dropped on load, as transformers drops it.
void weights_mimo_v2_flash(const ModelSpec& s, WeightTableBuilder& b) {
  weights::decoder(s, b, [&](WeightTableBuilder& lb, const LayerSpec& layer) {
    if (layer.moe) return weights::deepseek_moe(s, lb);
    weights::dense_mlp(s, lb, "mlp.", layer.dense_intermediate, false);
  });
  b.ignore_prefix("model.mtp.");
  StoredLayout release;
  release.name = "the release names (self_attn.attention_sink_bias)";
  release.release = true;
  release.renames = {{".self_attn.sinks", ".self_attn.attention_sink_bias"}};
  b.stored_layout(std::move(release));
}

const FamilyRegistrar kFamily({
    .model_types = {"mimo_v2_flash"},
    .architectures = {"MiMoV2FlashForCausalLM"},
    .summary =
        "GQA with values narrower than keys, sliding layers with sinks and twice the KV heads, sigmoid MoE",
    .parse = parse_mimo_v2_flash,
    .write = write_mimo_v2_flash,
    .weights = weights_mimo_v2_flash,
});

}  // namespace
}  // namespace day0::families
