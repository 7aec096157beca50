// Qwen3.5 (Qwen3_5ForCausalLM, model_type qwen3_5_text) and Qwen3.5-MoE (Qwen3_5MoeForCausalLM,
// qwen3_5_moe_text): Qwen3-Next's hybrid, three Gated DeltaNet layers to one gated full-attention layer, with
// its zero-centred RMSNorms (gain 1 + w, applied in float32) and per-head q / k norms. What differs:
//  - the Gated DeltaNet's input projections are separate: in_proj_qkv ([q | k | v] of all heads, the conv's
//    channel order, no per-key-head grouping), in_proj_z, in_proj_b and in_proj_a;
//  - the RoPE is the multimodal model's 3-section interleaved mRoPE (rope_parameters' mrope_section,
//    mrope_interleaved). A text-only prompt gives every token the same temporal, height and width position
//    (its index), so each section rotates by that one position: ordinary RoPE over head_dim x
//    partial_rotary_factor (0.25 by default) dimensions, which is what runs here;
//  - the dense family has a SwiGLU MLP in every layer; the MoE family a softmax top-k MoE, always
//    renormalised, with a sigmoid-gated shared expert in every layer (no mlp_only_layers / sparse step);
//  - the releases are the image-text wrappers Qwen3_5[Moe]ForConditionalGeneration: the text model under
//    model.language_model., the head at lm_head, the vision tower model.visual.* (not run: token ids only).
// The multi-token-prediction module (mtp.*; mtp_num_hidden_layers, a key the releases carry and transformers
// does not read) is verified and counted apart when declared, dropped on load as transformers does.
#include <fmt/format.h>

#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {
namespace {

constexpr const char* kImplementation = "transformers' Qwen3.5";

// The mRoPE keys inside the rope object parse_rope read (rope_parameters, or v4's rope_scaling): checked,
// never applied (text-only positions make all three sections equal).
Status parse_mrope(const ConfigReader& cfg) {
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    D0_ASSIGN_OR_RETURN(std::optional<ConfigReader> rope, cfg.optional_object(key));
    if (!rope) continue;
    D0_ASSIGN_OR_RETURN(std::vector<int64_t> sections, rope->optional_int_list("mrope_section", 0, 1 << 20));
    if (rope->present("mrope_section") && sections.size() != 3) {
      return rope->mismatch("mrope_section", "three sections (temporal, height, width)");
    }
    D0_ASSIGN_OR_RETURN(bool interleaved, rope->optional_bool("mrope_interleaved", true));
    static_cast<void>(interleaved);
    return Status::ok();
  }
  return Status::ok();
}

Status parse_qwen3_5_common(const ConfigReader& cfg, bool moe_family, ModelSpec& spec) {
  spec.norm_gain_f32 = true;  // (1 + w) times the float32 normed row, then one cast
  FamilyDefaults defaults;    // Qwen3_5TextConfig / Qwen3_5MoeTextConfig
  defaults.rms_norm_eps = 1e-6;
  defaults.rope_theta = 10000.0;
  defaults.max_position_embeddings = 32768;
  defaults.head_dim = 256;
  defaults.partial_rotary_factor = 0.25;
  defaults.require_intermediate = !moe_family;  // the MoE class has no dense MLP and no intermediate_size
  D0_RETURN_IF_ERROR(parse_core(cfg, defaults, spec));
  D0_RETURN_IF_ERROR(parse_attention_bias(cfg, spec));
  D0_RETURN_IF_ERROR(parse_mrope(cfg));
  spec.qk_norm = true;
  spec.attention_output_gate = true;
  spec.zero_centered_norms = true;
  D0_RETURN_IF_ERROR(parse_gated_deltanet(cfg, spec));
  // Switches the releases carry and transformers hard-codes: the gated attention, a float32 recurrent state.
  D0_RETURN_IF_ERROR(require_released(cfg, "attn_output_gate", true, kImplementation));
  D0_RETURN_IF_ERROR(require_released(cfg, "mamba_ssm_dtype", "float32", kImplementation));
  D0_ASSIGN_OR_RETURN(spec.n_mtp_layers, cfg.optional_int("mtp_num_hidden_layers", 0, 0, 64));
  D0_RETURN_IF_ERROR(require_released(cfg, "mtp_use_dedicated_embeddings", false, kImplementation));
  if (!moe_family) return Status::ok();

  // transformers ignores an intermediate_size here (no layer is dense).
  D0_ASSIGN_OR_RETURN(spec.intermediate_size, cfg.optional_int("intermediate_size", 0, 0));
  MoeSpec moe;
  D0_ASSIGN_OR_RETURN(moe.n_experts, cfg.optional_int("num_experts", 256, 1, kMaxExperts));
  D0_ASSIGN_OR_RETURN(moe.experts_per_token, cfg.optional_int("num_experts_per_tok", 8, 1, moe.n_experts));
  D0_ASSIGN_OR_RETURN(moe.expert_intermediate, cfg.optional_int("moe_intermediate_size", 512, 1));
  D0_ASSIGN_OR_RETURN(moe.shared_intermediate, cfg.optional_int("shared_expert_intermediate_size", 512, 1));
  moe.n_shared_experts = 1;
  moe.shared_expert_gate = true;
  moe.norm_topk_prob = true;  // the router always renormalises its top-k
  D0_RETURN_IF_ERROR(require_released(cfg, "norm_topk_prob", true, kImplementation));
  spec.moe = moe;
  for (LayerSpec& layer : spec.layers) {
    layer.moe = true;
    layer.dense_intermediate = 0;
  }
  return Status::ok();
}

Status parse_qwen3_5(const ConfigReader& cfg, ModelSpec& spec) {
  return parse_qwen3_5_common(cfg, false, spec);
}

Status parse_qwen3_5_moe(const ConfigReader& cfg, ModelSpec& spec) {
  return parse_qwen3_5_common(cfg, true, spec);
}

void write_qwen3_5(const ModelSpec& spec, nlohmann::json& out) {
  out["attention_bias"] = spec.qkv_bias;
  out["partial_rotary_factor"] = spec.partial_rotary_factor;
  write_gated_deltanet(spec, out);
  if (spec.n_mtp_layers > 0) out["mtp_num_hidden_layers"] = spec.n_mtp_layers;
  if (!spec.moe) return;
  if (spec.intermediate_size == 0) out.erase("intermediate_size");
  out["num_experts"] = spec.moe->n_experts;
  out["num_experts_per_tok"] = spec.moe->experts_per_token;
  out["moe_intermediate_size"] = spec.moe->expert_intermediate;
  out["shared_expert_intermediate_size"] = spec.moe->shared_intermediate;
}

// One Gated DeltaNet layer's linear_attn.*: the separate projections (in_proj_qkv is bound as three row
// views, q / k by key heads and v by value heads, so that tensor parallelism splits each by heads), the
// depthwise conv [C, 1, K], dt_bias / A_log [n_v], the gated norm [d_v] and out_proj.
void gated_deltanet_weights(const ModelSpec& s, WeightTableBuilder& b) {
  const LinearAttentionSpec& la = *s.linear_attention;
  const int64_t H = s.hidden_size, nv = la.n_value_heads;
  constexpr auto kAttn = TensorRole::kAttention;
  constexpr auto kProj = WeightStorage::kProjection;
  constexpr auto kF32ok = WeightStorage::kKeptF32;
  const std::string p = "linear_attn.";
  b.add(p + "in_proj_qkv.weight", {la.conv_channels(), H}, kProj, kAttn, weights::kColumn,
        WeightSlot::kLinearQkv);
  b.add(p + "in_proj_z.weight", {la.value_dim(), H}, kProj, kAttn, weights::kColumn, WeightSlot::kLinearZ);
  b.add(p + "in_proj_b.weight", {nv, H}, kProj, kAttn, weights::kColumn, WeightSlot::kLinearB);
  b.add(p + "in_proj_a.weight", {nv, H}, kProj, kAttn, weights::kColumn, WeightSlot::kLinearA);
  b.add(p + "conv1d.weight", {la.conv_channels(), 1, la.conv_kernel}, kF32ok, kAttn, weights::kColumn,
        WeightSlot::kLinearConv);
  b.add(p + "dt_bias", {nv}, kF32ok, kAttn, weights::kColumn, WeightSlot::kLinearDtBias);
  b.add(p + "A_log", {nv}, kF32ok, kAttn, weights::kColumn, WeightSlot::kLinearALog);
  b.add(p + "norm.weight", {la.value_head_dim}, kF32ok, TensorRole::kNorm, weights::kReplicated,
        WeightSlot::kLinearNorm);
  b.add(p + "out_proj.weight", {H, la.value_dim()}, kProj, kAttn, weights::kRow, WeightSlot::kLinearOut);
}

// One decoder layer in the current scope: zero-centred norms around the token mixer and the FFN.
void qwen3_5_layer(const ModelSpec& s, WeightTableBuilder& b, const LayerSpec& layer) {
  const int64_t H = s.hidden_size;
  constexpr auto kF32ok = WeightStorage::kKeptF32;
  b.add("input_layernorm.weight", {H}, kF32ok, TensorRole::kNorm, weights::kReplicated,
        WeightSlot::kInputNorm);
  if (layer.linear_attention) {
    gated_deltanet_weights(s, b);
  } else {
    weights::gqa_attention(s, b);
  }
  b.add("post_attention_layernorm.weight", {H}, kF32ok, TensorRole::kNorm, weights::kReplicated,
        WeightSlot::kPostNorm);
  qwen_moe_ffn(s, b, layer);
}

// Where checkpoints hold the table's tensors: an image-text wrapper's text model under model.language_model.
// and its head at lm_head; the BF16 MoE releases stack each layer's experts (experts.gate_up_proj
// [E, 2I, H], gate rows then up rows per expert, and experts.down_proj [E, H, I], transformers' in-memory
// form), where transformers' save and the FP8 releases write one tensor per expert (the table's names).
void stored_layouts(const ModelSpec& s, WeightTableBuilder& b) {
  // An image-text save holds the text model under model.language_model.; Qwen3_5[Moe]ForCausalLM loads
  // that too (transformers strips the prefix and drops model.visual.*).
  std::vector<NameRename> wrapper;
  if (s.multimodal_wrapper) {
    wrapper.push_back({"language_model.model.", "model.language_model.", true});
    wrapper.push_back({"language_model.lm_head.", "lm_head.", true});
  } else {
    wrapper.push_back({"model.", "model.language_model.", true});
  }
  b.ignore_prefix("model.visual.");
  const bool fp8 = s.weights.format == WeightFormat::kFp8Block;
  if (s.moe) {
    const int64_t E = s.moe->n_experts;
    const std::vector<FusedRows> stacked = {
        {{"experts.{E}.gate_proj.weight", "experts.{E}.up_proj.weight"}, "experts.gate_up_proj", E},
        {{"experts.{E}.down_proj.weight"}, "experts.down_proj", E}};
    b.stored_layout({.name = "Qwen3.5-MoE image-text names, stacked experts",
                     .renames = wrapper,
                     .fused = stacked,
                     .release = s.multimodal_wrapper && !fp8});
    if (!s.multimodal_wrapper) b.stored_layout({.name = "Qwen3.5-MoE stacked experts", .fused = stacked});
  }
  b.stored_layout({.name = "Qwen3.5 image-text names",
                   .renames = wrapper,
                   .release = s.multimodal_wrapper && (!s.moe || fp8)});
}

// Weights: embed_tokens, the layers, norm, lm_head (absent when tied); then, when the config declares it,
// the MTP module: mtp.fc [H, 2H] over the normed [embedding | hidden], its three norms and mtp.layers.{k}, a
// gated full-attention layer with the family's FFN. A wrapper's text model is stored under
// model.language_model. and its head at lm_head (a release layout of the table's language_model.* names).
void weights_qwen3_5(const ModelSpec& s, WeightTableBuilder& b) {
  const int64_t H = s.hidden_size, V = s.vocab_size;
  constexpr auto kF32ok = WeightStorage::kKeptF32;
  b.add("embed_tokens.weight", {V, H}, WeightStorage::kPlain, TensorRole::kEmbedding, weights::kVocab,
        WeightSlot::kEmbedding);
  for (int64_t n = 0; n < s.n_layers; ++n) {
    b.begin_layer(n);
    qwen3_5_layer(s, b, s.layers[static_cast<size_t>(n)]);
    b.end_layer();
  }
  b.add("norm.weight", {H}, kF32ok, TensorRole::kNorm, weights::kReplicated, WeightSlot::kFinalNorm);
  if (!s.tie_word_embeddings) {
    b.add_absolute(s.multimodal_wrapper ? "language_model.lm_head.weight" : "lm_head.weight", {V, H},
                   WeightStorage::kPlain, TensorRole::kLmHead, weights::kVocab, WeightSlot::kLmHead);
  }
  stored_layouts(s, b);
  if (s.n_mtp_layers == 0) return b.ignore_prefix("mtp.");
  const auto norm = [&](const char* name) {
    b.add(name, {H}, kF32ok, TensorRole::kNorm, weights::kReplicated, WeightSlot::kNone);
  };
  b.begin_mtp_scope(s.n_layers, "mtp.");
  b.add("fc.weight", {H, 2 * H}, WeightStorage::kProjection, TensorRole::kAttention, weights::kReplicated,
        WeightSlot::kNone);
  norm("pre_fc_norm_embedding.weight");
  norm("pre_fc_norm_hidden.weight");
  norm("norm.weight");
  LayerSpec mtp_layer = s.layers.back();
  mtp_layer.linear_attention = false;
  for (int64_t k = 0; k < s.n_mtp_layers; ++k) {
    b.begin_mtp_scope(s.n_layers + k, fmt::format("mtp.layers.{}.", k));
    qwen3_5_layer(s, b, mtp_layer);
  }
  b.end_layer();
}

const FamilyRegistrar kDense({
    .model_types = {"qwen3_5_text", "qwen3_5"},
    .architectures = {"Qwen3_5ForCausalLM"},
    .summary = "Gated DeltaNet (separate q/k/v, z, b, a projections) with gated attention every 4th, dense",
    .wrapper_architectures = {"Qwen3_5ForConditionalGeneration"},
    .parse = parse_qwen3_5,
    .write = write_qwen3_5,
    .weights = weights_qwen3_5,
});

const FamilyRegistrar kMoe({
    .model_types = {"qwen3_5_moe_text", "qwen3_5_moe"},
    .architectures = {"Qwen3_5MoeForCausalLM"},
    .summary = "Qwen3.5's Gated DeltaNet and gated attention, softmax top-k MoE plus a gated shared expert",
    .wrapper_architectures = {"Qwen3_5MoeForConditionalGeneration"},
    .parse = parse_qwen3_5_moe,
    .write = write_qwen3_5,
    .weights = weights_qwen3_5,
});

}  // namespace
}  // namespace day0::families
