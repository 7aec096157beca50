// Ernie4_5_MoeForCausalLM (Baidu ERNIE 4.5 MoE, 21B-A3B / 300B-A47B): GQA without biases and with
// interleaved RoPE over the whole head, dense SwiGLU layers outside [moe_layer_start_index,
// moe_layer_end_index] (and off the moe_layer_interval grid), MoE layers with a float32 softmax router
// whose correction bias (moe_statics) only selects: top-k of softmax + bias, the unbiased probabilities
// renormalised, cast to the activation dtype; plus moe_num_shared_experts shared experts run as one
// SwiGLU. Embeddings tied by default. Checked against transformers' models/ernie4_5_moe
// (configuration_ernie4_5_moe.py, modeling_ernie4_5_moe.py); its mtp* tensors are dropped on load.
#include <fmt/format.h>

#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {
namespace {

// The released floor of the renormalisation denominator. It only acts when the picked probabilities
// sum below it; at 1e-12 that never happens in practice, and the engine's plain renormalisation gives
// the same weights. A larger floor would change the weights: refused.
constexpr double kReleasedNormMin = 1e-12;

// A layer is a MoE iff (n + 1) % interval == 0 and start <= n <= end (end -1: the last layer).
Status parse_moe_layers(const ConfigReader& cfg, ModelSpec& spec) {
  D0_ASSIGN_OR_RETURN(int64_t start, cfg.optional_int("moe_layer_start_index", 1, 0, kMaxLayers));
  D0_ASSIGN_OR_RETURN(int64_t end, cfg.optional_int("moe_layer_end_index", -1, -1, kMaxLayers));
  D0_ASSIGN_OR_RETURN(int64_t interval, cfg.optional_int("moe_layer_interval", 1, 1, kMaxLayers));
  if (end == -1) end = spec.n_layers - 1;
  for (int64_t n = 0; n < spec.n_layers; ++n) {
    LayerSpec& layer = spec.layers[static_cast<size_t>(n)];
    layer.moe = (n + 1) % interval == 0 && n >= start && n <= end;
    layer.dense_intermediate = layer.moe ? 0 : spec.intermediate_size;
  }
  return Status::ok();
}

// The inverse: the first and last MoE layer and the gap between the first two (a pattern these three
// keys cannot express fails synth's round trip, as it should).
void write_moe_layers(const ModelSpec& spec, nlohmann::json& out) {
  std::vector<int64_t> moe;
  for (int64_t n = 0; n < spec.n_layers; ++n) {
    if (spec.layers[static_cast<size_t>(n)].moe) moe.push_back(n);
  }
  out["moe_layer_start_index"] = moe.empty() ? spec.n_layers : moe.front();
  out["moe_layer_end_index"] = moe.empty() ? spec.n_layers - 1 : moe.back();
  out["moe_layer_interval"] = moe.size() < 2 ? 1 : moe[1] - moe[0];
}

Status parse_ernie4_5_moe(const ConfigReader& cfg, ModelSpec& spec) {
  // The router runs in float32; its top-k weights are cast to the activation dtype before they scale
  // the experts' outputs.
  spec.router_logits_f32 = true;
  FamilyDefaults defaults;  // Ernie4_5_MoeConfig
  defaults.rms_norm_eps = 1e-5;
  defaults.rope_theta = 500000.0;
  defaults.max_position_embeddings = 131072;
  // The class has no dropout key: the attention hard-codes 0.0 and drops in training only.
  defaults.training_only_attention_dropout = true;
  D0_RETURN_IF_ERROR(parse_core(cfg, defaults, spec));
  // Ernie4_5_MoeConfig ties the embeddings unless told otherwise (21B-A3B does, 300B-A47B does not).
  D0_ASSIGN_OR_RETURN(spec.tie_word_embeddings, cfg.optional_bool("tie_word_embeddings", true));
  // The default RoPE rotates the whole head and ignores the factor; the scaled kinds would size their
  // tables from it and no longer match the head: only 1 runs in transformers.
  if (spec.partial_rotary_factor != 1.0) {
    return unsupported(
        fmt::format("{}: partial_rotary_factor: {} is not supported (ERNIE 4.5 rotates "
                    "the whole head; Day0 implements 1)",
                    cfg.source(), spec.partial_rotary_factor));
  }
  spec.rope_layout = RopeLayout::kInterleaved;  // pairs (2i, 2i + 1), computed in float32
  // use_bias also gives lm_head and the shared experts biases, which Day0 does not bind.
  D0_ASSIGN_OR_RETURN(bool use_bias, cfg.optional_bool("use_bias", false));
  if (use_bias) {
    return unsupported(fmt::format(
        "{}: use_bias: true is not supported (biases on every projection, lm_head and the shared experts; "
        "Day0 implements false)",
        cfg.source()));
  }

  MoeSpec moe;
  // attribute_map: num_experts -> moe_num_experts, num_experts_per_tok -> moe_k.
  D0_ASSIGN_OR_RETURN(moe.n_experts,
                      aliased_int(cfg, {"moe_num_experts", "num_experts"}, 1, kMaxExperts, int64_t{64}));
  D0_ASSIGN_OR_RETURN(moe.experts_per_token,
                      aliased_int(cfg, {"moe_k", "num_experts_per_tok"}, 1, moe.n_experts, int64_t{6}));
  D0_ASSIGN_OR_RETURN(moe.expert_intermediate, cfg.optional_int("moe_intermediate_size", 1536, 1));
  D0_ASSIGN_OR_RETURN(moe.n_shared_experts, cfg.optional_int("moe_num_shared_experts", 2, 0, kMaxExperts));
  moe.shared_intermediate = moe.n_shared_experts * moe.expert_intermediate;
  moe.scoring = RouterScoring::kSoftmax;
  moe.topk_method = TopkMethod::kNoauxTc;  // one group: top-k of softmax + correction bias
  moe.correction_bias = true;
  moe.norm_topk_prob = true;
  D0_ASSIGN_OR_RETURN(double norm_min, cfg.optional_double("moe_norm_min", kReleasedNormMin));
  if (!(norm_min >= 0.0 && norm_min <= kReleasedNormMin)) {
    return unsupported(
        fmt::format("{}: moe_norm_min: {} is not supported (Day0 implements a floor of at most "
                    "{}, where it never acts)",
                    cfg.source(), norm_min, kReleasedNormMin));
  }
  spec.moe = moe;
  D0_RETURN_IF_ERROR(parse_moe_layers(cfg, spec));
  // Multi-token prediction: transformers drops the mtp* tensors on load and never runs them.
  ignore_keys(cfg, {"num_nextn_predict_layers"});
  return Status::ok();
}

void write_ernie4_5_moe(const ModelSpec& spec, nlohmann::json& out) {
  const MoeSpec& moe = *spec.moe;
  out["use_bias"] = false;
  out["moe_num_experts"] = moe.n_experts;
  out["moe_k"] = moe.experts_per_token;
  out["moe_intermediate_size"] = moe.expert_intermediate;
  out["moe_num_shared_experts"] = moe.n_shared_experts;
  out["moe_norm_min"] = kReleasedNormMin;
  write_moe_layers(spec, out);
}

// Weights: Llama's attention and dense mlp; a MoE layer has mlp.gate (float32), the correction bias
// mlp.moe_statics.e_score_correction_bias [1, E] (float32), mlp.experts.{E}.* and mlp.shared_experts.*.
void weights_ernie4_5_moe(const ModelSpec& s, WeightTableBuilder& b) {
  const MoeSpec& m = *s.moe;
  weights::decoder(s, b, [&](WeightTableBuilder& lb, const LayerSpec& layer) {
    if (!layer.moe) return weights::dense_mlp(s, lb, "mlp.", layer.dense_intermediate, false);
    weights::router(s, lb, "mlp.gate.weight");
    lb.add("mlp.moe_statics.e_score_correction_bias", {1, m.n_experts}, WeightStorage::kF32,
           TensorRole::kRouter, weights::kReplicated, WeightSlot::kCorrectionBias);
    weights::separate_experts(s, lb, "mlp.experts.{E}.");
    if (m.shared_intermediate > 0)
      weights::shared_expert(s, lb, "mlp.shared_experts.", m.shared_intermediate);
  });
  b.ignore_prefix("model.mtp");  // _keys_to_ignore_on_load_unexpected: any name containing "mtp"
}

const FamilyRegistrar kFamily({
    .model_types = {"ernie4_5_moe"},
    .architectures = {"Ernie4_5_MoeForCausalLM"},
    .summary = "GQA with interleaved RoPE, softmax MoE with a correction bias and shared experts",
    .parse = parse_ernie4_5_moe,
    .write = write_ernie4_5_moe,
    .weights = weights_ernie4_5_moe,
});

}  // namespace
}  // namespace day0::families
