// LagunaForCausalLM (Poolside Laguna XS.2 / M.1): GQA with per-head q/k RMSNorm, query heads per layer
// (num_attention_heads_per_layer; the KV heads are the same in every layer), sliding / full layers
// (layer_types) with RoPE of their own per layer type (rope_parameters keyed by layer type: the full
// layers partial, YaRN in the releases), and a softplus output gate of its own projection (g_proj: one gate
// a head with gating true / "per-head", one an element with "per-element"). The FFN follows
// mlp_layer_types: a dense SwiGLU, or a MoE whose router soft-caps its logits (c tanh(z / c), float32,
// moe_router_logit_softcapping), scores them with sigmoid, picks the top-k of sigmoid + correction bias
// (selection only), renormalises the picked sigmoids and scales the routed sum by
// moe_routed_scaling_factor, plus one shared expert of shared_expert_intermediate_size. Checked against
// transformers' models/laguna (configuration_laguna.py, modular_laguna.py, modeling_laguna.py).
#include <algorithm>

#include <fmt/format.h>

#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {
namespace {

constexpr const char* kLagunaCode = "Laguna";

// layer_types (default all full attention) with sliding_window (default 512).
Status parse_laguna_layer_kinds(const ConfigReader& cfg, ModelSpec& spec) {
  D0_ASSIGN_OR_RETURN(spec.sliding_window, cfg.optional_int("sliding_window", 512, 1));
  D0_ASSIGN_OR_RETURN(bool listed, apply_layer_types(cfg, spec));
  (void)listed;  // absent: every layer full attention, as parse_core left them
  D0_ASSIGN_OR_RETURN(std::vector<int64_t> heads,
                      cfg.optional_int_list("num_attention_heads_per_layer", 1, 1 << 20));
  if (!heads.empty() && static_cast<int64_t>(heads.size()) != spec.n_layers) {
    return cfg.invalid(
        "num_attention_heads_per_layer",
        fmt::format("expected {} entries (num_hidden_layers), found {}", spec.n_layers, heads.size()));
  }
  for (size_t i = 0; i < heads.size(); ++i) {
    if (heads[i] % spec.n_kv_heads != 0) {
      return cfg.invalid(
          fmt::format("num_attention_heads_per_layer[{}]", i),
          fmt::format("{} is not a multiple of num_key_value_heads ({})", heads[i], spec.n_kv_heads));
    }
    spec.layers[i].n_heads = heads[i] == spec.n_heads ? 0 : heads[i];
  }
  return Status::ok();
}

// gating: true / "per-head" gate each head, false / "per-element" each element (modeling_laguna's two
// branches); any other string is refused rather than read as the second.
Status parse_laguna_gating(const ConfigReader& cfg, ModelSpec& spec) {
  spec.output_gate = OutputGate::kSoftplus;
  spec.output_gate_per_head = true;
  if (!cfg.present("gating")) return Status::ok();
  const nlohmann::json& g = cfg.json().at("gating");
  cfg.mark_used("gating");
  if (g.is_boolean()) {
    spec.output_gate_per_head = g.get<bool>();
  } else if (g == "per-head" || g == "per-element") {
    spec.output_gate_per_head = g == "per-head";
  } else {
    return cfg.mismatch("gating", "true, false, \"per-head\" or \"per-element\"");
  }
  return Status::ok();
}

Status parse_laguna(const ConfigReader& cfg, ModelSpec& spec) {
  FamilyDefaults defaults;  // LagunaConfig
  defaults.rms_norm_eps = 1e-6;
  defaults.max_position_embeddings = 131072;
  defaults.head_dim = 128;
  D0_RETURN_IF_ERROR(parse_core(cfg, defaults, spec));
  // LagunaConfig's rope_parameters: full layers theta 500000 on half the head, sliding layers 10000.
  D0_RETURN_IF_ERROR(parse_rope_by_layer_type(cfg, LayerRope{.theta = 500000.0, .partial_rotary_factor = 0.5},
                                              LayerRope{.theta = 10000.0, .partial_rotary_factor = 1.0},
                                              spec));
  for (const double f :
       {spec.partial_rotary_factor, spec.sliding_rope ? spec.sliding_rope->partial_rotary_factor : 1.0}) {
    if (static_cast<int64_t>(static_cast<double>(spec.head_dim) * f) % 2 != 0) {
      return unsupported(
          fmt::format("{}: rope_parameters: partial_rotary_factor {} rotates an odd number of "
                      "the {} dimensions (Day0 implements even counts)",
                      cfg.source(), f, spec.head_dim));
    }
  }
  D0_RETURN_IF_ERROR(parse_attention_bias(cfg, spec));
  spec.qk_norm = true;
  D0_RETURN_IF_ERROR(parse_laguna_gating(cfg, spec));
  D0_RETURN_IF_ERROR(parse_laguna_layer_kinds(cfg, spec));

  MoeSpec moe;
  D0_ASSIGN_OR_RETURN(moe.n_experts, cfg.optional_int("num_experts", 256, 1, kMaxExperts));
  D0_ASSIGN_OR_RETURN(moe.experts_per_token, cfg.optional_int("num_experts_per_tok", 8, 1, moe.n_experts));
  D0_ASSIGN_OR_RETURN(moe.expert_intermediate, cfg.optional_int("moe_intermediate_size", 512, 1));
  D0_ASSIGN_OR_RETURN(moe.shared_intermediate, cfg.optional_int("shared_expert_intermediate_size", 512, 0));
  moe.n_shared_experts = moe.shared_intermediate > 0 ? 1 : 0;
  moe.scoring = RouterScoring::kSigmoid;
  moe.topk_method = TopkMethod::kNoauxTc;  // one group: top-k of sigmoid + correction bias
  moe.correction_bias = true;
  moe.norm_topk_prob = true;
  D0_ASSIGN_OR_RETURN(moe.routed_scaling_factor, cfg.optional_double("moe_routed_scaling_factor", 1.0));
  D0_ASSIGN_OR_RETURN(moe.router_logit_softcap, cfg.optional_double("moe_router_logit_softcapping", 0.0));
  if (moe.router_logit_softcap < 0.0) return cfg.mismatch("moe_router_logit_softcapping", "0 or more");
  // LagunaConfig raises NotImplementedError for true; the release's Qwen-style keys are never read.
  D0_RETURN_IF_ERROR(require_released(cfg, "moe_apply_router_weight_on_input", false, kLagunaCode));
  D0_RETURN_IF_ERROR(require_released(cfg, "norm_topk_prob", true, kLagunaCode));
  D0_RETURN_IF_ERROR(require_released(cfg, "decoder_sparse_step", 1, kLagunaCode));
  spec.moe = moe;
  D0_RETURN_IF_ERROR(apply_mlp_layer_types_or_first_dense(cfg, spec));
  if (cfg.present("mlp_only_layers")) {  // the dense layers again, Qwen's spelling: must agree
    D0_ASSIGN_OR_RETURN(std::vector<int64_t> dense, cfg.optional_int_list("mlp_only_layers", 0, kMaxLayers));
    for (int64_t n = 0; n < spec.n_layers; ++n) {
      const bool listed = std::find(dense.begin(), dense.end(), n) != dense.end();
      if (listed == spec.layers[static_cast<size_t>(n)].moe) {
        return unsupported(
            fmt::format("{}: mlp_only_layers disagrees with mlp_layer_types at layer {} (Laguna "
                        "builds the layers from mlp_layer_types)",
                        cfg.source(), n));
      }
    }
  }
  return Status::ok();
}

void write_laguna(const ModelSpec& spec, nlohmann::json& out) {
  const MoeSpec& moe = *spec.moe;
  out["attention_bias"] = spec.qkv_bias;
  out["gating"] = spec.output_gate_per_head ? "per-head" : "per-element";
  out["sliding_window"] = spec.sliding_window > 0 ? spec.sliding_window : 512;
  write_layer_types(spec, out);
  write_rope_by_layer_type(spec, out);
  nlohmann::json heads = nlohmann::json::array(), mlp = nlohmann::json::array();
  for (const LayerSpec& l : spec.layers) {
    heads.push_back(layer_heads(spec, l));
    mlp.push_back(l.moe ? "sparse" : "dense");
  }
  out["num_attention_heads_per_layer"] = heads;
  out["mlp_layer_types"] = mlp;
  out["num_experts"] = moe.n_experts;
  out["num_experts_per_tok"] = moe.experts_per_token;
  out["moe_intermediate_size"] = moe.expert_intermediate;
  out["shared_expert_intermediate_size"] = moe.shared_intermediate;
  out["moe_routed_scaling_factor"] = moe.routed_scaling_factor;
  out["moe_router_logit_softcapping"] = moe.router_logit_softcap;
}

// Weights: Llama's decoder with per-layer q_proj / o_proj rows, q_norm / k_norm and the gate projection
// g_proj ([heads, H] per head, [heads * head_dim, H] per element); MoE layers hold mlp.gate (the router),
// its correction bias under mlp.experts. and the shared expert as mlp.shared_expert. (the names
// transformers saves, conversion_mapping.py), experts one tensor each.
void weights_laguna(const ModelSpec& s, WeightTableBuilder& b) {
  weights::decoder(s, b, [&](WeightTableBuilder& lb, const LayerSpec& layer) {
    const int64_t heads = layer_heads(s, layer);
    lb.add("self_attn.g_proj.weight", {s.output_gate_per_head ? heads : heads * s.head_dim, s.hidden_size},
           WeightStorage::kProjection, TensorRole::kAttention, weights::kColumn, WeightSlot::kAttnGate);
    if (!layer.moe) return weights::dense_mlp(s, lb, "mlp.", layer.dense_intermediate, false);
    weights::router(s, lb, "mlp.gate.weight");
    lb.add("mlp.experts.e_score_correction_bias", {s.moe->n_experts}, WeightStorage::kF32,
           TensorRole::kRouter, weights::kReplicated, WeightSlot::kCorrectionBias);
    weights::separate_experts(s, lb, "mlp.experts.{E}.");
    if (s.moe->shared_intermediate > 0)
      weights::shared_expert(s, lb, "mlp.shared_expert.", s.moe->shared_intermediate);
  });
}

const FamilyRegistrar kFamily({
    .model_types = {"laguna"},
    .architectures = {"LagunaForCausalLM"},
    .summary =
        "GQA with per-layer heads, q/k norm and a softplus gate, sliding layers, soft-capped sigmoid MoE",
    .parse = parse_laguna,
    .write = write_laguna,
    .weights = weights_laguna,
});

}  // namespace
}  // namespace day0::families
