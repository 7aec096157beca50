// OLMo-Hybrid (OlmoHybridForCausalLM, model_type olmo_hybrid; allenai/Olmo-Hybrid-7B): Gated DeltaNet layers
// and attention layers, three to one by default, a dense SwiGLU MLP in every layer. What it keeps of each:
//  - the linear-attention layers are pre-norm (input / pre-MLP RMSNorms) Gated DeltaNets with separate
//    q_proj, k_proj, v_proj (the conv's [q | k | v] channels), g_proj (the gate z), a_proj, b_proj and
//    o_proj; beta = 2 sigmoid(b) when linear_allow_neg_eigval (the default), and the gated output norm o_norm
//    uses a fixed eps of 1e-5 whatever rms_norm_eps says;
//  - the attention layers are OLMo 2's: no input norm, the attention's and the MLP's outputs normed before
//    the residual add, q / k RMSNorms over the full projected width, RoPE (float32 cos / sin) over the whole
//    head. A config without a RoPE theta (OLMo-core writes "rope_theta": null) runs them without RoPE;
//  - every RMSNorm applies its gain to the float32 normed row, then casts once.
// Names: transformers 5 converts the release's attention_layer_norm / feedforward_layer_norm and the three
// short convs q_conv1d / k_conv1d / v_conv1d on load (conversion_mapping.py) and writes them back on save,
// so the attention layers' post-attention norm is saved as feedforward_layer_norm too; the table uses the
// stored names, and transformers' in-memory names (input_layernorm, post_attention_layernorm, one conv1d)
// are read as an alternative layout. transformers' save splits the conv into three equal thirds
// (torch.chunk): the same as the release's [q | k | v] only when the value width equals the key width, so
// any other such re-save is refused by its shapes. mtp.* is dropped on load.
#include <fmt/format.h>

#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {
namespace {

// OlmoHybridConfig's class defaults for the keys parse_core requires.
const std::pair<const char*, int64_t> kCoreDefaults[] = {{"vocab_size", 100352},
                                                         {"hidden_size", 3840},
                                                         {"intermediate_size", 11008},
                                                         {"num_hidden_layers", 32},
                                                         {"num_attention_heads", 30}};

// layer_types, or the class default: every 4th layer (i % 4 == 3) attention, the last one if none is.
// transformers refuses a model without both kinds.
Status parse_olmo_layer_kinds(const ConfigReader& cfg, ModelSpec& spec) {
  D0_ASSIGN_OR_RETURN(std::vector<std::string> types, cfg.optional_string_list("layer_types"));
  if (!types.empty() && static_cast<int64_t>(types.size()) != spec.n_layers) {
    return cfg.invalid("layer_types", fmt::format("expected {} entries (num_hidden_layers), found {}",
                                                  spec.n_layers, types.size()));
  }
  int64_t n_linear = 0;
  for (int64_t i = 0; i < spec.n_layers; ++i) {
    bool linear = i % 4 != 3;
    if (!types.empty()) {
      const std::string& t = types[static_cast<size_t>(i)];
      if (t != "linear_attention" && t != "full_attention") {
        return cfg.mismatch(fmt::format("layer_types[{}]", i), "\"linear_attention\" or \"full_attention\"");
      }
      linear = t == "linear_attention";
    }
    spec.layers[static_cast<size_t>(i)].linear_attention = linear;
    n_linear += linear ? 1 : 0;
  }
  if (types.empty() && n_linear == spec.n_layers) spec.layers.back().linear_attention = false;
  if (!types.empty() && (n_linear == 0 || n_linear == spec.n_layers)) {
    return cfg.invalid("layer_types", "OLMo-Hybrid needs both linear_attention and full_attention layers");
  }
  return Status::ok();
}

// The linear_* sizes with the class's derived defaults: num_attention_heads key and value heads,
// d_k = int(0.75 hidden / n_k), d_v = 2 d_k.
Status parse_olmo_deltanet(const ConfigReader& cfg, ModelSpec& spec) {
  LinearAttentionSpec la;
  D0_ASSIGN_OR_RETURN(la.conv_kernel, cfg.optional_int("linear_conv_kernel_dim", 4, 1, 1024));
  D0_ASSIGN_OR_RETURN(la.n_key_heads, cfg.optional_int("linear_num_key_heads", spec.n_heads, 1));
  D0_ASSIGN_OR_RETURN(la.n_value_heads, cfg.optional_int("linear_num_value_heads", spec.n_heads, 1));
  const auto dk_default = static_cast<int64_t>(0.75 * static_cast<double>(spec.hidden_size) /
                                               static_cast<double>(la.n_key_heads));
  D0_ASSIGN_OR_RETURN(la.key_head_dim,
                      cfg.optional_int("linear_key_head_dim", std::max<int64_t>(dk_default, 1), 1));
  D0_ASSIGN_OR_RETURN(la.value_head_dim, cfg.optional_int("linear_value_head_dim", 2 * la.key_head_dim, 1));
  if (la.n_value_heads % la.n_key_heads != 0) {
    return cfg.invalid(
        "linear_num_value_heads",
        fmt::format("{} is not a multiple of linear_num_key_heads ({})", la.n_value_heads, la.n_key_heads));
  }
  D0_ASSIGN_OR_RETURN(bool negative_eigenvalues, cfg.optional_bool("linear_allow_neg_eigval", true));
  la.beta_scale = negative_eigenvalues ? 2.0 : 1.0;
  la.norm_eps = 1e-5;  // OlmoHybridGatedDeltaNet's o_norm, whatever rms_norm_eps says
  spec.linear_attention = la;
  // Initialisation ranges of A_log and dt_bias: training only.
  ignore_keys(cfg, {"linear_a_log_min", "linear_a_log_max", "linear_dt_min", "linear_dt_max",
                    "linear_dt_init_floor"});
  return Status::ok();
}

// A null rope_theta (top level, or in rope_parameters / rope_scaling) leaves the model without a rotary
// embedding: removed from `merged` so that parse_core reads the rest; returns whether it was null.
bool strip_null_theta(nlohmann::json& merged) {
  bool null_theta = false;
  if (merged.contains("rope_theta") && merged["rope_theta"].is_null()) {
    merged.erase("rope_theta");
    null_theta = true;
  }
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (!merged.contains(key) || !merged[key].is_object()) continue;
    nlohmann::json& rope = merged[key];
    if (rope.contains("rope_theta") && rope["rope_theta"].is_null()) {
      rope.erase("rope_theta");
      null_theta = true;
    }
  }
  return null_theta;
}

Status parse_olmo_hybrid(const ConfigReader& cfg, ModelSpec& spec) {
  nlohmann::json merged = cfg.json();
  for (const auto& [key, fallback] : kCoreDefaults) {
    if (!merged.contains(key)) merged[key] = fallback;
  }
  const bool no_rope = strip_null_theta(merged);
  const ConfigReader core = cfg.derived(merged, "");
  FamilyDefaults defaults;  // OlmoHybridConfig
  defaults.rms_norm_eps = 1e-6;
  defaults.rope_theta = 10000.0;
  defaults.max_position_embeddings = 65536;
  D0_RETURN_IF_ERROR(parse_core(core, defaults, spec));
  // The default rotary embedding spans the whole head whatever partial_rotary_factor says.
  if (spec.partial_rotary_factor != 1.0) {
    return unsupported(
        fmt::format("{}: partial_rotary_factor {} (transformers' OLMo-Hybrid rotates the whole head)",
                    cfg.source(), spec.partial_rotary_factor));
  }
  D0_RETURN_IF_ERROR(parse_attention_bias(core, spec));
  spec.norm_gain_f32 = true;  // weight times the float32 normed row, then one cast
  spec.qk_norm = true;
  spec.qk_norm_full_width = true;
  spec.attention_post_norms = true;
  D0_RETURN_IF_ERROR(parse_olmo_deltanet(core, spec));
  D0_RETURN_IF_ERROR(parse_olmo_layer_kinds(core, spec));
  for (LayerSpec& layer : spec.layers) layer.use_rope = !no_rope;
  return Status::ok();
}

void write_olmo_hybrid(const ModelSpec& spec, nlohmann::json& out) {
  const LinearAttentionSpec& la = *spec.linear_attention;
  out["attention_bias"] = spec.qkv_bias;
  write_gated_deltanet(spec, out);
  out["linear_allow_neg_eigval"] = la.beta_scale == 2.0;
  // The class's default pad id (100277) is outside a miniature's vocabulary, where transformers' embedding
  // refuses it; the padding index changes nothing at inference.
  out["pad_token_id"] = nullptr;
  if (!spec.layers.empty() && !spec.layers.front().use_rope) {
    out.erase("rope_scaling");
    out.erase("rope_parameters");
    out["rope_theta"] = nullptr;
  }
}

// One Gated DeltaNet layer's linear_attn.*: the separate projections, the three short convs (one depthwise
// conv over [q | k | v], bound joined), A_log / dt_bias [n_v], o_norm [d_v] (plain gain) and o_proj.
void olmo_deltanet_weights(const ModelSpec& s, WeightTableBuilder& b) {
  const LinearAttentionSpec& la = *s.linear_attention;
  const int64_t H = s.hidden_size, nv = la.n_value_heads, kd = la.key_dim(), vd = la.value_dim();
  constexpr auto kAttn = TensorRole::kAttention;
  constexpr auto kProj = WeightStorage::kProjection;
  constexpr auto kF32ok = WeightStorage::kKeptF32;
  const std::string p = "linear_attn.";
  b.add(p + "q_proj.weight", {kd, H}, kProj, kAttn, weights::kColumn, WeightSlot::kLinearQ);
  b.add(p + "k_proj.weight", {kd, H}, kProj, kAttn, weights::kColumn, WeightSlot::kLinearK);
  b.add(p + "v_proj.weight", {vd, H}, kProj, kAttn, weights::kColumn, WeightSlot::kLinearV);
  b.add(p + "a_proj.weight", {nv, H}, kProj, kAttn, weights::kColumn, WeightSlot::kLinearA);
  b.add(p + "b_proj.weight", {nv, H}, kProj, kAttn, weights::kColumn, WeightSlot::kLinearB);
  b.add(p + "g_proj.weight", {vd, H}, kProj, kAttn, weights::kColumn, WeightSlot::kLinearZ);
  b.add(p + "q_conv1d.weight", {kd, 1, la.conv_kernel}, kF32ok, kAttn, weights::kColumn,
        WeightSlot::kLinearConvQ);
  b.add(p + "k_conv1d.weight", {kd, 1, la.conv_kernel}, kF32ok, kAttn, weights::kColumn,
        WeightSlot::kLinearConvK);
  b.add(p + "v_conv1d.weight", {vd, 1, la.conv_kernel}, kF32ok, kAttn, weights::kColumn,
        WeightSlot::kLinearConvV);
  b.add(p + "A_log", {nv}, kF32ok, kAttn, weights::kColumn, WeightSlot::kLinearALog);
  b.add(p + "dt_bias", {nv}, kF32ok, kAttn, weights::kColumn, WeightSlot::kLinearDtBias);
  b.add(p + "o_norm.weight", {la.value_head_dim}, kF32ok, TensorRole::kNorm, weights::kReplicated,
        WeightSlot::kLinearNorm);
  b.add(p + "o_proj.weight", {H, vd}, kProj, kAttn, weights::kRow, WeightSlot::kLinearOut);
}

// Weights: embed_tokens; per layer either attention_layer_norm, linear_attn.*, feedforward_layer_norm (the
// pre-MLP norm) or self_attn.* (q / k norms of the full width), feedforward_layer_norm (the attention
// output's norm, so named by the save) and post_feedforward_layernorm; the MLP; norm; lm_head (absent when
// tied).
void weights_olmo_hybrid(const ModelSpec& s, WeightTableBuilder& b) {
  const int64_t H = s.hidden_size, V = s.vocab_size;
  constexpr auto kF32ok = WeightStorage::kKeptF32;
  const auto norm = [&](const char* name, WeightSlot slot) {
    b.add(name, {H}, kF32ok, TensorRole::kNorm, weights::kReplicated, slot);
  };
  b.add("embed_tokens.weight", {V, H}, WeightStorage::kPlain, TensorRole::kEmbedding, weights::kVocab,
        WeightSlot::kEmbedding);
  for (int64_t n = 0; n < s.n_layers; ++n) {
    b.begin_layer(n);
    if (s.layers[static_cast<size_t>(n)].linear_attention) {
      norm("attention_layer_norm.weight", WeightSlot::kInputNorm);
      olmo_deltanet_weights(s, b);
      norm("feedforward_layer_norm.weight", WeightSlot::kPostNorm);
    } else {
      weights::gqa_attention(s, b);
      norm("feedforward_layer_norm.weight", WeightSlot::kAttnOutNorm);
      norm("post_feedforward_layernorm.weight", WeightSlot::kFfnOutNorm);
    }
    weights::dense_mlp(s, b, "mlp.", s.intermediate_size, false);
    b.end_layer();
  }
  norm("norm.weight", WeightSlot::kFinalNorm);
  if (!s.tie_word_embeddings) {
    b.add_absolute("lm_head.weight", {V, H}, WeightStorage::kPlain, TensorRole::kLmHead, weights::kVocab,
                   WeightSlot::kLmHead);
  }
  b.ignore_prefix("mtp.");
  // transformers' in-memory names (what it converts the stored ones to on load).
  b.stored_layout({.name = "OLMo-Hybrid in-memory names (input_layernorm, one conv1d)",
                   .renames = {{"attention_layer_norm.", "input_layernorm."},
                               {"feedforward_layer_norm.", "post_attention_layernorm."}},
                   .fused = {{{"linear_attn.q_conv1d.weight", "linear_attn.k_conv1d.weight",
                               "linear_attn.v_conv1d.weight"},
                              "linear_attn.conv1d.weight"}}});
}

// Attention layers norm only their blocks' outputs (the blocks read the residual stream itself); the
// Gated DeltaNet layers are pre-norm.
LayerRecipe layer_recipe_olmo_hybrid(const ModelSpec& spec, int64_t layer) {
  const LayerSpec& ls = spec.layers[static_cast<size_t>(layer)];
  if (ls.linear_attention) return standard_layer_recipe(spec, layer);
  LayerRecipe r;
  add_residual_block(r, LayerOp::kMixer, LayerValue::kStream, true, LayerNorm::kAttnOut);
  add_residual_block(r, ls.moe ? LayerOp::kMoe : LayerOp::kDenseMlp, LayerValue::kStream, true,
                     LayerNorm::kFfnOut);
  return r;
}

const FamilyRegistrar kFamily({
    .model_types = {"olmo_hybrid"},
    .architectures = {"OlmoHybridForCausalLM"},
    .summary = "Gated DeltaNet (beta x 2) with OLMo 2 post-norm attention every 4th layer, dense MLP",
    .parse = parse_olmo_hybrid,
    .write = write_olmo_hybrid,
    .weights = weights_olmo_hybrid,
    .layer_recipe = layer_recipe_olmo_hybrid,
});

}  // namespace
}  // namespace day0::families
