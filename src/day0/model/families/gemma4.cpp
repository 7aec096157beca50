// Gemma 4 text (Gemma4ForCausalLM, model_type gemma4_text) and the text model of the image-text wrapper
// Gemma4ForConditionalGeneration (gemma4). Checked against transformers 5.25's models/gemma4
// (configuration_gemma4.py, modeling_gemma4.py) and integrations/heterogeneity (per_layer_config):
//  - sliding / full layers (layer_types, else five sliding to one full; the last layer is full whatever the
//    list says, as transformers forces it); full layers may have their own head width (global_head_dim, 512)
//    and KV heads (num_global_key_value_heads, with attention_k_eq_v only), spelled per_layer_config by 5.25;
//  - per-head q / k RMSNorms and a weightless v norm, softmax scale 1, RoPE per layer type from
//    rope_parameters (full: "proportional", 0.25 of the head's frequencies over the whole head);
//  - attention_k_eq_v: full layers have no v_proj, their values are the key projection (before k_norm, RoPE);
//  - num_kv_shared_layers: the last layers attend to the cache of the last earlier layer of their type and
//    have no k / v projections; use_double_wide_mlp doubles their MLP;
//  - sandwich norms, GEGLU, RMSNorm gains in float32 (plain w), embeddings x sqrt(hidden) in the weights'
//    dtype, per-layer embeddings, layer_scalar, final_logit_softcapping;
//  - enable_moe_block: every layer a MoE beside its dense MLP (config_common's parse_moe_beside_dense_mlp).
// The wrapper's vision and audio towers are not read (token ids only).
#include <fmt/format.h>

#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {
namespace {

// Gemma4TextConfig's class defaults for the keys parse_core reads.
const std::pair<const char*, nlohmann::json> kCoreDefaults[] = {
    {"vocab_size", 262144},    {"hidden_size", 2304},        {"intermediate_size", 9216},
    {"num_hidden_layers", 30}, {"num_attention_heads", 8},   {"num_key_value_heads", 4},
    {"head_dim", 256},         {"tie_word_embeddings", true}};

// layer_types, else five sliding layers to one full; the last layer full (transformers forces it).
Status parse_gemma4_layer_types(const ConfigReader& cfg, ModelSpec& spec) {
  D0_ASSIGN_OR_RETURN(spec.sliding_window, cfg.optional_int("sliding_window", 512, 1));
  D0_ASSIGN_OR_RETURN(std::vector<std::string> types, cfg.optional_string_list("layer_types"));
  if (!types.empty() && static_cast<int64_t>(types.size()) != spec.n_layers) {
    return cfg.invalid("layer_types", fmt::format("expected {} entries (num_hidden_layers)", spec.n_layers));
  }
  for (int64_t i = 0; i < spec.n_layers; ++i) {
    const auto n = static_cast<size_t>(i);
    if (!types.empty() && types[n] != "sliding_attention" && types[n] != "full_attention")
      return cfg.mismatch(fmt::format("layer_types[{}]", i), "\"sliding_attention\" or \"full_attention\"");
    const bool sliding =
        (types.empty() ? (i + 1) % 6 != 0 : types[n] == "sliding_attention") && i + 1 < spec.n_layers;
    spec.layers[n].mask = sliding ? AttentionMask::kSliding : AttentionMask::kCausal;
    spec.layers[n].window = sliding ? spec.sliding_window : 0;
  }
  return Status::ok();
}

// The full layers' head width and KV heads: per_layer_config (transformers 5.25's save; head_dim and
// num_key_value_heads only, the same for every layer of a type), else global_head_dim (512) and, with
// attention_k_eq_v, num_global_key_value_heads; both spellings present must agree.
Status parse_gemma4_layer_sizes(const ConfigReader& cfg, bool k_eq_v, ModelSpec& spec) {
  D0_ASSIGN_OR_RETURN(int64_t global_dim, cfg.optional_int("global_head_dim", 512, 1));
  D0_ASSIGN_OR_RETURN(int64_t global_kv, cfg.optional_int("num_global_key_value_heads", 0, 0));
  const bool release_keys = cfg.present("global_head_dim") || cfg.present("num_global_key_value_heads");
  // Given at all (null or {} too), per_layer_config replaces the global_* keys, which transformers then
  // ignores.
  D0_ASSIGN_OR_RETURN(const bool listed, apply_per_layer_config(cfg, spec));
  for (int64_t i = 0; i < spec.n_layers && !listed; ++i) {
    LayerSpec& l = spec.layers[static_cast<size_t>(i)];
    if (l.mask == AttentionMask::kSliding) continue;
    l.head_dim = global_dim == spec.head_dim ? 0 : global_dim;  // 0: the model's
    if (k_eq_v && global_kv > 0 && global_kv != spec.n_kv_heads) l.n_kv_heads = global_kv;
  }
  for (const LayerSpec& l : spec.layers) {  // one size a layer type (transformers' rotary tables)
    for (const LayerSpec& o : spec.layers) {
      if (o.mask == l.mask && (o.head_dim != l.head_dim || o.n_kv_heads != l.n_kv_heads)) {
        return cfg.invalid("per_layer_config", "layers of one type must have the same sizes");
      }
    }
    const bool full = l.mask != AttentionMask::kSliding;
    if (listed && release_keys && full &&
        (layer_head_dim(spec, l) != global_dim ||
         (k_eq_v && global_kv > 0 && layer_kv_heads(spec, l) != global_kv))) {
      return cfg.invalid("global_head_dim", "disagrees with per_layer_config, which transformers follows");
    }
    if (layer_heads(spec, l) % layer_kv_heads(spec, l) != 0) {
      return cfg.invalid("num_global_key_value_heads", "must divide num_attention_heads");
    }
  }
  return Status::ok();
}

// rope_parameters keyed by layer type (absent: full layers proportional, 0.25, theta 1e6; sliding default,
// theta 1e4); each entry present must name its theta. transformers' Gemma 4 takes no other spelling.
Status parse_gemma4_rope(const ConfigReader& cfg, ModelSpec& spec) {
  D0_ASSIGN_OR_RETURN(std::optional<ConfigReader> params, cfg.optional_object("rope_parameters"));
  RopeScaling proportional{.type = RopeType::kProportional, .proportional_share = 0.25};
  LayerRope full{1e6, 1.0, proportional}, sliding{1e4, 1.0, RopeScaling{}};
  for (const char* type : {"full_attention", "sliding_attention"}) {
    const bool used = std::any_of(spec.layers.begin(), spec.layers.end(), [&](const LayerSpec& l) {
      return (l.mask == AttentionMask::kSliding) == (std::string(type) == "sliding_attention");
    });
    if (!params || !used) continue;
    D0_ASSIGN_OR_RETURN(std::optional<ConfigReader> entry, params->optional_object(type));
    if (!entry || !entry->present("rope_theta")) return params->mismatch(type, "an object with rope_theta");
    D0_ASSIGN_OR_RETURN(std::string kind, entry->optional_string("rope_type", "default"));
    D0_ASSIGN_OR_RETURN(double partial, entry->optional_double("partial_rotary_factor", 1.0));
    if (kind != "default" && kind != "proportional") {
      return unsupported(fmt::format("{}: {}: \"{}\" is not supported (Gemma 4: default or proportional)",
                                     cfg.source(), entry->key_path("rope_type"), kind));
    }
    if (kind == "default" && partial != 1.0) {
      return unsupported(fmt::format("{}: {}: {} with default RoPE (Gemma 4's rotates the whole head)",
                                     cfg.source(), entry->key_path("partial_rotary_factor"), partial));
    }
  }
  D0_RETURN_IF_ERROR(parse_rope_by_layer_type(cfg, full, sliding, spec));
  return Status::ok();
}

Status parse_gemma4(const ConfigReader& cfg, ModelSpec& spec) {
  // Keys transformers' Gemma 4 would keep as unused attributes (or half-apply: a top-level
  // partial_rotary_factor fills rope_parameters' gaps): refused rather than guessed.
  for (const char* key : {"rope_theta", "rope_scaling", "partial_rotary_factor"}) {
    if (cfg.present(key)) {
      return unsupported(fmt::format("{}: {}: not read by Gemma 4 (RoPE is rope_parameters per layer type)",
                                     cfg.source(), cfg.key_path(key)));
    }
  }
  D0_ASSIGN_OR_RETURN(std::string act, cfg.optional_string("hidden_activation", "gelu_pytorch_tanh"));
  D0_ASSIGN_OR_RETURN(std::string act_alias, cfg.optional_string("hidden_act", act));
  if (act != "gelu_pytorch_tanh" || act_alias != act) {
    return unsupported(
        fmt::format("{}: hidden_activation: \"{}\" (hidden_act \"{}\") is not supported "
                    "(gelu_pytorch_tanh is)",
                    cfg.source(), act, act_alias));
  }
  nlohmann::json merged = cfg.json();
  merged.erase("hidden_act");
  for (const auto& [key, fallback] : kCoreDefaults) {
    if (!merged.contains(key) || merged[key].is_null()) merged[key] = fallback;
  }
  std::string path = cfg.key_path("");
  if (!path.empty()) path.pop_back();
  const ConfigReader core = cfg.derived(merged, path);
  FamilyDefaults defaults;  // Gemma4TextConfig
  defaults.rms_norm_eps = 1e-6;
  defaults.max_position_embeddings = 131072;
  D0_RETURN_IF_ERROR(parse_core(core, defaults, spec));
  D0_RETURN_IF_ERROR(parse_attention_bias(core, spec));
  spec.norm_gain_f32 = true;  // Gemma4RMSNorm: the float32 row times weight.float(), one cast
  spec.qk_norm = spec.value_norm = spec.sandwich_norms = spec.gelu_tanh_mlp = spec.layer_scalar = true;
  spec.embedding_sqrt_scale = spec.embedding_scale_rounded = true;
  spec.fixed_attention_scale = 1.0;
  D0_RETURN_IF_ERROR(parse_moe_beside_dense_mlp(cfg, spec));
  D0_ASSIGN_OR_RETURN(std::string bidirectional,
                      cfg.optional_string("use_bidirectional_attention", "vision"));
  if (bidirectional != "vision") {  // "vision": image tokens only, and Day0 takes none
    return unsupported(fmt::format("{}: use_bidirectional_attention: \"{}\" is not supported (causal text)",
                                   cfg.source(), bidirectional));
  }
  D0_ASSIGN_OR_RETURN(double softcap, cfg.optional_double("final_logit_softcapping", 0.0));
  if (cfg.present("final_logit_softcapping") && !(softcap > 0.0))
    return cfg.mismatch("final_logit_softcapping", "a positive cap or null");
  spec.final_logit_softcap = softcap;
  D0_RETURN_IF_ERROR(parse_gemma4_layer_types(cfg, spec));
  D0_ASSIGN_OR_RETURN(bool k_eq_v, cfg.optional_bool("attention_k_eq_v", false));
  D0_RETURN_IF_ERROR(parse_gemma4_layer_sizes(cfg, k_eq_v, spec));
  D0_RETURN_IF_ERROR(parse_gemma4_rope(core, spec));
  D0_ASSIGN_OR_RETURN(int64_t shared, cfg.optional_int("num_kv_shared_layers", 0, 0, spec.n_layers - 1));
  if (!assign_shared_kv_layers(spec, shared))
    return cfg.invalid("num_kv_shared_layers", "a shared layer's type has no earlier layer to read from");
  D0_ASSIGN_OR_RETURN(bool double_wide, cfg.optional_bool("use_double_wide_mlp", false));
  for (LayerSpec& l : spec.layers) {
    l.values_from_keys = k_eq_v && l.mask != AttentionMask::kSliding;
    if (double_wide && l.kv_source >= 0) l.dense_intermediate = 2 * spec.intermediate_size;
  }
  // Per-layer inputs: 256 wide when the key is absent, none when null or 0.
  const int64_t ple_default = cfg.contains("hidden_size_per_layer_input") ? 0 : 256;
  D0_ASSIGN_OR_RETURN(int64_t ple_width, cfg.optional_int("hidden_size_per_layer_input", ple_default, 0));
  D0_ASSIGN_OR_RETURN(int64_t ple_vocab, cfg.optional_int("vocab_size_per_layer_input", 262144, 1));
  if (ple_width > 0 && ple_vocab < spec.vocab_size) {
    return unsupported(
        fmt::format("{}: vocab_size_per_layer_input: {} below vocab_size {} (ids past it have "
                    "no per-layer row)",
                    cfg.source(), ple_vocab, spec.vocab_size));
  }
  if (ple_width > 0) spec.per_layer_input = PerLayerInputSpec{.vocab_size = ple_vocab, .width = ple_width};
  return Status::ok();
}

void write_gemma4(const ModelSpec& spec, nlohmann::json& out) {
  out.erase("hidden_act");
  out["hidden_activation"] = "gelu_pytorch_tanh";
  out["attention_bias"] = spec.qkv_bias;
  write_rope_by_layer_type(spec, out);
  out["sliding_window"] = spec.sliding_window > 0 ? spec.sliding_window : 512;
  write_layer_types(spec, out);
  out["final_logit_softcapping"] =
      spec.final_logit_softcap > 0 ? nlohmann::json(spec.final_logit_softcap) : nullptr;
  int64_t shared = 0;
  bool k_eq_v = false, double_wide = false;
  nlohmann::json per_layer = nlohmann::json::object();
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerSpec& l = spec.layers[i];
    shared += l.kv_source >= 0 ? 1 : 0;
    k_eq_v = k_eq_v || l.values_from_keys;
    double_wide = double_wide || (l.kv_source >= 0 && l.dense_intermediate == 2 * spec.intermediate_size);
    nlohmann::json o = nlohmann::json::object();
    if (l.head_dim > 0) o["head_dim"] = l.head_dim;
    if (l.n_kv_heads > 0) o["num_key_value_heads"] = l.n_kv_heads;
    if (!o.empty()) per_layer[std::to_string(i)] = o;
  }
  out["per_layer_config"] = per_layer;  // transformers 5.25's spelling of global_head_dim and its KV heads
  out["attention_k_eq_v"] = k_eq_v;
  out["num_kv_shared_layers"] = shared;
  out["use_double_wide_mlp"] = double_wide;
  out["enable_moe_block"] = spec.moe.has_value();
  if (spec.moe) {
    out["num_experts"] = spec.moe->n_experts;
    out["top_k_experts"] = spec.moe->experts_per_token;
    out["moe_intermediate_size"] = spec.moe->expert_intermediate;
  }
  out["hidden_size_per_layer_input"] = spec.per_layer_input ? spec.per_layer_input->width : 0;
  out["vocab_size_per_layer_input"] =
      spec.per_layer_input ? spec.per_layer_input->vocab_size : spec.vocab_size;
}

// Weights: embed_tokens (and, with per-layer inputs, embed_tokens_per_layer, per_layer_model_projection and
// per_layer_projection_norm); per layer the four norms, attention, the GEGLU mlp, the per-layer input's gate,
// projection and norm, layer_scalar (with the MoE block also the router, experts and their norms); norm;
// lm_head when untied. A wrapper's text model is stored under
// model.language_model. and its head at lm_head.
void weights_gemma4(const ModelSpec& s, WeightTableBuilder& b) {
  const int64_t H = s.hidden_size, V = s.vocab_size, P = s.per_layer_input ? s.per_layer_input->width : 0;
  constexpr auto kF32ok = WeightStorage::kKeptF32;
  constexpr auto kProj = WeightStorage::kProjection;
  const auto norm = [&](const char* name, int64_t n, WeightSlot slot) {
    b.add(name, {n}, kF32ok, TensorRole::kNorm, weights::kReplicated, slot);
  };
  b.add("embed_tokens.weight", {V, H}, WeightStorage::kPlain, TensorRole::kEmbedding, weights::kVocab,
        WeightSlot::kEmbedding);
  if (P > 0) {
    b.add("embed_tokens_per_layer.weight", {s.per_layer_input->vocab_size, s.n_layers * P},
          WeightStorage::kPlain, TensorRole::kEmbedding, weights::kReplicated,
          WeightSlot::kPerLayerEmbedding);
    b.add("per_layer_model_projection.weight", {s.n_layers * P, H}, kProj, TensorRole::kDenseMlp,
          weights::kReplicated, WeightSlot::kPerLayerModelProjection);
    norm("per_layer_projection_norm.weight", P, WeightSlot::kPerLayerProjectionNorm);
  }
  for (int64_t n = 0; n < s.n_layers; ++n) {
    const LayerSpec& layer = s.layers[static_cast<size_t>(n)];
    b.begin_layer(n);
    norm("input_layernorm.weight", H, WeightSlot::kInputNorm);
    weights::gqa_attention(s, b, &layer);
    norm("post_attention_layernorm.weight", H, WeightSlot::kAttnOutNorm);
    norm("pre_feedforward_layernorm.weight", H, WeightSlot::kPostNorm);
    norm("post_feedforward_layernorm.weight", H, WeightSlot::kFfnOutNorm);
    weights::dense_mlp(s, b, "mlp.", layer.dense_intermediate, false);
    if (layer.moe) weights::moe_beside_dense_mlp(s, b);
    if (P > 0) {
      b.add("per_layer_input_gate.weight", {P, H}, kProj, TensorRole::kDenseMlp, weights::kReplicated,
            WeightSlot::kPerLayerInputGate);
      b.add("per_layer_projection.weight", {H, P}, kProj, TensorRole::kDenseMlp, weights::kReplicated,
            WeightSlot::kPerLayerProjection);
      norm("post_per_layer_input_norm.weight", H, WeightSlot::kPerLayerInputNorm);
    }
    norm("layer_scalar", 1, WeightSlot::kLayerScalar);
    b.end_layer();
  }
  norm("norm.weight", H, WeightSlot::kFinalNorm);
  if (!s.tie_word_embeddings) {
    b.add_absolute(s.multimodal_wrapper ? "language_model.lm_head.weight" : "lm_head.weight", {V, H},
                   WeightStorage::kPlain, TensorRole::kLmHead, weights::kVocab, WeightSlot::kLmHead);
  }
  // The wrapper saves the text model under model.language_model. (Gemma4ForCausalLM under model.), and its
  // vision and audio towers and their embedders beside it.
  std::vector<NameRename> wrapper;
  if (s.multimodal_wrapper) {
    wrapper.push_back({"language_model.model.", "model.language_model.", true});
    wrapper.push_back({"language_model.lm_head.", "lm_head.", true});
  } else {
    wrapper.push_back({"model.", "model.language_model.", true});
  }
  for (const char* prefix :
       {"model.vision_tower.", "model.embed_vision.", "model.audio_tower.", "model.embed_audio."})
    b.ignore_prefix(prefix);
  b.stored_layout({.name = "Gemma 4 image-text names", .renames = wrapper, .release = s.multimodal_wrapper});
}

const FamilyRegistrar kFamily({
    .model_types = {"gemma4_text", "gemma4"},
    .architectures = {"Gemma4ForCausalLM"},
    .summary =
        "sliding / global GQA (own head width, k = v, KV shared across layers), per-layer embeddings, GEGLU, "
        "MoE beside the MLP",
    .wrapper_architectures = {"Gemma4ForConditionalGeneration"},
    .parse = parse_gemma4,
    .write = write_gemma4,
    .weights = weights_gemma4,
});

}  // namespace
}  // namespace day0::families
