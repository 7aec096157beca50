// AfmoeForCausalLM (Arcee Trinity Nano / Mini / Large): GQA with per-head q/k RMSNorm and a sigmoid output
// gate of its own projection (self_attn.gate_proj, one gate an element), sliding-window layers with RoPE
// and every global_attn_every_n_layers-th layer full attention without RoPE (NoPE), sandwich norms around
// attention and FFN (post_attention_layernorm on the attention output, pre_ / post_mlp_layernorm around the
// FFN), muP input scaling (embeddings x sqrt(hidden) with mup_enabled), num_dense_layers dense SwiGLU
// layers, then a sigmoid MoE: top-k of sigmoid(z) + expert_bias (the bias only selects), the picked
// sigmoids renormalised and x route_scale, plus num_shared_experts shared experts run as one SwiGLU. Every
// RMSNorm applies its gain to the float32 row. Checked against transformers' models/afmoe
// (configuration_afmoe.py, modular_afmoe.py, modeling_afmoe.py).
#include <fmt/format.h>

#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {
namespace {

// Routing keys the release carries that AfmoeTokenChoiceRouter never reads: it hard-codes sigmoid
// scoring, renormalisation and one expert group.
constexpr const char* kAfmoeRouter = "AFMoE (sigmoid, renormalised, one group)";

// layer_types, else global_attn_every_n_layers (default 4): layer i is full attention iff
// (i + 1) % interval == 0; both given must agree. Full-attention layers take no RoPE.
Status parse_afmoe_layer_kinds(const ConfigReader& cfg, ModelSpec& spec) {
  D0_ASSIGN_OR_RETURN(spec.sliding_window, cfg.optional_int("sliding_window", 1024, 1));
  D0_ASSIGN_OR_RETURN(int64_t every, cfg.optional_int("global_attn_every_n_layers", 4, 1, kMaxLayers));
  D0_ASSIGN_OR_RETURN(bool listed, apply_layer_types(cfg, spec));
  for (int64_t i = 0; i < spec.n_layers; ++i) {
    LayerSpec& layer = spec.layers[static_cast<size_t>(i)];
    const bool full = (i + 1) % every == 0;
    if (listed && cfg.present("global_attn_every_n_layers") &&
        full != (layer.mask == AttentionMask::kCausal)) {
      return cfg.invalid("global_attn_every_n_layers",
                         fmt::format("{} disagrees with layer_types[{}]", every, i));
    }
    if (!listed) {
      layer.mask = full ? AttentionMask::kCausal : AttentionMask::kSliding;
      layer.window = full ? 0 : spec.sliding_window;
    }
    layer.use_rope = layer.mask == AttentionMask::kSliding;  // RoPE on the local layers only
  }
  return Status::ok();
}

Status parse_afmoe(const ConfigReader& cfg, ModelSpec& spec) {
  spec.norm_gain_f32 = true;        // AfmoeRMSNorm: (weight * x.float()).to(dtype)
  spec.routing_weights_f32 = true;  // float32 top-k weights scale the expert outputs
  FamilyDefaults defaults;          // AfmoeConfig
  defaults.rms_norm_eps = 1e-5;
  defaults.rope_theta = 10000.0;
  defaults.max_position_embeddings = 16384;
  defaults.head_dim = 128;
  D0_RETURN_IF_ERROR(parse_core(cfg, defaults, spec));
  D0_RETURN_IF_ERROR(parse_attention_bias(cfg, spec));
  spec.qk_norm = true;
  spec.output_gate = OutputGate::kSigmoid;
  spec.sandwich_norms = true;
  D0_ASSIGN_OR_RETURN(spec.embedding_sqrt_scale, cfg.optional_bool("mup_enabled", false));
  D0_RETURN_IF_ERROR(parse_afmoe_layer_kinds(cfg, spec));

  MoeSpec moe;
  D0_ASSIGN_OR_RETURN(moe.n_experts, cfg.optional_int("num_experts", 64, 1, kMaxExperts));
  D0_ASSIGN_OR_RETURN(moe.experts_per_token, cfg.optional_int("num_experts_per_tok", 6, 1, moe.n_experts));
  D0_ASSIGN_OR_RETURN(moe.expert_intermediate, cfg.optional_int("moe_intermediate_size", 1408, 1));
  D0_ASSIGN_OR_RETURN(moe.n_shared_experts, cfg.optional_int("num_shared_experts", 2, 0, kMaxExperts));
  moe.shared_intermediate = moe.n_shared_experts * moe.expert_intermediate;
  moe.scoring = RouterScoring::kSigmoid;
  moe.topk_method = TopkMethod::kNoauxTc;  // one group: top-k of sigmoid + expert_bias
  moe.correction_bias = true;
  moe.norm_topk_prob = true;
  D0_ASSIGN_OR_RETURN(moe.routed_scaling_factor, cfg.optional_double("route_scale", 1.0));
  D0_RETURN_IF_ERROR(require_released(cfg, "score_func", "sigmoid", kAfmoeRouter));
  D0_RETURN_IF_ERROR(require_released(cfg, "route_norm", true, kAfmoeRouter));
  for (const char* key : {"n_group", "topk_group", "num_expert_groups", "num_limited_groups"}) {
    D0_RETURN_IF_ERROR(require_released(cfg, key, 1, kAfmoeRouter));
  }
  // Training-only: the load-balancing update rate and the grouped-GEMM switch of the training code.
  ignore_keys(cfg, {"load_balance_coeff", "use_grouped_mm"});
  spec.moe = moe;
  D0_ASSIGN_OR_RETURN(int64_t dense, cfg.optional_int("num_dense_layers", 1, 0, kMaxLayers));
  for (int64_t n = 0; n < spec.n_layers; ++n) {
    LayerSpec& layer = spec.layers[static_cast<size_t>(n)];
    layer.moe = n >= dense;
    layer.dense_intermediate = layer.moe ? 0 : spec.intermediate_size;
  }
  return Status::ok();
}

void write_afmoe(const ModelSpec& spec, nlohmann::json& out) {
  const MoeSpec& moe = *spec.moe;
  out["attention_bias"] = spec.qkv_bias;
  out["mup_enabled"] = spec.embedding_sqrt_scale;
  out["sliding_window"] = spec.sliding_window > 0 ? spec.sliding_window : 1024;
  write_layer_types(spec, out);
  out["num_dense_layers"] = first_moe_layer(spec);
  out["num_experts"] = moe.n_experts;
  out["num_experts_per_tok"] = moe.experts_per_token;
  out["moe_intermediate_size"] = moe.expert_intermediate;
  out["num_shared_experts"] =
      moe.expert_intermediate > 0 ? moe.shared_intermediate / moe.expert_intermediate : 0;
  out["route_scale"] = moe.routed_scaling_factor;
}

// Weights: Llama's names for the decoder's ends; per layer the four norms, GQA with q_norm / k_norm and
// the gate projection, then a dense mlp.* or the MoE: mlp.router.gate (the router), mlp.expert_bias
// (float32 in the release), mlp.experts.{E}.* (transformers' per-expert save names) and
// mlp.shared_experts.*.
void weights_afmoe(const ModelSpec& s, WeightTableBuilder& b) {
  const int64_t H = s.hidden_size, V = s.vocab_size;
  constexpr auto kNorm = TensorRole::kNorm;
  constexpr auto kF32ok = WeightStorage::kKeptF32;
  b.add("embed_tokens.weight", {V, H}, WeightStorage::kPlain, TensorRole::kEmbedding, weights::kVocab,
        WeightSlot::kEmbedding);
  for (int64_t n = 0; n < s.n_layers; ++n) {
    const LayerSpec& layer = s.layers[static_cast<size_t>(n)];
    b.begin_layer(n);
    b.add("input_layernorm.weight", {H}, kF32ok, kNorm, weights::kReplicated, WeightSlot::kInputNorm);
    weights::gqa_attention(s, b, &layer);
    b.add("self_attn.gate_proj.weight", {layer_heads(s, layer) * s.head_dim, H}, WeightStorage::kProjection,
          TensorRole::kAttention, weights::kColumn, WeightSlot::kAttnGate);
    b.add("post_attention_layernorm.weight", {H}, kF32ok, kNorm, weights::kReplicated,
          WeightSlot::kAttnOutNorm);
    b.add("pre_mlp_layernorm.weight", {H}, kF32ok, kNorm, weights::kReplicated, WeightSlot::kPostNorm);
    b.add("post_mlp_layernorm.weight", {H}, kF32ok, kNorm, weights::kReplicated, WeightSlot::kFfnOutNorm);
    if (!layer.moe) {
      weights::dense_mlp(s, b, "mlp.", layer.dense_intermediate, false);
    } else {
      weights::router(s, b, "mlp.router.gate.weight");
      b.add("mlp.expert_bias", {s.moe->n_experts}, WeightStorage::kF32, TensorRole::kRouter,
            weights::kReplicated, WeightSlot::kCorrectionBias);
      weights::separate_experts(s, b, "mlp.experts.{E}.");
      if (s.moe->shared_intermediate > 0)
        weights::shared_expert(s, b, "mlp.shared_experts.", s.moe->shared_intermediate);
    }
    b.end_layer();
  }
  b.add("norm.weight", {H}, kF32ok, kNorm, weights::kReplicated, WeightSlot::kFinalNorm);
  if (!s.tie_word_embeddings) {
    b.add_absolute("lm_head.weight", {V, H}, WeightStorage::kPlain, TensorRole::kLmHead, weights::kVocab,
                   WeightSlot::kLmHead);
  }
}

const FamilyRegistrar kFamily({
    .model_types = {"afmoe"},
    .architectures = {"AfmoeForCausalLM"},
    .summary = "GQA with q/k norm, a sigmoid output gate and NoPE global layers, sandwich norms, sigmoid MoE",
    .parse = parse_afmoe,
    .write = write_afmoe,
    .weights = weights_afmoe,
});

}  // namespace
}  // namespace day0::families
