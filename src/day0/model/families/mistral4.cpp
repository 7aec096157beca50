// Mistral4ForCausalLM (Mistral Small 4): DeepSeek-V3's MLA (q LoRA, interleaved RoPE, YaRN mscale) with
// the Llama 4 attention temperature on every layer's q, scaled by 1 + beta * ln(1 + floor(p / original
// context)) and rounded to the activation dtype before the product; every layer (first_k_dense_replace
// 0) a softmax top-k MoE, renormalised and scaled, with a shared expert, routed in the activation dtype.
// Its experts are saved stacked in nn.Linear orientation. Checked against transformers' models/mistral4
// (configuration_mistral4.py, modular_mistral4.py, modeling_mistral4.py).
#include <cmath>

#include <fmt/format.h>

#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {
namespace {

// Mistral4Config's rope_parameters when the config has none.
void default_rope(ModelSpec& spec) {
  spec.rope_theta = 10000.0;
  spec.rope = RopeScaling{};
  spec.rope.type = RopeType::kYarn;
  spec.rope.factor = 128.0;
  spec.rope.original_max_position = 8192;
  spec.rope.mscale = 1.0;
  spec.rope.mscale_all_dim = 1.0;
  spec.attn_scale = 0.1;
  spec.floor_scale = 8192;
}

// The temperature's keys inside rope_parameters (v5) / rope_scaling (v4): transformers reads both
// unconditionally, so a rope object without them fails there; it fails here too.
Status parse_temperature(const ConfigReader& cfg, ModelSpec& spec) {
  D0_ASSIGN_OR_RETURN(std::optional<ConfigReader> rope, cfg.optional_object("rope_parameters"));
  if (!rope) {
    D0_ASSIGN_OR_RETURN(rope, cfg.optional_object("rope_scaling"));
  }
  if (!rope) {
    default_rope(spec);
  } else {
    D0_ASSIGN_OR_RETURN(spec.attn_scale, rope->required_double("llama_4_scaling_beta"));
    D0_ASSIGN_OR_RETURN(spec.floor_scale, rope->required_int("original_max_position_embeddings"));
    rope->mark_used("max_position_embeddings");  // a copy of the top level's the RoPE code never reads
  }
  spec.attn_temperature_tuning = spec.attn_scale != 0.0;
  spec.attn_temperature_position_offset = 0;
  spec.attn_temperature_factor_rounded = true;
  return Status::ok();
}

Status parse_mistral4(const ConfigReader& cfg, ModelSpec& spec) {
  FamilyDefaults defaults;  // Mistral4Config
  defaults.rms_norm_eps = 1e-6;
  defaults.max_position_embeddings = 1048576;
  defaults.require_intermediate = false;  // optional here: it sizes the first_k_dense_replace layers only
  D0_RETURN_IF_ERROR(parse_core(cfg, defaults, spec));
  D0_ASSIGN_OR_RETURN(spec.intermediate_size, cfg.optional_int("intermediate_size", 12288, 1));
  if (spec.n_kv_heads != spec.n_heads) {
    return unsupported(
        fmt::format("{}: num_key_value_heads: {} is not supported (MLA needs num_attention_heads)",
                    cfg.source(), spec.n_kv_heads));
  }
  // transformers sets head_dim to qk_nope + qk_rope (Day0's MLA head_dim is the RoPE width).
  D0_ASSIGN_OR_RETURN(int64_t head_dim, cfg.optional_int("head_dim", 0, 0));
  D0_RETURN_IF_ERROR(
      parse_mla(cfg, {.q_lora_rank = 1024, .kv_lora_rank = 256, .qk_nope_head_dim = 64}, spec));
  const MlaSpec& mla = *spec.mla;
  const int64_t qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim;
  if (head_dim != 0 && head_dim != qk) return cfg.mismatch("head_dim", fmt::format("{}", qk));
  // The rotary width is qk_rope_head_dim = partial_rotary_factor * (qk_nope + qk_rope).
  const double partial = static_cast<double>(mla.qk_rope_head_dim) / static_cast<double>(qk);
  if (spec.partial_rotary_factor != 1.0 && std::abs(spec.partial_rotary_factor - partial) > 1e-9) {
    return unsupported(fmt::format("{}: partial_rotary_factor: {} is not supported (Day0 implements {})",
                                   cfg.source(), spec.partial_rotary_factor, partial));
  }
  spec.partial_rotary_factor = 1.0;
  D0_RETURN_IF_ERROR(parse_temperature(cfg, spec));
  D0_ASSIGN_OR_RETURN(bool interleave, cfg.optional_bool("rope_interleave", true));
  spec.rope_layout = interleave ? RopeLayout::kInterleaved : RopeLayout::kHalfSplit;

  MoeSpec moe;  // Mistral4TopkRouter: softmax, top-k over the allowed groups, no correction bias
  D0_ASSIGN_OR_RETURN(moe.n_experts,
                      aliased_int(cfg, {"n_routed_experts", "num_local_experts"}, 1, kMaxExperts, 128));
  D0_ASSIGN_OR_RETURN(moe.experts_per_token, cfg.optional_int("num_experts_per_tok", 4, 1, moe.n_experts));
  D0_ASSIGN_OR_RETURN(moe.expert_intermediate, cfg.optional_int("moe_intermediate_size", 2048, 1));
  D0_ASSIGN_OR_RETURN(moe.n_shared_experts, cfg.optional_int("n_shared_experts", 1, 0, kMaxExperts));
  moe.shared_intermediate = moe.n_shared_experts * moe.expert_intermediate;
  D0_ASSIGN_OR_RETURN(moe.norm_topk_prob, cfg.optional_bool("norm_topk_prob", true));
  D0_ASSIGN_OR_RETURN(moe.routed_scaling_factor, cfg.optional_double("routed_scaling_factor", 1.0));
  // Groups ranked by their two best softmax scores: Day0 implements the single group releases ship.
  for (const char* key : {"n_group", "topk_group"}) {
    D0_ASSIGN_OR_RETURN(int64_t v, cfg.optional_int(key, 1, 1));
    if (v != 1)
      return unsupported(
          fmt::format("{}: {}: {} is not supported (Day0 implements 1)", cfg.source(), key, v));
  }
  moe.scoring = RouterScoring::kSoftmax;
  moe.topk_method = TopkMethod::kGreedy;
  spec.moe = moe;
  D0_ASSIGN_OR_RETURN(int64_t first_dense, cfg.optional_int("first_k_dense_replace", 0, 0));
  for (int64_t n = 0; n < spec.n_layers; ++n) {
    LayerSpec& layer = spec.layers[static_cast<size_t>(n)];
    layer.moe = n >= first_dense;
    layer.dense_intermediate = layer.moe ? 0 : spec.intermediate_size;
  }
  ignore_keys(cfg, {"output_router_logits", "pretraining_tp"});
  return Status::ok();
}

void write_mistral4(const ModelSpec& spec, nlohmann::json& out) {
  write_mla(spec, out);
  const MlaSpec& mla = *spec.mla;
  out["head_dim"] = mla.qk_nope_head_dim + mla.qk_rope_head_dim;
  out["rope_interleave"] = spec.rope_layout == RopeLayout::kInterleaved;
  if (!out["rope_scaling"].is_object()) out["rope_scaling"] = {{"rope_type", "default"}};
  out["rope_scaling"]["llama_4_scaling_beta"] = spec.attn_temperature_tuning ? spec.attn_scale : 0.0;
  out["rope_scaling"]["original_max_position_embeddings"] = spec.floor_scale;
  // transformers sizes the rotary table from head_dim times this factor: without it the table is the
  // full qk width, not qk_rope_head_dim.
  out["rope_scaling"]["partial_rotary_factor"] =
      static_cast<double>(mla.qk_rope_head_dim) /
      static_cast<double>(mla.qk_nope_head_dim + mla.qk_rope_head_dim);
  const MoeSpec& moe = *spec.moe;
  out["n_routed_experts"] = moe.n_experts;
  out["num_experts_per_tok"] = moe.experts_per_token;
  out["moe_intermediate_size"] = moe.expert_intermediate;
  out["n_shared_experts"] = moe.n_shared_experts;
  out["norm_topk_prob"] = moe.norm_topk_prob;
  out["routed_scaling_factor"] = moe.routed_scaling_factor;
  out["n_group"] = 1;
  out["topk_group"] = 1;
  out["first_k_dense_replace"] = first_moe_layer(spec);
}

// Weights: DeepSeek-V3's names, the routed experts stacked as nn.Linear weights (no conversion on save).
void weights_mistral4(const ModelSpec& s, WeightTableBuilder& b) {
  weights::decoder(s, b, [&](WeightTableBuilder& lb, const LayerSpec& layer) {
    if (!layer.moe) return weights::dense_mlp(s, lb, "mlp.", layer.dense_intermediate, false);
    const int64_t E = s.moe->n_experts, H = s.hidden_size, I = s.moe->expert_intermediate;
    weights::router(s, lb, "mlp.gate.weight");
    lb.add("mlp.experts.gate_up_proj", {E, 2 * I, H}, WeightStorage::kPlain, TensorRole::kRoutedExpert,
           weights::kStackedExperts, WeightSlot::kExpertsGateUpRows);
    lb.add("mlp.experts.down_proj", {E, H, I}, WeightStorage::kPlain, TensorRole::kRoutedExpert,
           weights::kStackedExperts, WeightSlot::kExpertsDownRows);
    weights::shared_expert(s, lb, "mlp.shared_experts.", s.moe->shared_intermediate);
  });
}

const FamilyRegistrar kFamily({
    .model_types = {"mistral4"},
    .architectures = {"Mistral4ForCausalLM"},
    .summary = "MLA with the Llama 4 attention temperature, softmax top-k MoE with a shared expert",
    .parse = parse_mistral4,
    .write = write_mistral4,
    .weights = weights_mistral4,
});

}  // namespace
}  // namespace day0::families
