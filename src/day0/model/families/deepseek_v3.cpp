// DeepseekV3ForCausalLM (DeepSeek-V3/R1, Kimi K2 with model_type kimi_k2): MLA + DeepSeekMoE with
// sigmoid scoring, noaux_tc selection (correction bias), renormalisation and routed scaling.
// rope_interleave (default true) says the checkpoint's rope columns are in interleaved pair order.
// Kimi K2.5 (model_type kimi_k25) is this text model inside an image-text wrapper (text_config,
// tensors under language_model.); its vision tower and projector are not run.
#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {

Status parse_deepseek_v3(const ConfigReader& cfg, ModelSpec& spec) {
  // The reference keeps the router in float32: its logits and the routing weights.
  spec.router_logits_f32 = true;
  spec.routing_weights_f32 = true;
  FamilyDefaults defaults;
  defaults.rms_norm_eps = 1e-6;
  defaults.rope_theta = 10000.0;
  defaults.max_position_embeddings = 4096;
  D0_RETURN_IF_ERROR(parse_core(cfg, defaults, spec));
  D0_RETURN_IF_ERROR(parse_mla(cfg, MlaDefaults{}, spec));
  D0_ASSIGN_OR_RETURN(bool interleave, cfg.optional_bool("rope_interleave", true));
  spec.rope_layout = interleave ? RopeLayout::kInterleaved : RopeLayout::kHalfSplit;
  return parse_deepseek_moe(cfg, deepseek_v3_moe_defaults(), spec);
}

void write_deepseek_v3(const ModelSpec& spec, nlohmann::json& out) {
  write_mla(spec, out);
  write_deepseek_moe(spec, out);
  out["rope_interleave"] = spec.rope_layout == RopeLayout::kInterleaved;
}

// Weights: as DeepSeek-V2, then num_nextn_predict_layers multi-token-prediction layers.
void weights_deepseek_v3(const ModelSpec& s, WeightTableBuilder& b) {
  const weights::LayerFfn ffn = [&](WeightTableBuilder& lb, const LayerSpec& l) {
    deepseek_ffn_weights(s, lb, l);
  };
  weights::decoder(s, b, ffn);
  weights::deepseek_mtp_layers(s, b, ffn);
  if (!s.multimodal_wrapper) return;
  // Kimi K2.5's vision tower and projector: loaded by transformers, never by a text-only run.
  // transformers 5.24 saves the projector's pre_norm as model.mm_projector.*, and the text layers as
  // language_model.model.blocks.N (its inverse of the vision tower's blocks -> layers rename).
  for (const char* prefix : {"vision_tower.", "mm_projector.", "model.mm_projector."})
    b.ignore_prefix(prefix);
  b.alias_prefix("language_model.model.layers.", "language_model.model.blocks.");
}

const FamilyRegistrar kFamily({
    .model_types = {"deepseek_v3", "kimi_k2", "kimi_k25"},
    .architectures = {"DeepseekV3ForCausalLM"},
    .summary = "MLA, sigmoid noaux_tc MoE with a correction bias and shared experts",
    // Kimi K2.5: transformers' class, and the release's remote-code spelling.
    .wrapper_architectures = {"Kimi_K25ForConditionalGeneration", "KimiK25ForConditionalGeneration"},
    .parse = parse_deepseek_v3,
    .write = write_deepseek_v3,
    .weights = weights_deepseek_v3,
});

}  // namespace day0::families
