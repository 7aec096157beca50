// GptOssForCausalLM: GQA with biases and learned attention sinks, alternating sliding (128) / full
// layers, YaRN RoPE, and every FFN a top-k-on-logits MoE with biased, clamped SwiGLU experts
// (MXFP4 in the release).
#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {

Status parse_gpt_oss(const ConfigReader& cfg, ModelSpec& spec) {
  // RMSNorm gains apply in float32 to the normed row, then one cast.
  spec.norm_gain_f32 = true;
  FamilyDefaults defaults;
  defaults.rms_norm_eps = 1e-5;
  defaults.rope_theta = 150000.0;
  defaults.max_position_embeddings = 131072;
  defaults.head_dim = 64;
  D0_RETURN_IF_ERROR(parse_core(cfg, defaults, spec));
  if (!cfg.contains("rope_scaling") && !cfg.contains("rope_parameters")) {
    // GptOssConfig's default RoPE: YaRN x32 over a 4096-token original context, no truncation.
    spec.rope.type = RopeType::kYarn;
    spec.rope.factor = 32.0;
    spec.rope.original_max_position = 4096;
    spec.rope.truncate = false;
  }
  D0_ASSIGN_OR_RETURN(bool bias, cfg.optional_bool("attention_bias", true));
  spec.qkv_bias = bias;
  spec.o_bias = bias;
  spec.attention_sinks = true;
  MoeSpec moe;
  D0_ASSIGN_OR_RETURN(moe.n_experts, aliased_int(cfg, {"num_local_experts", "num_experts"}, 1, kMaxExperts));
  D0_ASSIGN_OR_RETURN(int64_t legacy_k, cfg.optional_int("experts_per_token", 4, 1, moe.n_experts));
  D0_ASSIGN_OR_RETURN(moe.experts_per_token,
                      cfg.optional_int("num_experts_per_tok", legacy_k, 1, moe.n_experts));
  moe.expert_intermediate = spec.intermediate_size;
  moe.topk_method = TopkMethod::kLogitsThenSoftmax;
  moe.router_bias = true;
  moe.expert_bias = true;
  D0_ASSIGN_OR_RETURN(moe.swiglu_limit, cfg.optional_double("swiglu_limit", 7.0));
  // The clamped SwiGLU's sigmoid slope: x * sigmoid(alpha * x); the experts kernel takes any value.
  D0_ASSIGN_OR_RETURN(moe.swiglu_alpha, cfg.optional_double("swiglu_alpha", 1.702));
  if (!(moe.swiglu_alpha > 0.0)) return cfg.mismatch("swiglu_alpha", "a positive number");
  // The pre-YaRN context length, for information: rope_scaling carries the one the math uses.
  ignore_keys(cfg, {"initial_context_length"});
  spec.moe = moe;
  if (spec.weights.format == WeightFormat::kMxfp4 && spec.hidden_size % 32 != 0) {
    return cfg.invalid("hidden_size", "must be a multiple of 32 for MXFP4 experts");
  }
  if (spec.weights.format == WeightFormat::kMxfp4 && moe.expert_intermediate % 32 != 0) {
    return cfg.invalid("intermediate_size", "must be a multiple of 32 for MXFP4 experts");
  }
  for (auto& layer : spec.layers) {
    layer.moe = true;
    layer.dense_intermediate = 0;
  }
  D0_ASSIGN_OR_RETURN(spec.sliding_window, cfg.optional_int("sliding_window", 128, 1));
  D0_ASSIGN_OR_RETURN(bool listed, apply_layer_types(cfg, spec));
  if (!listed) {
    for (size_t n = 0; n < spec.layers.size(); n += 2) {
      spec.layers[n].mask = AttentionMask::kSliding;
      spec.layers[n].window = spec.sliding_window;
    }
  }
  return Status::ok();
}

void write_gpt_oss(const ModelSpec& spec, nlohmann::json& out) {
  out["attention_bias"] = spec.qkv_bias;
  out["num_local_experts"] = spec.moe->n_experts;
  out["num_experts_per_tok"] = spec.moe->experts_per_token;
  out["experts_per_token"] = spec.moe->experts_per_token;
  out["intermediate_size"] = spec.moe->expert_intermediate;
  out["swiglu_limit"] = spec.moe->swiglu_limit;
  out["swiglu_alpha"] = spec.moe->swiglu_alpha;
  out["sliding_window"] = spec.sliding_window;
  write_layer_types(spec, out);
}

// Weights: `mlp.router` (+ bias) and fused experts: MXFP4 `gate_up_proj_blocks` / `_scales` [E, 2I, H/32,
// 16] (gate at even rows) and `down_proj_*`, or dequantised x @ W `gate_up_proj` [E, H, 2I] and
// `down_proj` [E, I, H]; bias [E, 2I] / [E, H] either way.
void weights_gpt_oss(const ModelSpec& s, WeightTableBuilder& b) {
  const int64_t H = s.hidden_size, I = s.moe->expert_intermediate, E = s.moe->n_experts;
  const auto role = TensorRole::kRoutedExpert;
  const auto experts = weights::kStackedExperts;
  weights::decoder(s, b, [&](WeightTableBuilder& lb, const LayerSpec&) {
    weights::router(s, lb, "mlp.router.weight", /*bias=*/true);
    if (s.weights.format == WeightFormat::kMxfp4) {
      lb.add("mlp.experts.gate_up_proj_blocks", {E, 2 * I, H / 32, 16}, WeightStorage::kMxfp4Blocks, role,
             experts, WeightSlot::kExpertsGateUpMxfp4);
      lb.add("mlp.experts.gate_up_proj_scales", {E, 2 * I, H / 32}, WeightStorage::kMxfp4Scales, role,
             experts, WeightSlot::kNone);
      lb.add("mlp.experts.gate_up_proj_bias", {E, 2 * I}, WeightStorage::kPlain, role, experts,
             WeightSlot::kExpertsGateUpBias);
      lb.add("mlp.experts.down_proj_blocks", {E, H, I / 32, 16}, WeightStorage::kMxfp4Blocks, role, experts,
             WeightSlot::kExpertsDownMxfp4);
      lb.add("mlp.experts.down_proj_scales", {E, H, I / 32}, WeightStorage::kMxfp4Scales, role, experts,
             WeightSlot::kNone);
    } else {
      lb.add("mlp.experts.gate_up_proj", {E, H, 2 * I}, WeightStorage::kPlain, role, experts,
             WeightSlot::kExpertsGateUpInterleaved);
      lb.add("mlp.experts.gate_up_proj_bias", {E, 2 * I}, WeightStorage::kPlain, role, experts,
             WeightSlot::kExpertsGateUpBias);
      lb.add("mlp.experts.down_proj", {E, I, H}, WeightStorage::kPlain, role, experts,
             WeightSlot::kExpertsDown);
    }
    lb.add("mlp.experts.down_proj_bias", {E, H}, WeightStorage::kPlain, role, experts,
           WeightSlot::kExpertsDownBias);
  });
}

const FamilyRegistrar kFamily({
    .model_types = {"gpt_oss"},
    .architectures = {"GptOssForCausalLM"},
    .summary = "GQA with sinks and alternating sliding windows, MXFP4 MoE of clamped SwiGLU experts",
    .mxfp4_experts = true,
    .parse = parse_gpt_oss,
    .write = write_gpt_oss,
    .weights = weights_gpt_oss,
});

}  // namespace day0::families
