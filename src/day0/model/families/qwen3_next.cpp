// Qwen3NextForCausalLM (Qwen3-Next-80B-A3B): hybrid layers. "linear_attention" layers are Gated DeltaNet
// (in_proj_qkvz / in_proj_ba grouped per key head, causal depthwise conv with silu, L2-normed q / k, the
// gated delta rule over a per-sequence float32 state, gated RMSNorm with silu(z), out_proj);
// "full_attention" layers are gated GQA (q_proj gives query and gate per head, zero-centred per-head q / k
// norms, partial RoPE, output times sigmoid(gate)). Every other RMSNorm is zero-centred (gain 1 + w). The
// FFN is Qwen's softmax top-k MoE with a sigmoid-gated shared expert (mlp_only_layers /
// decoder_sparse_step, as Qwen2-MoE). transformers 4 saves full_attention_interval, 5 an explicit
// layer_types; the multi-token-prediction module mtp.* is dropped on load.
#include <fmt/format.h>

#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {

namespace {

// layer_types (transformers 5, and 4 beside the interval) or full_attention_interval (the release's
// v4 spelling, default 4): layer i is full attention iff (i + 1) % interval == 0. Both given must agree.
Status parse_layer_kinds(const ConfigReader& cfg, ModelSpec& spec) {
  D0_ASSIGN_OR_RETURN(int64_t interval, cfg.optional_int("full_attention_interval", 4, 1, kMaxLayers));
  D0_ASSIGN_OR_RETURN(std::vector<std::string> types, cfg.optional_string_list("layer_types"));
  if (!types.empty() && static_cast<int64_t>(types.size()) != spec.n_layers) {
    return cfg.invalid("layer_types", fmt::format("expected {} entries (num_hidden_layers), found {}",
                                                  spec.n_layers, types.size()));
  }
  for (int64_t i = 0; i < spec.n_layers; ++i) {
    bool linear = (i + 1) % interval != 0;
    if (!types.empty()) {
      const std::string& t = types[static_cast<size_t>(i)];
      if (t != "linear_attention" && t != "full_attention") {
        return cfg.mismatch(fmt::format("layer_types[{}]", i), "\"linear_attention\" or \"full_attention\"");
      }
      if (cfg.present("full_attention_interval") && (t == "linear_attention") != linear) {
        return cfg.invalid("full_attention_interval",
                           fmt::format("{} disagrees with layer_types[{}] = \"{}\"", interval, i, t));
      }
      linear = t == "linear_attention";
    }
    spec.layers[static_cast<size_t>(i)].linear_attention = linear;
  }
  return Status::ok();
}

}  // namespace

Status parse_gated_deltanet(const ConfigReader& cfg, ModelSpec& spec) {
  LinearAttentionSpec la;
  D0_ASSIGN_OR_RETURN(la.conv_kernel, cfg.optional_int("linear_conv_kernel_dim", 4, 1, 1024));
  D0_ASSIGN_OR_RETURN(la.key_head_dim, cfg.optional_int("linear_key_head_dim", 128, 1));
  D0_ASSIGN_OR_RETURN(la.value_head_dim, cfg.optional_int("linear_value_head_dim", 128, 1));
  D0_ASSIGN_OR_RETURN(la.n_key_heads, cfg.optional_int("linear_num_key_heads", 16, 1));
  D0_ASSIGN_OR_RETURN(la.n_value_heads, cfg.optional_int("linear_num_value_heads", 32, 1));
  if (la.n_value_heads % la.n_key_heads != 0) {
    return cfg.invalid(
        "linear_num_value_heads",
        fmt::format("{} is not a multiple of linear_num_key_heads ({})", la.n_value_heads, la.n_key_heads));
  }
  spec.linear_attention = la;
  return parse_layer_kinds(cfg, spec);
}

void write_gated_deltanet(const ModelSpec& spec, nlohmann::json& out) {
  const LinearAttentionSpec& la = *spec.linear_attention;
  out["linear_conv_kernel_dim"] = la.conv_kernel;
  out["linear_key_head_dim"] = la.key_head_dim;
  out["linear_value_head_dim"] = la.value_head_dim;
  out["linear_num_key_heads"] = la.n_key_heads;
  out["linear_num_value_heads"] = la.n_value_heads;
  nlohmann::json types = nlohmann::json::array();
  for (const LayerSpec& l : spec.layers)
    types.push_back(l.linear_attention ? "linear_attention" : "full_attention");
  out["layer_types"] = types;
}

Status parse_qwen3_next(const ConfigReader& cfg, ModelSpec& spec) {
  // RMSNorm gains apply in float32 to the normed row, then one cast.
  spec.norm_gain_f32 = true;
  FamilyDefaults defaults;  // Qwen3NextConfig
  defaults.rms_norm_eps = 1e-6;
  defaults.rope_theta = 10000.0;
  defaults.max_position_embeddings = 32768;
  defaults.head_dim = 256;
  defaults.partial_rotary_factor = 0.25;
  D0_RETURN_IF_ERROR(parse_core(cfg, defaults, spec));
  D0_RETURN_IF_ERROR(parse_attention_bias(cfg, spec));
  spec.qk_norm = true;
  spec.attention_output_gate = true;
  spec.zero_centered_norms = true;

  D0_RETURN_IF_ERROR(parse_gated_deltanet(cfg, spec));

  // Layer i is MoE iff num_experts > 0, i not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0.
  D0_ASSIGN_OR_RETURN(int64_t n_experts, cfg.optional_int("num_experts", 512, 0, kMaxExperts));
  if (n_experts > 0) {
    MoeSpec moe;
    moe.n_experts = n_experts;
    D0_ASSIGN_OR_RETURN(moe.experts_per_token, cfg.optional_int("num_experts_per_tok", 10, 1, n_experts));
    D0_ASSIGN_OR_RETURN(moe.expert_intermediate, cfg.optional_int("moe_intermediate_size", 512, 1));
    // The sparse block always holds the shared expert and its gate.
    D0_ASSIGN_OR_RETURN(moe.shared_intermediate, cfg.optional_int("shared_expert_intermediate_size", 512, 1));
    moe.n_shared_experts = 1;
    moe.shared_expert_gate = true;
    D0_ASSIGN_OR_RETURN(moe.norm_topk_prob, cfg.optional_bool("norm_topk_prob", true));
    spec.moe = moe;
  } else {
    ignore_keys(cfg, {"num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size",
                      "norm_topk_prob"});
  }
  return parse_qwen_moe_layers(cfg, spec);
}

void write_qwen3_next(const ModelSpec& spec, nlohmann::json& out) {
  out["attention_bias"] = spec.qkv_bias;
  out["partial_rotary_factor"] = spec.partial_rotary_factor;
  write_gated_deltanet(spec, out);
  out["num_experts"] = spec.moe ? spec.moe->n_experts : 0;
  if (spec.moe) {
    out["num_experts_per_tok"] = spec.moe->experts_per_token;
    out["moe_intermediate_size"] = spec.moe->expert_intermediate;
    out["shared_expert_intermediate_size"] = spec.moe->shared_intermediate;
    out["norm_topk_prob"] = spec.moe->norm_topk_prob;
  }
  write_qwen_moe_layers(spec, out);
}

// Weights: per layer either linear_attn.* (Gated DeltaNet) or gated self_attn.* (q_proj twice the query
// rows), beside zero-centred input / post-attention norms and the Qwen MoE FFN. The small GDN tensors
// (conv, A_log, dt_bias, norm) are often kept in float32. mtp.* (multi-token prediction) is ignored.
void weights_qwen3_next(const ModelSpec& s, WeightTableBuilder& b) {
  const LinearAttentionSpec& la = *s.linear_attention;
  const int64_t H = s.hidden_size, V = s.vocab_size, nv = la.n_value_heads;
  constexpr auto kAttn = TensorRole::kAttention;
  constexpr auto kF32ok = WeightStorage::kKeptF32;
  b.add("embed_tokens.weight", {V, H}, WeightStorage::kPlain, TensorRole::kEmbedding, weights::kVocab,
        WeightSlot::kEmbedding);
  for (int64_t n = 0; n < s.n_layers; ++n) {
    const LayerSpec& layer = s.layers[static_cast<size_t>(n)];
    b.begin_layer(n);
    b.add("input_layernorm.weight", {H}, kF32ok, TensorRole::kNorm, weights::kReplicated,
          WeightSlot::kInputNorm);
    if (layer.linear_attention) {
      const std::string p = "linear_attn.";
      b.add(p + "in_proj_qkvz.weight", {2 * la.key_dim() + 2 * la.value_dim(), H}, WeightStorage::kProjection,
            kAttn, weights::kColumn, WeightSlot::kLinearQkvz);
      b.add(p + "in_proj_ba.weight", {2 * nv, H}, WeightStorage::kProjection, kAttn, weights::kColumn,
            WeightSlot::kLinearBa);
      // Under TP by key heads: the conv's q, k and v channels of this rank's heads (three runs), the
      // per-value-head dt_bias and A_log; the per-head norm whole.
      b.add(p + "conv1d.weight", {la.conv_channels(), 1, la.conv_kernel}, kF32ok, kAttn, weights::kColumn,
            WeightSlot::kLinearConv);
      b.add(p + "dt_bias", {nv}, kF32ok, kAttn, weights::kColumn, WeightSlot::kLinearDtBias);
      b.add(p + "A_log", {nv}, kF32ok, kAttn, weights::kColumn, WeightSlot::kLinearALog);
      b.add(p + "norm.weight", {la.value_head_dim}, kF32ok, TensorRole::kNorm, weights::kReplicated,
            WeightSlot::kLinearNorm);
      b.add(p + "out_proj.weight", {H, la.value_dim()}, WeightStorage::kProjection, kAttn, weights::kRow,
            WeightSlot::kLinearOut);
    } else {
      weights::gqa_attention(s, b);
    }
    b.add("post_attention_layernorm.weight", {H}, kF32ok, TensorRole::kNorm, weights::kReplicated,
          WeightSlot::kPostNorm);
    qwen_moe_ffn(s, b, layer);
    b.end_layer();
  }
  b.add("norm.weight", {H}, kF32ok, TensorRole::kNorm, weights::kReplicated, WeightSlot::kFinalNorm);
  if (!s.tie_word_embeddings) {
    b.add_absolute("lm_head.weight", {V, H}, WeightStorage::kPlain, TensorRole::kLmHead, weights::kVocab,
                   WeightSlot::kLmHead);
  }
  b.ignore_prefix("mtp.");
}

const FamilyRegistrar kFamily({
    .model_types = {"qwen3_next"},
    .architectures = {"Qwen3NextForCausalLM"},
    .summary = "Gated DeltaNet layers with gated attention every 4th, MoE plus a shared expert",
    .parse = parse_qwen3_next,
    .write = write_qwen3_next,
    .weights = weights_qwen3_next,
});

}  // namespace day0::families
