// NemotronHForCausalLM (Nemotron-H, Nemotron 3 Nano and Super): each layer one pre-norm block, by
// layers_block_type (releases: hybrid_override_pattern): "linear_attention" (M) Mamba-2, "full_attention" (*)
// GQA without position encoding, "mlp" (-) an ungated relu2 MLP, "moe" (E) sigmoid routing with a correction
// bias over ungated relu2 experts and a relu2 shared expert, the experts optionally in a latent space
// (moe_latent_size, Super). Saved under "backbone."; mtp.* is dropped on load, its layer kinds kept.
#include <cmath>

#include <fmt/format.h>

#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {

namespace {

constexpr const char* kImplementation = "transformers' NemotronH";

// One layer kind from its list spelling (new or legacy) or pattern character; "" when unknown.
std::string kind_of(const std::string& t) {
  if (t == "linear_attention" || t == "mamba" || t == "M") return "linear_attention";
  if (t == "full_attention" || t == "attention" || t == "*") return "full_attention";
  if (t == "moe" || t == "E") return "moe";
  if (t == "mlp" || t == "-") return "mlp";
  return "";
}

// The layer kinds from the first of `keys` given (a list, or a pattern string of one character a layer),
// else the class's default; two given must agree.
Result<std::vector<std::string>> layer_kinds(const ConfigReader& cfg, std::initializer_list<const char*> keys,
                                             std::vector<std::string> fallback) {
  std::vector<std::string> kinds;
  const char* from = nullptr;
  for (const char* key : keys) {
    std::vector<std::string> listed;
    if (cfg.present(key) && cfg.json().at(key).is_string()) {
      for (char ch : cfg.json().at(key).get<std::string>()) listed.emplace_back(1, ch);
      cfg.mark_used(key);
    } else {
      D0_ASSIGN_OR_RETURN(listed, cfg.optional_string_list(key));
    }
    if (listed.empty()) continue;
    for (size_t i = 0; i < listed.size(); ++i) {
      listed[i] = kind_of(listed[i]);
      if (listed[i].empty())
        return cfg.mismatch(fmt::format("{}[{}]", key, i), "a layer kind (or M, *, E, -)");
    }
    if (from != nullptr && listed != kinds) return cfg.invalid(key, fmt::format("disagrees with {}", from));
    kinds = std::move(listed);
    from = key;
  }
  return from != nullptr ? kinds : fallback;
}

Status parse_mamba(const ConfigReader& cfg, ModelSpec& spec) {
  MambaSpec m;
  D0_ASSIGN_OR_RETURN(m.n_heads, cfg.optional_int("mamba_num_heads", 128, 1));
  D0_ASSIGN_OR_RETURN(m.head_dim, cfg.optional_int("mamba_head_dim", 64, 1));
  D0_ASSIGN_OR_RETURN(m.n_groups, aliased_int(cfg, {"n_groups", "mamba_n_groups"}, 1, m.n_heads, 8));
  if (m.n_heads % m.n_groups != 0) {
    return cfg.invalid("n_groups",
                       fmt::format("must divide mamba_num_heads ({}), found {}", m.n_heads, m.n_groups));
  }
  D0_ASSIGN_OR_RETURN(m.state_size, cfg.optional_int("ssm_state_size", 128, 1));
  D0_ASSIGN_OR_RETURN(m.conv_kernel, aliased_int(cfg, {"conv_kernel", "mamba_d_conv"}, 1, 1024, 4));
  D0_ASSIGN_OR_RETURN(m.chunk_size,
                      aliased_int(cfg, {"chunk_size", "mamba_chunk_size"}, 1, kMaxLayers * 64, 128));
  for (const char* key :
       {"use_conv_bias", "mamba_conv_bias"}) {  // the legacy spelling wins, as in transformers
    D0_ASSIGN_OR_RETURN(m.conv_bias, cfg.optional_bool(key, m.conv_bias));
  }
  // time_step_limit clamps dt in transformers' prefill, not in its decode step: only the default [0, inf)
  // names one model (inf written as Python's Infinity or transformers 5's {"__float__": "Infinity"}).
  for (const char* key : {"time_step_limit", "mamba_dt_limit"}) {
    cfg.mark_used(key);
    if (!cfg.present(key)) continue;
    const nlohmann::json& v = cfg.json().at(key);
    const bool pair = v.is_array() && v.size() == 2;
    const auto lo = pair ? config_float(v[0]) : std::nullopt, hi = pair ? config_float(v[1]) : std::nullopt;
    if (!lo || !hi || *lo > 0.0 || !(std::isinf(*hi) && *hi > 0.0)) {
      return unsupported(fmt::format("{}: {}: {} is not supported (Day0 implements [0.0, Infinity])",
                                     cfg.source(), cfg.key_path(key), describe_json(v)));
    }
  }
  D0_RETURN_IF_ERROR(require_released(cfg, "mamba_hidden_act", "silu", kImplementation));
  D0_RETURN_IF_ERROR(require_released(cfg, "mamba_ssm_cache_dtype", "float32", "Day0's float32 state"));
  D0_RETURN_IF_ERROR(require_released(cfg, "use_bias", false, "Day0's NemotronH"));
  spec.mamba = m;
  return Status::ok();
}

Status parse_moe(const ConfigReader& cfg, ModelSpec& spec) {
  MoeSpec moe;
  D0_ASSIGN_OR_RETURN(moe.n_experts,
                      aliased_int(cfg, {"n_routed_experts", "num_local_experts"}, 1, kMaxExperts, 8));
  D0_ASSIGN_OR_RETURN(moe.experts_per_token, cfg.optional_int("num_experts_per_tok", 2, 1, moe.n_experts));
  D0_ASSIGN_OR_RETURN(moe.expert_intermediate, cfg.optional_int("moe_intermediate_size", 7688, 1));
  D0_ASSIGN_OR_RETURN(moe.shared_intermediate,
                      cfg.optional_int("moe_shared_expert_intermediate_size", 7688, 1));
  moe.n_shared_experts = 1;  // the block holds one shared MLP whatever n_shared_experts says
  D0_RETURN_IF_ERROR(require_released(cfg, "n_shared_experts", 1, kImplementation));
  if (cfg.present("moe_latent_size")) {
    D0_ASSIGN_OR_RETURN(moe.latent_size, cfg.optional_int("moe_latent_size", 0, 1));
  }
  cfg.mark_used("moe_latent_size");
  moe.scoring = RouterScoring::kSigmoid;
  moe.topk_method = TopkMethod::kNoauxTc;
  moe.correction_bias = true;
  D0_ASSIGN_OR_RETURN(moe.n_group, cfg.optional_int("n_group", 1, 1, moe.n_experts));
  D0_ASSIGN_OR_RETURN(moe.topk_group, cfg.optional_int("topk_group", 1, 1, moe.n_group));
  if (moe.n_experts % moe.n_group != 0) return cfg.invalid("n_group", "must divide n_routed_experts");
  D0_ASSIGN_OR_RETURN(moe.norm_topk_prob, cfg.optional_bool("norm_topk_prob", true));
  D0_ASSIGN_OR_RETURN(moe.routed_scaling_factor, cfg.optional_double("routed_scaling_factor", 1.0));
  spec.moe = moe;
  return Status::ok();
}

}  // namespace

Status parse_nemotron_h(const ConfigReader& cfg, ModelSpec& spec) {
  D0_ASSIGN_OR_RETURN(std::vector<std::string> kinds,
                      layer_kinds(cfg, {"layers_block_type", "layer_types", "hybrid_override_pattern"},
                                  {"linear_attention", "moe", "full_attention", "mlp"}));
  // parse_core's keys under this class's names and defaults, in a merged copy (the audit sees the originals).
  nlohmann::json merged = cfg.json();
  const auto n = static_cast<int64_t>(kinds.size());
  if (cfg.present("num_hidden_layers")) {
    D0_ASSIGN_OR_RETURN(int64_t stated, cfg.required_int("num_hidden_layers", 1, kMaxLayers));
    if (stated != n)
      return cfg.invalid("num_hidden_layers", fmt::format("{} disagrees with {} layer kinds", stated, n));
  }
  merged["num_hidden_layers"] = n;
  const nlohmann::json class_defaults = {{"vocab_size", 131072},      {"hidden_size", 4096},
                                         {"num_attention_heads", 32}, {"intermediate_size", 21504},
                                         {"head_dim", 128},           {"max_position_embeddings", 4096}};
  for (const auto& [key, value] : class_defaults.items())
    if (!cfg.present(key)) merged[key] = value;
  if (!cfg.contains("num_key_value_heads")) merged["num_key_value_heads"] = 8;  // null: the heads (post_init)
  D0_ASSIGN_OR_RETURN(double eps, cfg.optional_double("layer_norm_epsilon", 1e-5));
  merged["rms_norm_eps"] = eps;
  FamilyDefaults defaults;
  defaults.training_only_attention_dropout = true;
  D0_RETURN_IF_ERROR(parse_core(cfg.derived(merged, ""), defaults, spec));
  spec.norm_gain_f32 = true;        // weight.float() * normed row, then one cast
  spec.router_logits_f32 = true;    // float32 router on a float32 copy of the input
  spec.routing_weights_f32 = true;  // float32 weights times the expert output
  spec.relu2_mlp = true;
  D0_RETURN_IF_ERROR(require_released(cfg, "mlp_hidden_act", "relu2", kImplementation));
  D0_RETURN_IF_ERROR(require_released(cfg, "mlp_bias", false, "Day0's NemotronH"));
  D0_RETURN_IF_ERROR(require_released(cfg, "attention_bias", false, kImplementation));
  D0_RETURN_IF_ERROR(require_released(cfg, "sliding_window", nullptr, kImplementation));
  D0_RETURN_IF_ERROR(parse_mamba(cfg, spec));
  bool any_moe = false;
  for (int64_t i = 0; i < n; ++i) {
    LayerSpec& l = spec.layers[static_cast<size_t>(i)];
    const std::string& k = kinds[static_cast<size_t>(i)];
    l.use_rope = false;  // no position encoding anywhere
    l.mamba = k == "linear_attention";
    l.no_ffn = k == "linear_attention" || k == "full_attention";
    l.no_mixer = !l.no_ffn;
    l.moe = k == "moe";
    if (k != "mlp") l.dense_intermediate = 0;
    any_moe = any_moe || l.moe;
  }
  if (any_moe) D0_RETURN_IF_ERROR(parse_moe(cfg, spec));
  ignore_keys(cfg, {"n_routed_experts", "num_local_experts", "num_experts_per_tok", "moe_intermediate_size",
                    "moe_shared_expert_intermediate_size", "moe_latent_size", "n_group", "topk_group",
                    "norm_topk_prob", "routed_scaling_factor", "n_shared_experts"});
  // MTP: mtp.* is dropped on load; the count and kinds are kept so that the config writes back.
  D0_ASSIGN_OR_RETURN(spec.mamba->mtp_layers, cfg.optional_int("num_nextn_predict_layers", 0, 0, kMaxLayers));
  D0_ASSIGN_OR_RETURN(
      spec.mamba->mtp_layer_types,
      layer_kinds(cfg, {"mtp_layers_block_type", "mtp_hybrid_override_pattern"}, {"full_attention", "moe"}));
  // Unread at inference: initialisation, training, kernels, norm_eps, expand (the width is heads x head_dim).
  ignore_keys(cfg, {"use_mamba_kernels", "num_logits_to_keep", "time_step_min", "time_step_max",
                    "time_step_floor", "mamba_dt_min", "mamba_dt_max", "mamba_dt_init_floor", "expand",
                    "mamba_expand", "mamba_proj_bias", "moe_shared_expert_overlap", "residual_in_fp32",
                    "rescale_prenorm_residual", "hidden_dropout", "output_router_logits", "norm_eps"});
  return Status::ok();
}

void write_nemotron_h(const ModelSpec& spec, nlohmann::json& out) {
  out.erase("num_hidden_layers");  // transformers 5 derives it from the layer kinds
  out.erase("rms_norm_eps");
  out.erase("hidden_act");
  out["layer_norm_epsilon"] = spec.rms_norm_eps;
  out["mlp_hidden_act"] = "relu2";
  nlohmann::json kinds = nlohmann::json::array();
  for (const LayerSpec& l : spec.layers)
    kinds.push_back(l.mamba ? "linear_attention" : !l.no_ffn ? (l.moe ? "moe" : "mlp") : "full_attention");
  out["layers_block_type"] = kinds;
  const MambaSpec& m = *spec.mamba;
  out["mamba_num_heads"] = m.n_heads;
  out["mamba_head_dim"] = m.head_dim;
  out["n_groups"] = m.n_groups;
  out["ssm_state_size"] = m.state_size;
  out["conv_kernel"] = m.conv_kernel;
  out["chunk_size"] = m.chunk_size;
  out["use_conv_bias"] = m.conv_bias;
  out["num_nextn_predict_layers"] = m.mtp_layers;
  out["mtp_layers_block_type"] = m.mtp_layer_types;
  if (spec.moe) {
    const MoeSpec& moe = *spec.moe;
    out["n_routed_experts"] = moe.n_experts;
    out["num_experts_per_tok"] = moe.experts_per_token;
    out["moe_intermediate_size"] = moe.expert_intermediate;
    out["moe_shared_expert_intermediate_size"] = moe.shared_intermediate;
    out["moe_latent_size"] = moe.latent_size > 0 ? nlohmann::json(moe.latent_size) : nlohmann::json(nullptr);
    out["n_group"] = moe.n_group;
    out["topk_group"] = moe.topk_group;
    out["norm_topk_prob"] = moe.norm_topk_prob;
    out["routed_scaling_factor"] = moe.routed_scaling_factor;
  }
}

// Weights under "model." (saved as "backbone."): embeddings, per layer its norm and one mixer, norm_f.
void weights_nemotron_h(const ModelSpec& s, WeightTableBuilder& b) {
  const int64_t H = s.hidden_size, V = s.vocab_size;
  const MambaSpec& m = *s.mamba;
  constexpr auto kProj = WeightStorage::kProjection;
  constexpr auto kF32ok = WeightStorage::kKeptF32;
  constexpr auto kAttn = TensorRole::kAttention;
  b.add("embeddings.weight", {V, H}, WeightStorage::kPlain, TensorRole::kEmbedding, weights::kVocab,
        WeightSlot::kEmbedding);
  for (int64_t n = 0; n < s.n_layers; ++n) {
    const LayerSpec& l = s.layers[static_cast<size_t>(n)];
    b.begin_layer(n);
    b.add("norm.weight", {H}, kF32ok, TensorRole::kNorm, weights::kReplicated, WeightSlot::kInputNorm);
    const std::string p = "mixer.";
    if (l.mamba) {
      const int64_t I = m.intermediate(), C = m.conv_channels(), nh = m.n_heads;
      b.add(p + "in_proj.weight", {I + C + nh, H}, kProj, kAttn, weights::kReplicated, WeightSlot::kMambaIn);
      b.add(p + "conv1d.weight", {C, 1, m.conv_kernel}, kF32ok, kAttn, weights::kReplicated,
            WeightSlot::kMambaConv);
      if (m.conv_bias)
        b.add(p + "conv1d.bias", {C}, kF32ok, kAttn, weights::kReplicated, WeightSlot::kMambaConvBias);
      b.add(p + "dt_bias", {nh}, kF32ok, kAttn, weights::kReplicated, WeightSlot::kMambaDtBias);
      b.add(p + "A_log", {nh}, kF32ok, kAttn, weights::kReplicated, WeightSlot::kMambaALog);
      b.add(p + "D", {nh}, kF32ok, kAttn, weights::kReplicated, WeightSlot::kMambaD);
      b.add(p + "norm.weight", {I}, kF32ok, TensorRole::kNorm, weights::kReplicated, WeightSlot::kMambaNorm);
      b.add(p + "out_proj.weight", {H, I}, kProj, kAttn, weights::kReplicated, WeightSlot::kMambaOut);
    } else if (l.no_ffn) {  // attention
      const int64_t q = s.n_heads * s.head_dim, kv = s.n_kv_heads * s.head_dim;
      b.add(p + "q_proj.weight", {q, H}, kProj, kAttn, weights::kColumn, WeightSlot::kQ);
      b.add(p + "k_proj.weight", {kv, H}, kProj, kAttn, weights::kColumnKv, WeightSlot::kK);
      b.add(p + "v_proj.weight", {kv, H}, kProj, kAttn, weights::kColumnKv, WeightSlot::kV);
      b.add(p + "o_proj.weight", {H, q}, kProj, kAttn, weights::kRow, WeightSlot::kO);
    } else if (!l.moe) {
      constexpr auto kMlp = TensorRole::kDenseMlp;
      b.add(p + "up_proj.weight", {l.dense_intermediate, H}, kProj, kMlp, weights::kColumn,
            WeightSlot::kMlpUp);
      b.add(p + "down_proj.weight", {H, l.dense_intermediate}, kProj, kMlp, weights::kRow,
            WeightSlot::kMlpDown);
    } else {
      const MoeSpec& moe = *s.moe;
      const int64_t in = moe.latent_size > 0 ? moe.latent_size : H, E = moe.n_experts;
      b.add(p + "gate.weight", {E, H}, kF32ok, TensorRole::kRouter, weights::kReplicated,
            WeightSlot::kRouter);
      b.add(p + "gate.e_score_correction_bias", {E}, kF32ok, TensorRole::kRouter, weights::kReplicated,
            WeightSlot::kCorrectionBias);
      b.add(p + "experts.{E}.up_proj.weight", {moe.expert_intermediate, in}, kProj, TensorRole::kRoutedExpert,
            weights::kOneExpert, WeightSlot::kExpertUp);
      b.add(p + "experts.{E}.down_proj.weight", {in, moe.expert_intermediate}, kProj,
            TensorRole::kRoutedExpert, weights::kOneExpert, WeightSlot::kExpertDown);
      b.add(p + "shared_experts.up_proj.weight", {moe.shared_intermediate, H}, kProj,
            TensorRole::kSharedExpert, weights::kColumn, WeightSlot::kSharedUp);
      b.add(p + "shared_experts.down_proj.weight", {H, moe.shared_intermediate}, kProj,
            TensorRole::kSharedExpert, weights::kRow, WeightSlot::kSharedDown);
      if (moe.latent_size > 0) {
        b.add(p + "fc1_latent_proj.weight", {in, H}, kProj, TensorRole::kDenseMlp, weights::kReplicated,
              WeightSlot::kMoeLatentIn);
        b.add(p + "fc2_latent_proj.weight", {H, in}, kProj, TensorRole::kDenseMlp, weights::kReplicated,
              WeightSlot::kMoeLatentOut);
      }
    }
    b.end_layer();
  }
  b.add("norm_f.weight", {H}, kF32ok, TensorRole::kNorm, weights::kReplicated, WeightSlot::kFinalNorm);
  if (!s.tie_word_embeddings) {
    b.add_absolute("lm_head.weight", {V, H}, WeightStorage::kPlain, TensorRole::kLmHead, weights::kVocab,
                   WeightSlot::kLmHead);
  }
  b.ignore_prefix("mtp.");
  b.stored_layout({.name = "transformers' NemotronH save names",
                   .renames = {{.canonical = "model.", .stored = "backbone.", .prefix = true}},
                   .release = true});
}

const FamilyRegistrar kFamily({
    .model_types = {"nemotron_h"},
    .architectures = {"NemotronHForCausalLM"},
    .summary = "one-block layers: Mamba-2, GQA without RoPE, relu2 MLP, sigmoid MoE (latent on Super)",
    .parse = parse_nemotron_h,
    .write = write_nemotron_h,
    .weights = weights_nemotron_h,
});

}  // namespace day0::families
