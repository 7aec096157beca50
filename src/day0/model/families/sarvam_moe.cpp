// Sarvam-30B (model_type sarvam_moe, released as SarvamMoEForCausalLM) and BharatGen Param-2-17B-A2.4B
// (param2moe, Param2MoEForCausalLM), both with remote code: transformers 5 builds each as
// Glm4MoeForCausalLM (configuration_sarvam_moe.py, configuration_param2moe.py: GLM-4.5's GQA with
// per-head q/k RMSNorm and its sigmoid noaux_tc MoE after first_k_dense_replace dense layers, RoPE over
// the whole head) and converts the releases' tensors on load (conversion_mapping.py "sarvam_moe", which
// param2moe copies): model.word_embeddings, attention.query_key_value (q, k and v rows stacked, split by
// their sizes), attention.dense (o_proj), attention.query_layernorm / key_layernorm, mlp.gate.expert_bias;
// its save writes those names back. The two differ only in their class defaults.
#include <fmt/format.h>

#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {
namespace {

// What the releases' remote code configures and transformers hard-codes: refusals name this.
constexpr const char* kGlmMoeCode = "transformers' Glm4Moe";

struct SarvamDefaults {
  double rope_theta;
  int64_t max_position_embeddings;
  bool tie_word_embeddings;
  int64_t n_shared_experts;
};

Status parse_sarvam_family(const ConfigReader& cfg, ModelSpec& spec, const SarvamDefaults& d) {
  // Glm4MoeTopkRouter: float32 logits and routing weights.
  spec.router_logits_f32 = true;
  spec.routing_weights_f32 = true;
  // attribute_map: the releases' own spellings.
  D0_ASSIGN_OR_RETURN(nlohmann::json merged,
                      with_canonical_keys(cfg, {{"num_experts", "n_routed_experts"},
                                                {"num_shared_experts", "n_shared_experts"},
                                                {"use_qkv_bias", "attention_bias"},
                                                {"num_mtp_layers", "num_nextn_predict_layers"}}));
  const ConfigReader core = cfg.derived(merged, "");
  FamilyDefaults defaults;  // SarvamMoEConfig / Param2MoeConfig
  defaults.rms_norm_eps = 1e-6;
  defaults.rope_theta = d.rope_theta;
  defaults.max_position_embeddings = d.max_position_embeddings;
  defaults.head_dim = 64;
  defaults.partial_rotary_factor = 1.0;             // unlike GLM-4.5, the whole head rotates
  defaults.training_only_attention_dropout = true;  // Glm4MoeAttention drops in training only
  D0_RETURN_IF_ERROR(parse_core(core, defaults, spec));
  D0_ASSIGN_OR_RETURN(spec.tie_word_embeddings,
                      core.optional_bool("tie_word_embeddings", d.tie_word_embeddings));
  D0_ASSIGN_OR_RETURN(spec.qkv_bias, core.optional_bool("attention_bias", false));  // q/k/v, never o
  D0_ASSIGN_OR_RETURN(spec.qk_norm, core.optional_bool("use_qk_norm", true));
  for (const auto& [key, value] : {std::pair<const char*, nlohmann::json>{"scoring_func", "sigmoid"},
                                   {"topk_method", "noaux_tc"},
                                   {"score_function", "sigmoid"},
                                   {"router_dtype", "fp32"},
                                   {"moe_router_enable_expert_bias", true},
                                   {"use_rmsnorm", true},
                                   {"use_bias", false}}) {
    D0_RETURN_IF_ERROR(require_released(cfg, key, value, kGlmMoeCode));
  }
  DeepseekMoeDefaults moe = glm4_moe_defaults();
  moe.routed_scaling_factor = 2.5;
  moe.n_shared_experts = d.n_shared_experts;
  D0_RETURN_IF_ERROR(parse_deepseek_moe(core, moe, spec));
  // The shared experts are n_shared_experts x moe_intermediate_size wide; the releases also write the sum.
  if (cfg.present("moe_shared_expert_intermediate_size")) {
    D0_ASSIGN_OR_RETURN(int64_t width, cfg.required_int("moe_shared_expert_intermediate_size", 0));
    if (width != spec.moe->shared_intermediate) {
      return cfg.invalid("moe_shared_expert_intermediate_size",
                         fmt::format("{} disagrees with n_shared_experts x moe_intermediate_size ({}), the "
                                     "width transformers builds",
                                     width, spec.moe->shared_intermediate));
    }
  }
  // The remote code's training-time settings, and a window transformers never reads (Glm4Moe has none).
  ignore_keys(cfg, {"embedding_dropout", "output_dropout", "mtp_loss_scaling_factor", "max_window_layers",
                    "attn_implementation"});
  // q, k and v are row blocks of one stored tensor: a packed-integer one has no such blocks, an FP8
  // one only when every part's rows fill whole scale blocks.
  if (spec.weights.packed.bits != 0 || spec.weights.format == WeightFormat::kMxfp4) {
    return unsupported(fmt::format(
        "{}: model_type {} stores q, k and v fused as attention.query_key_value; Day0 splits that tensor "
        "into views for unquantized and FP8-block checkpoints only, not {}",
        cfg.source(), spec.model_type, spec.weights.packed.bits != 0 ? "packed integer weights" : "MXFP4"));
  }
  if (spec.weights.format == WeightFormat::kFp8Block) {
    for (const int64_t rows : {spec.n_heads * spec.head_dim, spec.n_kv_heads * spec.head_dim}) {
      if (rows % spec.weights.block_rows != 0) {
        return unsupported(fmt::format(
            "{}: model_type {} stores q, k and v fused as attention.query_key_value, whose FP8 scale blocks "
            "of {} rows do not split at the q / k / v boundaries ({} rows)",
            cfg.source(), spec.model_type, spec.weights.block_rows, rows));
      }
    }
  }
  return Status::ok();
}

Status parse_sarvam_moe(const ConfigReader& cfg, ModelSpec& spec) {
  return parse_sarvam_family(cfg, spec, {8000000.0, 131072, false, 1});  // SarvamMoEConfig
}

Status parse_param2moe(const ConfigReader& cfg, ModelSpec& spec) {
  return parse_sarvam_family(cfg, spec, {500000.0, 32768, true, 2});  // Param2MoeConfig
}

void write_sarvam_family(const ModelSpec& spec, nlohmann::json& out) {
  out["attention_bias"] = spec.qkv_bias;
  out["use_qk_norm"] = spec.qk_norm;
  out["partial_rotary_factor"] = spec.partial_rotary_factor;
  write_deepseek_moe(spec, out);
  for (const char* key : {"scoring_func", "topk_method", "moe_layer_freq"}) out.erase(key);  // hard-coded
}

// The releases' names (transformers' conversion, undone): q, k, v (and their biases, FP8 scales) as row
// blocks of attention.query_key_value, in that order.
StoredLayout sarvam_release_layout() {
  StoredLayout layout;
  layout.name =
      "the release names (model.word_embeddings, attention.query_key_value / dense, "
      "mlp.gate.expert_bias)";
  layout.release = true;
  layout.renames = {
      {"model.embed_tokens.", "model.word_embeddings.", true},
      {".self_attn.o_proj.", ".attention.dense."},
      {".self_attn.q_norm.", ".attention.query_layernorm."},
      {".self_attn.k_norm.", ".attention.key_layernorm."},
      {".mlp.gate.e_score_correction_bias", ".mlp.gate.expert_bias"},
  };
  for (const char* suffix : {"weight", "bias", "weight_scale_inv"}) {
    layout.fused.push_back(
        FusedRows{{fmt::format("self_attn.q_proj.{}", suffix), fmt::format("self_attn.k_proj.{}", suffix),
                   fmt::format("self_attn.v_proj.{}", suffix)},
                  fmt::format("attention.query_key_value.{}", suffix)});
  }
  return layout;
}

// Weights: GLM-4.5's table (GQA with q/k norm, the DeepSeek-style FFN, MTP layers), read under the
// releases' names.
void weights_sarvam_family(const ModelSpec& s, WeightTableBuilder& b) {
  const weights::LayerFfn ffn = [&](WeightTableBuilder& lb, const LayerSpec& l) {
    deepseek_ffn_weights(s, lb, l);
  };
  weights::decoder(s, b, ffn);
  weights::deepseek_mtp_layers(s, b, ffn);
  b.stored_layout(sarvam_release_layout());
}

const FamilyRegistrar kSarvam({
    .model_types = {"sarvam_moe"},
    .architectures = {"SarvamMoEForCausalLM"},
    .summary = "GLM-4.5's q/k-normed GQA and sigmoid MoE under Sarvam's names (fused query_key_value)",
    .loaded_as_architectures = {"Glm4MoeForCausalLM"},
    .parse = parse_sarvam_moe,
    .write = write_sarvam_family,
    .weights = weights_sarvam_family,
});

const FamilyRegistrar kParam2({
    .model_types = {"param2moe"},
    .architectures = {"Param2MoEForCausalLM"},
    .summary = "Sarvam's layout and math with Param-2's defaults (tied embeddings, two shared experts)",
    .loaded_as_architectures = {"Glm4MoeForCausalLM"},
    .parse = parse_param2moe,
    .write = write_sarvam_family,
    .weights = weights_sarvam_family,
});

}  // namespace
}  // namespace day0::families
