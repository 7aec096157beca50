// HYV3ForCausalLM (Tencent HY3, Hy3-preview): GQA with per-head q/k RMSNorm before a half-split RoPE over
// the whole head, biases on q/k/v/o per attention_bias; mlp_layer_types places the MoE (class default:
// layer 0 dense). The MoE routes with a float32 sigmoid router whose correction bias only selects (top-k
// of sigmoid + bias, no groups), the picked sigmoids renormalised (+1e-20) times router_scaling_factor,
// float32 until they scale the expert outputs; num_shared_experts ungated shared experts run as one
// SwiGLU of num_shared_experts x moe_intermediate_size. Checked against transformers' models/hy_v3
// (configuration_hy_v3.py, modular_hy_v3.py, modeling_hy_v3.py) and its conversion_mapping.py entry.
#include <fmt/format.h>

#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {
namespace {

Status parse_hy_v3(const ConfigReader& cfg, ModelSpec& spec) {
  // HYV3TopKRouter: float32 weight and logits; its top-k weights scale the experts in float32.
  spec.router_logits_f32 = true;
  spec.routing_weights_f32 = true;
  FamilyDefaults defaults;  // HYV3Config
  defaults.rms_norm_eps = 1e-5;
  defaults.rope_theta = 11158840.0;
  defaults.max_position_embeddings = 131072;
  defaults.head_dim = 128;
  defaults.training_only_attention_dropout = true;  // HYV3Attention drops in training only
  D0_RETURN_IF_ERROR(parse_core(cfg, defaults, spec));
  // The default rotation spans head_dim and ignores the factor; the scaled kinds would shrink the
  // tables under the head: only 1 runs as transformers does.
  if (spec.partial_rotary_factor != 1.0) {
    return unsupported(
        fmt::format("{}: partial_rotary_factor: {} is not supported (HY3 rotates the whole head; "
                    "Day0 implements 1)",
                    cfg.source(), spec.partial_rotary_factor));
  }
  D0_RETURN_IF_ERROR(parse_attention_bias(cfg, spec));
  spec.qk_norm = true;  // per-head q_norm / k_norm, always built
  // mlp_bias also gives the shared experts biases, which the shared expert block does not bind.
  D0_ASSIGN_OR_RETURN(bool mlp_bias, cfg.optional_bool("mlp_bias", false));
  if (mlp_bias) {
    return unsupported(
        fmt::format("{}: mlp_bias: true is not supported (biases on the dense and shared-expert MLPs; Day0 "
                    "implements false)",
                    cfg.source()));
  }

  MoeSpec moe;
  // attribute_map: num_local_experts -> num_experts.
  D0_ASSIGN_OR_RETURN(moe.n_experts,
                      aliased_int(cfg, {"num_experts", "num_local_experts"}, 1, kMaxExperts, int64_t{192}));
  D0_ASSIGN_OR_RETURN(moe.experts_per_token, cfg.optional_int("num_experts_per_tok", 8, 1, moe.n_experts));
  D0_ASSIGN_OR_RETURN(moe.expert_intermediate, cfg.optional_int("moe_intermediate_size", 1536, 1));
  D0_ASSIGN_OR_RETURN(moe.n_shared_experts, cfg.optional_int("num_shared_experts", 1, 0, kMaxExperts));
  moe.shared_intermediate = moe.n_shared_experts * moe.expert_intermediate;
  moe.scoring = RouterScoring::kSigmoid;
  moe.topk_method = TopkMethod::kNoauxTc;  // one group: top-k of sigmoid + correction bias
  moe.correction_bias = true;
  moe.norm_topk_prob = true;
  D0_ASSIGN_OR_RETURN(moe.routed_scaling_factor, cfg.optional_double("router_scaling_factor", 2.826));
  spec.moe = moe;
  D0_RETURN_IF_ERROR(apply_mlp_layer_types_or_first_dense(cfg, spec));
  // The shared and routed sums meet in float32 (enable_moe_fp32_combine) or in the activation dtype:
  // one rounding of the exact sum of two values of that dtype either way, so both values compute the
  // same and either is accepted.
  D0_ASSIGN_OR_RETURN(bool fp32_combine, cfg.optional_bool("enable_moe_fp32_combine", true));
  (void)fp32_combine;
  // The release's MTP layer (model.layers.{num_hidden_layers}) is dropped on load by transformers.
  D0_ASSIGN_OR_RETURN(spec.n_mtp_layers, cfg.optional_int("num_nextn_predict_layers", 0, 0, 64));
  return Status::ok();
}

void write_hy_v3(const ModelSpec& spec, nlohmann::json& out) {
  const MoeSpec& moe = *spec.moe;
  out["attention_bias"] = spec.qkv_bias;
  out["mlp_bias"] = false;
  out["num_experts"] = moe.n_experts;
  out["num_experts_per_tok"] = moe.experts_per_token;
  out["moe_intermediate_size"] = moe.expert_intermediate;
  out["num_shared_experts"] = moe.n_shared_experts;
  out["router_scaling_factor"] = moe.routed_scaling_factor;
  out["enable_moe_fp32_combine"] = true;
  nlohmann::json types = nlohmann::json::array();
  for (const LayerSpec& l : spec.layers) types.push_back(l.moe ? "sparse" : "dense");
  out["mlp_layer_types"] = types;
  if (spec.n_mtp_layers > 0) out["num_nextn_predict_layers"] = spec.n_mtp_layers;
}

// One layer's FFN under the release's names (what transformers' save writes back): a dense mlp, or
// mlp.router.gate (float32), mlp.expert_bias (float32, [E]), mlp.experts.{E}.* and mlp.shared_mlp.*.
void hy_v3_ffn(const ModelSpec& s, WeightTableBuilder& lb, const LayerSpec& layer) {
  if (!layer.moe) return weights::dense_mlp(s, lb, "mlp.", layer.dense_intermediate, false);
  const MoeSpec& m = *s.moe;
  weights::router(s, lb, "mlp.router.gate.weight");
  lb.add("mlp.expert_bias", {m.n_experts}, WeightStorage::kF32, TensorRole::kRouter, weights::kReplicated,
         WeightSlot::kCorrectionBias);
  weights::separate_experts(s, lb, "mlp.experts.{E}.");
  if (m.shared_intermediate > 0) weights::shared_expert(s, lb, "mlp.shared_mlp.", m.shared_intermediate);
}

// Weights: the decoder, then the release's MTP layers (model.layers.{n_layers + k}): a MoE decoder layer
// plus enorm, hnorm, eh_proj and final_layernorm, sharing the embedding and the head. Verified, not
// counted or decoded (transformers drops them on load).
void weights_hy_v3(const ModelSpec& s, WeightTableBuilder& b) {
  const weights::LayerFfn ffn = [&](WeightTableBuilder& lb, const LayerSpec& l) { hy_v3_ffn(s, lb, l); };
  weights::decoder(s, b, ffn);
  const int64_t H = s.hidden_size;
  LayerSpec mtp_layer = s.layers.back();
  mtp_layer.moe = true;
  for (int64_t k = 0; k < s.n_mtp_layers; ++k) {
    b.begin_layer(s.n_layers + k);
    b.add("enorm.weight", {H}, WeightStorage::kKeptF32, TensorRole::kNorm, weights::kReplicated,
          WeightSlot::kNone);
    b.add("hnorm.weight", {H}, WeightStorage::kKeptF32, TensorRole::kNorm, weights::kReplicated,
          WeightSlot::kNone);
    b.add("eh_proj.weight", {H, 2 * H}, WeightStorage::kProjection, TensorRole::kAttention,
          weights::kReplicated, WeightSlot::kNone);
    b.add("final_layernorm.weight", {H}, WeightStorage::kKeptF32, TensorRole::kNorm, weights::kReplicated,
          WeightSlot::kNone);
    weights::decoder_layer(s, b, mtp_layer, ffn);
    b.end_layer();
  }
}

const FamilyRegistrar kFamily({
    .model_types = {"hy_v3"},
    .architectures = {"HYV3ForCausalLM"},
    .summary = "GQA with per-head q/k norm, sigmoid MoE with a correction bias, scaling and a shared expert",
    .parse = parse_hy_v3,
    .write = write_hy_v3,
    .weights = weights_hy_v3,
});

}  // namespace
}  // namespace day0::families
