// Cohere2MoeForCausalLM (Cohere Command A+ MoE; model_type cohere2_moe): Cohere's parallel block, where
// attention and FFN both read the layer's one input norm and join the residual together (x + attn +
// ffn), under a LayerNorm without bias (mean removed, gain in float32; an RMSNorm when the config sets
// rms_norm_eps). layer_types mixes sliding layers with interleaved RoPE (rotated in float32) and full
// layers without it (NoPE), except dense prefix layers when prefix_dense_sliding_window_pattern is 1.
// mlp_layer_types puts a dense SwiGLU (prefix_dense_intermediate_size) or the MoE in each layer: top-k of
// the router's logits (activation dtype), a float32 softmax over the k picks cast back, Mixtral-style
// experts intermediate_size wide, and num_shared_experts shared ones averaged with (or added to) the
// routed sum. The head's logits are scaled by logit_scale; embeddings tied by default. Checked against
// transformers' models/cohere2_moe (configuration_cohere2_moe.py, modular_cohere2_moe.py,
// modeling_cohere2_moe.py); transformers 4.57.6 lacks it (remote code).
#include <fmt/format.h>

#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {
namespace {

// A pattern of `n` layers: sliding unless (i + 1) % period == 0 (Cohere2MoeConfig's derivation).
std::vector<std::string> cohere_attention_pattern(int64_t n, int64_t period) {
  std::vector<std::string> out;
  for (int64_t i = 0; i < n; ++i)
    out.push_back((i + 1) % period != 0 ? "sliding_attention" : "full_attention");
  return out;
}

// layer_types and mlp_layer_types, or what the class derives from first_k_dense_replace (a keyword it
// consumes without saving) and the two sliding patterns; the layers' masks, RoPE and FFN kinds.
Status parse_cohere_layers(const ConfigReader& cfg, ModelSpec& spec, int64_t prefix_pattern) {
  D0_ASSIGN_OR_RETURN(int64_t first_dense, cfg.optional_int("first_k_dense_replace", 0, 0, spec.n_layers));
  D0_ASSIGN_OR_RETURN(int64_t pattern, cfg.optional_int("sliding_window_pattern", 4, 1));
  nlohmann::json merged = cfg.json();
  if (!cfg.present("layer_types")) {
    std::vector<std::string> types = cohere_attention_pattern(first_dense, prefix_pattern);
    for (auto& t : cohere_attention_pattern(spec.n_layers - first_dense, pattern)) types.push_back(t);
    merged["layer_types"] = types;
  }
  D0_ASSIGN_OR_RETURN(std::vector<std::string> mlp, cfg.optional_string_list("mlp_layer_types"));
  if (mlp.empty()) {
    for (int64_t i = 0; i < spec.n_layers; ++i) mlp.push_back(i < first_dense ? "dense" : "sparse");
  } else if (cfg.present("first_k_dense_replace")) {
    for (int64_t i = 0; i < spec.n_layers; ++i) {
      if ((mlp[static_cast<size_t>(i)] == "dense") != (i < first_dense)) {
        return cfg.invalid("first_k_dense_replace",
                           fmt::format("{} disagrees with mlp_layer_types (layer {} is {})", first_dense, i,
                                       mlp[static_cast<size_t>(i)]));
      }
    }
  }
  const ConfigReader layers = cfg.derived(merged, "");
  D0_ASSIGN_OR_RETURN(bool listed, apply_layer_types(layers, spec));
  if (!listed) return cfg.mismatch("layer_types", "one entry per layer");
  D0_RETURN_IF_ERROR(apply_mlp_layer_types(cfg, mlp, spec));
  for (LayerSpec& l : spec.layers) {
    // Sliding layers rotate; full layers do not (NoPE), but a dense one does with the prefix pattern 1.
    l.use_rope = l.mask == AttentionMask::kSliding || (!l.moe && prefix_pattern == 1);
  }
  return Status::ok();
}

Status parse_cohere2_moe(const ConfigReader& cfg, ModelSpec& spec) {
  spec.parallel_attention_ffn = true;
  // rms_norm_eps (default null) chooses the RMSNorm; otherwise LayerNorm with layer_norm_eps.
  nlohmann::json merged = cfg.json();
  spec.layer_norm_decoder = !cfg.present("rms_norm_eps");
  if (spec.layer_norm_decoder) {
    D0_ASSIGN_OR_RETURN(double eps, cfg.optional_double("layer_norm_eps", 1e-5));
    merged["rms_norm_eps"] = eps;
  } else {
    cfg.mark_used("layer_norm_eps");  // unused beside an RMSNorm
  }
  const ConfigReader core = cfg.derived(merged, "");
  FamilyDefaults defaults;  // Cohere2MoeConfig
  defaults.rope_theta = 10000.0;
  defaults.max_position_embeddings = 8192;
  defaults.head_dim = 128;
  defaults.training_only_attention_dropout = true;  // Cohere2MoeAttention drops in training only
  D0_RETURN_IF_ERROR(parse_core(core, defaults, spec));
  // The class keeps a rope_scaling field beside rope_parameters; transformers 5 saves it null.
  if (cfg.contains("rope_scaling") && cfg.json().at("rope_scaling").is_null()) cfg.mark_used("rope_scaling");
  D0_ASSIGN_OR_RETURN(spec.tie_word_embeddings, cfg.optional_bool("tie_word_embeddings", true));
  D0_ASSIGN_OR_RETURN(spec.logit_scale, cfg.optional_double("logit_scale", 0.0625));
  // The rotary tables follow the factor, the rotation the whole head: only 1 runs as transformers runs it.
  if (spec.partial_rotary_factor != 1.0) {
    return unsupported(
        fmt::format("{}: partial_rotary_factor: {} is not supported (Cohere rotates the whole "
                    "head; Day0 implements 1)",
                    cfg.source(), spec.partial_rotary_factor));
  }
  spec.rope_layout = RopeLayout::kInterleaved;  // pairs (2i, 2i + 1), rotated in float32
  D0_ASSIGN_OR_RETURN(bool bias, cfg.optional_bool("attention_bias", false));
  spec.qkv_bias = bias;  // q, k, v and o
  spec.o_bias = bias;

  MoeSpec moe;
  D0_ASSIGN_OR_RETURN(moe.n_experts, cfg.optional_int("num_experts", 8, 1, kMaxExperts));
  D0_ASSIGN_OR_RETURN(moe.experts_per_token, cfg.optional_int("num_experts_per_tok", 2, 1, moe.n_experts));
  moe.expert_intermediate = spec.intermediate_size;  // the experts are intermediate_size wide
  D0_ASSIGN_OR_RETURN(moe.n_shared_experts, cfg.optional_int("num_shared_experts", 0, 0, kMaxExperts));
  moe.shared_intermediate = moe.n_shared_experts * spec.intermediate_size;
  D0_ASSIGN_OR_RETURN(std::string selection, cfg.optional_string("expert_selection_fn", "softmax"));
  if (selection != "softmax") {
    return unsupported(fmt::format(
        "{}: expert_selection_fn: \"{}\" is not supported (Day0 implements \"softmax\": the sigmoid of the "
        "picked logits weighting the experts' outputs is not built)",
        cfg.source(), selection));
  }
  moe.scoring = RouterScoring::kSoftmax;
  moe.topk_method = TopkMethod::kLogitsThenSoftmax;
  D0_ASSIGN_OR_RETURN(moe.norm_topk_prob, cfg.optional_bool("norm_topk_prob", true));  // sigmoid's only
  D0_ASSIGN_OR_RETURN(std::string combine,
                      cfg.optional_string("shared_expert_combination_strategy", "average"));
  if (combine != "average" && combine != "sum") {
    return cfg.mismatch("shared_expert_combination_strategy", "\"average\" or \"sum\"");
  }
  moe.shared_combine_scale = combine == "average" ? 0.5 : 1.0;
  spec.moe = moe;

  D0_ASSIGN_OR_RETURN(spec.sliding_window, cfg.optional_int("sliding_window", 4096, 0));
  D0_ASSIGN_OR_RETURN(int64_t prefix_pattern, cfg.optional_int("prefix_dense_sliding_window_pattern", 1, 1));
  D0_RETURN_IF_ERROR(parse_cohere_layers(cfg, spec, prefix_pattern));
  // Dense layers: prefix_dense_intermediate_size (null: intermediate_size).
  D0_ASSIGN_OR_RETURN(int64_t dense,
                      cfg.optional_int("prefix_dense_intermediate_size", spec.intermediate_size, 1));
  for (LayerSpec& l : spec.layers) l.dense_intermediate = l.moe ? 0 : dense;
  return Status::ok();
}

void write_cohere2_moe(const ModelSpec& spec, nlohmann::json& out) {
  const MoeSpec& moe = *spec.moe;
  if (spec.layer_norm_decoder) {
    out["layer_norm_eps"] = spec.rms_norm_eps;
    out["rms_norm_eps"] = nullptr;
  }
  out["logit_scale"] = spec.logit_scale;
  out["attention_bias"] = spec.qkv_bias;
  out["num_experts"] = moe.n_experts;
  out["num_experts_per_tok"] = moe.experts_per_token;
  out["num_shared_experts"] = moe.n_shared_experts;
  out["shared_expert_combination_strategy"] = moe.shared_combine_scale == 1.0 ? "sum" : "average";
  out["expert_selection_fn"] = "softmax";
  out["norm_topk_prob"] = moe.norm_topk_prob;
  out["sliding_window"] =
      spec.sliding_window > 0 ? nlohmann::json(spec.sliding_window) : nlohmann::json(nullptr);
  write_layer_types(spec, out);
  nlohmann::json mlp = nlohmann::json::array();
  int64_t dense = 0;
  bool dense_full_rope = true;  // what prefix_dense_sliding_window_pattern 1 gives a dense full layer
  for (const LayerSpec& l : spec.layers) {
    mlp.push_back(l.moe ? "sparse" : "dense");
    if (!l.moe) dense = l.dense_intermediate;
    if (!l.moe && l.mask != AttentionMask::kSliding) dense_full_rope = l.use_rope;
  }
  out["mlp_layer_types"] = mlp;
  out["prefix_dense_intermediate_size"] = dense > 0 ? nlohmann::json(dense) : nlohmann::json(nullptr);
  out["prefix_dense_sliding_window_pattern"] = dense_full_rope ? 1 : 2;
}

// Weights: no post-attention norm (the block is parallel); each layer's FFN a dense mlp, or mlp.gate,
// mlp.experts.{E}.* (saved one tensor per expert) and mlp.shared_experts.*.
void weights_cohere2_moe(const ModelSpec& s, WeightTableBuilder& b) {
  const int64_t H = s.hidden_size, V = s.vocab_size;
  b.add("embed_tokens.weight", {V, H}, WeightStorage::kPlain, TensorRole::kEmbedding, weights::kVocab,
        WeightSlot::kEmbedding);
  for (int64_t n = 0; n < s.n_layers; ++n) {
    const LayerSpec& layer = s.layers[static_cast<size_t>(n)];
    b.begin_layer(n);
    b.add("input_layernorm.weight", {H}, WeightStorage::kKeptF32, TensorRole::kNorm, weights::kReplicated,
          WeightSlot::kInputNorm);
    weights::gqa_attention(s, b);
    if (layer.moe) {
      weights::router(s, b, "mlp.gate.weight");
      weights::separate_experts(s, b, "mlp.experts.{E}.");
      if (s.moe->shared_intermediate > 0)
        weights::shared_expert(s, b, "mlp.shared_experts.", s.moe->shared_intermediate);
    } else {
      weights::dense_mlp(s, b, "mlp.", layer.dense_intermediate, false);
    }
    b.end_layer();
  }
  b.add("norm.weight", {H}, WeightStorage::kKeptF32, TensorRole::kNorm, weights::kReplicated,
        WeightSlot::kFinalNorm);
  if (!s.tie_word_embeddings) {
    b.add_absolute("lm_head.weight", {V, H}, WeightStorage::kPlain, TensorRole::kLmHead, weights::kVocab,
                   WeightSlot::kLmHead);
  }
}

// A parallel block: attention and FFN both read the input norm; x + attention, rounded, + FFN, rounded.
LayerRecipe layer_recipe_cohere2_moe(const ModelSpec& spec, int64_t layer) {
  const LayerSpec& ls = spec.layers[static_cast<size_t>(layer)];
  LayerRecipe r;
  add_norm(r, LayerNorm::kInput);
  r.steps.push_back({.op = LayerOp::kMixer, .in = LayerValue::kNormed, .out = LayerValue::kOut});
  if (spec.sandwich_norms) {
    r.steps.push_back({.op = LayerOp::kOutputNorm,
                       .in = LayerValue::kOut,
                       .out = LayerValue::kOut,
                       .norm = LayerNorm::kAttnOut});
  }
  r.steps.push_back({.op = ls.moe ? LayerOp::kMoe : LayerOp::kDenseMlp,
                     .in = LayerValue::kNormed,
                     .out = LayerValue::kSide});
  r.steps.push_back({.op = LayerOp::kResidualAdd, .in = LayerValue::kOut, .out = LayerValue::kStream});
  r.steps.push_back({.op = LayerOp::kResidualAdd, .in = LayerValue::kSide, .out = LayerValue::kStream});
  return r;
}

const FamilyRegistrar kFamily({
    .model_types = {"cohere2_moe"},
    .architectures = {"Cohere2MoeForCausalLM"},
    .summary = "Cohere's parallel block: sliding RoPE / full NoPE GQA, logits-top-k MoE averaged with shared "
               "experts",
    .parse = parse_cohere2_moe,
    .write = write_cohere2_moe,
    .weights = weights_cohere2_moe,
    .layer_recipe = layer_recipe_cohere2_moe,
});

}  // namespace
}  // namespace day0::families
