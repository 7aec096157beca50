// Llama 4 text model (Llama4ForCausalLM, or the text_config of Llama4ForConditionalGeneration):
// chunked attention on RoPE layers, full attention without RoPE on every 4th layer (with
// temperature tuning), weightless q/k norm after RoPE, and MoE layers every
// interleave_moe_layer_step with one routed expert (sigmoid, input scaling) plus a shared expert.
#include <algorithm>

#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {

Status parse_llama4_text(const ConfigReader& cfg, ModelSpec& spec) {
  FamilyDefaults defaults;
  defaults.rms_norm_eps = 1e-5;
  defaults.rope_theta = 500000.0;
  defaults.max_position_embeddings = 4096 * 32;
  defaults.head_dim = 128;
  D0_RETURN_IF_ERROR(parse_core(cfg, defaults, spec));
  spec.rope_layout = RopeLayout::kInterleaved;
  D0_RETURN_IF_ERROR(parse_attention_bias(cfg, spec));
  D0_ASSIGN_OR_RETURN(spec.qk_norm_weightless_after_rope, cfg.optional_bool("use_qk_norm", true));
  // transformers' class default is the number 4 and the code only tests its truth: accept both forms.
  if (cfg.present("attn_temperature_tuning") && cfg.json()["attn_temperature_tuning"].is_number()) {
    D0_ASSIGN_OR_RETURN(double tuning, cfg.required_double("attn_temperature_tuning"));
    spec.attn_temperature_tuning = tuning != 0.0;
  } else {
    D0_ASSIGN_OR_RETURN(spec.attn_temperature_tuning, cfg.optional_bool("attn_temperature_tuning", true));
  }
  D0_ASSIGN_OR_RETURN(spec.attn_scale, cfg.optional_double("attn_scale", 0.1));
  D0_ASSIGN_OR_RETURN(spec.floor_scale, cfg.optional_int("floor_scale", 8192, 1));
  D0_ASSIGN_OR_RETURN(spec.attention_chunk_size, cfg.optional_int("attention_chunk_size", 8192, 1));
  D0_ASSIGN_OR_RETURN(int64_t dense_width, cfg.optional_int("intermediate_size_mlp", 16384, 1));

  MoeSpec moe;
  D0_ASSIGN_OR_RETURN(moe.n_experts, cfg.optional_int("num_local_experts", 16, 1, kMaxExperts));
  D0_ASSIGN_OR_RETURN(moe.experts_per_token, cfg.optional_int("num_experts_per_tok", 1, 1, moe.n_experts));
  moe.expert_intermediate = spec.intermediate_size;
  moe.n_shared_experts = 1;
  moe.shared_intermediate = spec.intermediate_size;
  moe.scoring = RouterScoring::kSigmoid;
  moe.topk_method = TopkMethod::kLogitsThenSigmoid;
  spec.moe = moe;

  D0_ASSIGN_OR_RETURN(int64_t step, cfg.optional_int("interleave_moe_layer_step", 1, 1));
  D0_ASSIGN_OR_RETURN(std::vector<int64_t> moe_layers,
                      cfg.optional_int_list("moe_layers", 0, spec.n_layers - 1));
  if (!cfg.present("moe_layers")) {
    for (int64_t n = step - 1; n < spec.n_layers; n += step) moe_layers.push_back(n);
  }
  D0_ASSIGN_OR_RETURN(std::vector<int64_t> rope_flags, cfg.optional_int_list("no_rope_layers", 0, 1));
  D0_ASSIGN_OR_RETURN(int64_t nope_interval, cfg.optional_int("no_rope_layer_interval", 4, 1));
  if (rope_flags.empty()) {
    for (int64_t n = 0; n < spec.n_layers; ++n) rope_flags.push_back((n + 1) % nope_interval != 0 ? 1 : 0);
  }
  if (static_cast<int64_t>(rope_flags.size()) != spec.n_layers) {
    return cfg.invalid("no_rope_layers", "must have one entry per layer");
  }
  for (int64_t n = 0; n < spec.n_layers; ++n) {
    LayerSpec& layer = spec.layers[static_cast<size_t>(n)];
    layer.use_rope = rope_flags[static_cast<size_t>(n)] != 0;  // 1 = this layer uses RoPE
    layer.moe = std::find(moe_layers.begin(), moe_layers.end(), n) != moe_layers.end();
    layer.dense_intermediate = layer.moe ? 0 : dense_width;
    layer.mask = layer.use_rope ? AttentionMask::kChunked : AttentionMask::kCausal;
    layer.window = layer.use_rope ? spec.attention_chunk_size : 0;
  }
  D0_ASSIGN_OR_RETURN(bool listed, apply_layer_types(cfg, spec));
  (void)listed;
  return Status::ok();
}

void write_llama4_text(const ModelSpec& spec, nlohmann::json& out) {
  out["attention_bias"] = spec.qkv_bias;
  out["use_qk_norm"] = spec.qk_norm_weightless_after_rope;
  out["attn_temperature_tuning"] = spec.attn_temperature_tuning;
  out["attn_scale"] = spec.attn_scale;
  out["floor_scale"] = spec.floor_scale;
  out["attention_chunk_size"] = spec.attention_chunk_size;
  out["num_local_experts"] = spec.moe->n_experts;
  out["num_experts_per_tok"] = spec.moe->experts_per_token;
  out["intermediate_size"] = spec.moe->expert_intermediate;
  int64_t dense_width = 0;
  nlohmann::json moe_layers = nlohmann::json::array();
  nlohmann::json no_rope = nlohmann::json::array();
  for (int64_t n = 0; n < spec.n_layers; ++n) {
    const LayerSpec& layer = spec.layers[static_cast<size_t>(n)];
    if (layer.moe) moe_layers.push_back(n);
    if (!layer.moe) dense_width = layer.dense_intermediate;
    no_rope.push_back(layer.use_rope ? 1 : 0);
  }
  out["intermediate_size_mlp"] = dense_width > 0 ? dense_width : 16384;
  out["moe_layers"] = moe_layers;
  out["interleave_moe_layer_step"] = 1;
  out["no_rope_layers"] = no_rope;
  write_layer_types(spec, out);
}

// Weights: `feed_forward.` is a dense SwiGLU, or a router, fused x @ W experts (gate_up [E, H, 2I],
// gate the first half; down [E, I, H]) and a shared expert.
void weights_llama4_text(const ModelSpec& s, WeightTableBuilder& b) {
  weights::decoder(s, b, [&](WeightTableBuilder& lb, const LayerSpec& layer) {
    if (!layer.moe) return weights::dense_mlp(s, lb, "feed_forward.", layer.dense_intermediate, false);
    const int64_t H = s.hidden_size, I = s.moe->expert_intermediate, E = s.moe->n_experts;
    weights::router(s, lb, "feed_forward.router.weight");
    lb.add("feed_forward.experts.gate_up_proj", {E, H, 2 * I}, WeightStorage::kPlain,
           TensorRole::kRoutedExpert, weights::kStackedExperts, WeightSlot::kExpertsGateUpConcat);
    lb.add("feed_forward.experts.down_proj", {E, I, H}, WeightStorage::kPlain, TensorRole::kRoutedExpert,
           weights::kStackedExperts, WeightSlot::kExpertsDown);
    weights::shared_expert(s, lb, "feed_forward.shared_expert.", s.moe->shared_intermediate);
  });
}

const FamilyRegistrar kFamily({
    .model_types = {"llama4_text", "llama4"},
    .architectures = {"Llama4ForCausalLM"},
    .summary = "chunked GQA with NoPE layers, sigmoid top-1 MoE plus a shared expert",
    .wrapper_architectures = {"Llama4ForConditionalGeneration"},
    .parse = parse_llama4_text,
    .write = write_llama4_text,
    .weights = weights_llama4_text,
});

}  // namespace day0::families
