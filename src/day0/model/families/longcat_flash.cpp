// LongcatFlashForCausalLM (LongCat-Flash): each Hugging Face layer N holds two MLA sublayers with a
// dense SwiGLU each, and one MoE that reads the first sublayer's post-attention norm and is added after
// the second (the shortcut). The engine's layers are the sublayers, 2N and 2N + 1 (the KV cache ids
// transformers uses); the even one carries the MoE (spec.shortcut_moe). MLA rescales q by
// sqrt(H / q_lora_rank) and the normed latent by sqrt(H / kv_lora_rank). The router is a float32
// softmax over n_routed_experts + zero_expert_num; the correction bias only selects; the picked
// scores are not renormalised, times routed_scaling_factor; a zero expert returns its input, so a
// token uses 0 ... moe_topk real experts.
#include <fmt/format.h>
#include <cmath>

#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {

// The release carries switches that transformers' LongcatFlash model never reads (it hard-codes their
// released value): require_released refuses another value, naming this code.
constexpr const char* kImplementation = "LongCat-Flash";

namespace {

// LongcatFlashConfig class defaults for the MLA sizes (parse_mla requires them present).
constexpr std::pair<const char*, int64_t> kMlaDefaults[] = {{"q_lora_rank", 1536},
                                                            {"kv_lora_rank", 512},
                                                            {"qk_nope_head_dim", 128},
                                                            {"qk_rope_head_dim", 64},
                                                            {"v_head_dim", 128}};

// LongCat-Flash activates ~27B of its parameters a token on average (18.6B ... 31.3B): about 8 of the
// 12 picks are real experts. The planner plans for that share.
constexpr double kPublishedRealExpertShare = 8.0 / 12.0;

}  // namespace

Status parse_longcat_flash(const ConfigReader& cfg, ModelSpec& spec) {
  // The reference keeps the router in float32: its logits and the routing weights.
  spec.router_logits_f32 = true;
  spec.routing_weights_f32 = true;
  // num_layers counts the Hugging Face layers; transformers 5 derives num_hidden_layers = 2 *
  // num_layers (not saved), transformers 4 saves both.
  D0_ASSIGN_OR_RETURN(int64_t n_hf_layers, cfg.optional_int("num_layers", 28, 1, kMaxLayers / 2));
  if (cfg.present("num_hidden_layers")) {
    D0_ASSIGN_OR_RETURN(int64_t sublayers, cfg.required_int("num_hidden_layers", 1, kMaxLayers));
    if (sublayers != 2 * n_hf_layers) {
      return cfg.invalid("num_hidden_layers",
                         fmt::format("{} disagrees with 2 * num_layers = {}", sublayers, 2 * n_hf_layers));
    }
  }
  // The dense MLP width and the MLA sizes under the names the shared parsers read.
  nlohmann::json merged = cfg.json();
  merged["num_hidden_layers"] = 2 * n_hf_layers;
  D0_ASSIGN_OR_RETURN(int64_t ffn, aliased_int(cfg, {"ffn_hidden_size", "intermediate_size"}, 1,
                                               ConfigReader::kMaxSize, 12288));
  merged["intermediate_size"] = ffn;
  for (const auto& [key, fallback] : kMlaDefaults) {
    if (!merged.contains(key)) merged[key] = fallback;
  }
  const ConfigReader core = cfg.derived(merged, "");

  FamilyDefaults defaults;  // LongcatFlashConfig
  defaults.rms_norm_eps = 1e-5;
  defaults.rope_theta = 1e7;
  defaults.max_position_embeddings = 131072;
  defaults.head_dim = 64;
  D0_RETURN_IF_ERROR(parse_core(core, defaults, spec));
  // The rotary embedding's width is head_dim; the attention rotates qk_rope_head_dim dimensions.
  const int64_t rope_width = spec.head_dim;
  if (spec.n_kv_heads != spec.n_heads) {
    return cfg.invalid(
        "num_key_value_heads",
        fmt::format("{} differs from num_attention_heads ({}): LongCat-Flash's MLA expands the "
                    "latent to one key head per query head",
                    spec.n_kv_heads, spec.n_heads));
  }
  D0_RETURN_IF_ERROR(parse_mla(core, MlaDefaults{}, spec));
  MlaSpec& mla = *spec.mla;
  if (mla.q_lora_rank <= 0) {
    return unsupported(
        fmt::format("{}: q_lora_rank: null is not supported (LongCat-Flash always compresses "
                    "the queries through q_a_proj)",
                    cfg.source()));
  }
  if (rope_width != mla.qk_rope_head_dim) {
    return cfg.invalid("head_dim", fmt::format("{} (the RoPE width) disagrees with qk_rope_head_dim {}",
                                               rope_width, mla.qk_rope_head_dim));
  }
  spec.rope_layout = RopeLayout::kInterleaved;  // transformers always rotates interleaved pairs
  const auto h = static_cast<double>(spec.hidden_size);
  mla.q_scale = std::sqrt(h / static_cast<double>(mla.q_lora_rank));
  mla.latent_scale = std::sqrt(h / static_cast<double>(mla.kv_lora_rank));
  D0_RETURN_IF_ERROR(require_released(cfg, "mla_scale_q_lora", true, kImplementation));
  D0_RETURN_IF_ERROR(require_released(cfg, "mla_scale_kv_lora", true, kImplementation));
  D0_RETURN_IF_ERROR(require_released(cfg, "zero_expert_type", "identity", kImplementation));
  // transformers allocates classifier.bias for router_bias: true but never adds it.
  D0_RETURN_IF_ERROR(require_released(cfg, "router_bias", false, kImplementation));

  MoeSpec moe;
  D0_ASSIGN_OR_RETURN(moe.n_experts, aliased_int(cfg, {"n_routed_experts", "num_local_experts"}, 1,
                                                 kMaxExperts, int64_t{512}));
  // `zero_expert_num or 0`: null means none.
  if (cfg.contains("zero_expert_num") && !cfg.present("zero_expert_num")) {
    moe.n_zero_experts = 0;
  } else {
    D0_ASSIGN_OR_RETURN(moe.n_zero_experts, cfg.optional_int("zero_expert_num", 256, 0, kMaxExperts));
  }
  D0_ASSIGN_OR_RETURN(moe.experts_per_token, aliased_int(cfg, {"moe_topk", "num_experts_per_tok"}, 1,
                                                         moe.n_experts + moe.n_zero_experts, int64_t{12}));
  D0_ASSIGN_OR_RETURN(moe.expert_intermediate,
                      aliased_int(cfg, {"expert_ffn_hidden_size", "moe_intermediate_size"}, 1,
                                  ConfigReader::kMaxSize, int64_t{2048}));
  D0_ASSIGN_OR_RETURN(moe.routed_scaling_factor, cfg.optional_double("routed_scaling_factor", 6.0));
  moe.scoring = RouterScoring::kSoftmax;
  moe.topk_method = TopkMethod::kNoauxTc;  // one group: top-k of softmax + bias
  moe.correction_bias = true;
  moe.norm_topk_prob = false;
  moe.mean_real_expert_share = moe.n_zero_experts > 0 ? kPublishedRealExpertShare : 1.0;
  spec.moe = moe;
  spec.shortcut_moe = true;
  for (int64_t l = 0; l < spec.n_layers; ++l) {
    LayerSpec& layer = spec.layers[static_cast<size_t>(l)];
    layer.moe = l % 2 == 0;  // the pair's MoE lives on its first sublayer
    layer.dense_intermediate = ffn;
  }
  // Multi-token prediction (model.mtp.*) is dropped by transformers and never decoded.
  ignore_keys(cfg, {"mtp_num_layers", "num_nextn_predict_layers"});
  return Status::ok();
}

void write_longcat_flash(const ModelSpec& spec, nlohmann::json& out) {
  write_mla(spec, out);
  out.erase("intermediate_size");
  out["ffn_hidden_size"] = spec.intermediate_size;
  out["num_layers"] = spec.n_layers / 2;
  out["qk_head_dim"] = spec.mla->qk_nope_head_dim + spec.mla->qk_rope_head_dim;
  const MoeSpec& moe = *spec.moe;
  out["n_routed_experts"] = moe.n_experts;
  out["zero_expert_num"] = moe.n_zero_experts;
  out["moe_topk"] = moe.experts_per_token;
  out["expert_ffn_hidden_size"] = moe.expert_intermediate;
  out["routed_scaling_factor"] = moe.routed_scaling_factor;
  out["mla_scale_q_lora"] = true;
  out["mla_scale_kv_lora"] = true;
  out["zero_expert_type"] = "identity";
  out["router_bias"] = false;
}

// Weights of Hugging Face layer N (engine layers 2N + i, i = 0, 1): input_layernorm.i,
// self_attn.i.* (MLA), post_attention_layernorm.i, mlps.i.* (dense SwiGLU), and once per layer the
// MoE: mlp.router.classifier [E + Z, H] with its correction bias, experts 0 ... E - 1.
// transformers sizes gate_up_proj for E + Z experts, so save_pretrained also writes gate/up rows of
// the zero experts (never read, not in the release): listed as unused.
void weights_longcat_flash(const ModelSpec& s, WeightTableBuilder& b) {
  const int64_t H = s.hidden_size, V = s.vocab_size;
  const MoeSpec& m = *s.moe;
  const int64_t scored = m.n_experts + m.n_zero_experts;
  b.add("embed_tokens.weight", {V, H}, WeightStorage::kPlain, TensorRole::kEmbedding, weights::kVocab,
        WeightSlot::kEmbedding);
  for (int64_t l = 0; l < s.n_layers; ++l) {
    const std::string i = std::to_string(l % 2) + ".";
    b.begin_layer(l, l / 2);
    if (s.layers[static_cast<size_t>(l)].moe) {
      b.add("mlp.router.classifier.weight", {scored, H}, WeightStorage::kKeptF32, TensorRole::kRouter,
            weights::kReplicated, WeightSlot::kRouter);
      b.add("mlp.router.e_score_correction_bias", {scored}, WeightStorage::kKeptF32, TensorRole::kRouter,
            weights::kReplicated, WeightSlot::kCorrectionBias);
      weights::separate_experts(s, b, "mlp.experts.{E}.");
      for (int64_t e = m.n_experts; e < scored; ++e) {
        for (const char* proj : {"gate_proj", "up_proj"}) {
          b.add_unused(fmt::format("mlp.experts.{{E}}.{}.weight", proj), {m.expert_intermediate, H},
                       WeightStorage::kPlain, TensorRole::kRoutedExpert, e);
        }
      }
    }
    b.add("input_layernorm." + i + "weight", {H}, WeightStorage::kKeptF32, TensorRole::kNorm,
          weights::kReplicated, WeightSlot::kInputNorm);
    weights::mla_attention(s, b, "self_attn." + i);
    b.add("post_attention_layernorm." + i + "weight", {H}, WeightStorage::kKeptF32, TensorRole::kNorm,
          weights::kReplicated, WeightSlot::kPostNorm);
    weights::dense_mlp(s, b, "mlps." + i, s.intermediate_size, false);
    b.end_layer();
  }
  b.add("norm.weight", {H}, WeightStorage::kKeptF32, TensorRole::kNorm, weights::kReplicated,
        WeightSlot::kFinalNorm);
  if (!s.tie_word_embeddings) {
    b.add_absolute("lm_head.weight", {V, H}, WeightStorage::kPlain, TensorRole::kLmHead, weights::kVocab,
                   WeightSlot::kLmHead);
  }
}

// Layer pairs (shortcut MoE): the first layer of a pair runs its MoE beside its dense MLP on the same
// norm and holds the MoE's output; the second adds it after its own FFN. The reference counts a pair as
// one layer.
LayerRecipe layer_recipe_longcat_flash(const ModelSpec& spec, int64_t layer) {
  const bool first = spec.layers[static_cast<size_t>(layer)].moe;
  LayerRecipe r;
  add_norm(r, LayerNorm::kInput);
  add_residual_block(r, LayerOp::kMixer, LayerValue::kNormed, spec.sandwich_norms, LayerNorm::kAttnOut);
  add_norm(r, LayerNorm::kPost);
  if (first) r.steps.push_back({.op = LayerOp::kMoe, .in = LayerValue::kNormed, .out = LayerValue::kCarry});
  add_residual_block(r, LayerOp::kDenseMlp, LayerValue::kNormed, spec.sandwich_norms, LayerNorm::kFfnOut);
  if (!first)
    r.steps.push_back({.op = LayerOp::kResidualAdd, .in = LayerValue::kCarry, .out = LayerValue::kStream});
  r.ends_reference_layer = !first;
  return r;
}

const FamilyRegistrar kFamily({
    .model_types = {"longcat_flash"},
    .architectures = {"LongcatFlashForCausalLM"},
    .summary = "MLA sublayer pairs, MoE with zero-computation experts added after the pair",
    .parse = parse_longcat_flash,
    .write = write_longcat_flash,
    .weights = weights_longcat_flash,
    .layer_recipe = layer_recipe_longcat_flash,
});

}  // namespace day0::families
