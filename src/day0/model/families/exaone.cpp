// EXAONE 3.0 / 3.5 (LG AI Research; model_type exaone, released as ExaoneForCausalLM with remote code):
// transformers 5 builds it as LlamaForCausalLM (ExaoneConfig: Llama's keys, with the attribute_map
// spellings num_layers, layer_norm_epsilon and activation_function that the releases use) and renames
// the release's tensors on load (conversion_mapping.py "exaone"): transformer.wte, transformer.h.N with
// ln_1, attn.attention.{q,k,v,out}_proj, ln_2, mlp.c_fc_0 (gate), c_fc_1 (up), c_proj (down), then
// transformer.ln_f; its save writes those names back. The math is Llama's: GQA, RMSNorm, SwiGLU, RoPE
// with any supported scaling (EXAONE 3.5: llama3). Checked against transformers' models/exaone
// (configuration_exaone.py, modular_exaone.py) and conversion_mapping.py.
#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"

namespace day0::families {
namespace {

Status parse_exaone(const ConfigReader& cfg, ModelSpec& spec) {
  D0_ASSIGN_OR_RETURN(nlohmann::json merged,
                      with_canonical_keys(cfg, {{"num_layers", "num_hidden_layers"},
                                                {"layer_norm_epsilon", "rms_norm_eps"},
                                                {"activation_function", "hidden_act"}}));
  // ExaoneConfig defaults num_key_value_heads to 8; only an explicit null means one per query head.
  if (!merged.contains("num_key_value_heads")) merged["num_key_value_heads"] = 8;
  const ConfigReader core = cfg.derived(merged, "");
  FamilyDefaults defaults;  // ExaoneConfig
  defaults.rms_norm_eps = 1e-5;
  defaults.rope_theta = 500000.0;
  defaults.max_position_embeddings = 4096;
  defaults.training_only_attention_dropout = true;  // LlamaAttention drops in training only
  D0_RETURN_IF_ERROR(parse_core(core, defaults, spec));
  D0_ASSIGN_OR_RETURN(bool bias, core.optional_bool("attention_bias", false));
  spec.qkv_bias = bias;  // Llama: q, k, v and o
  spec.o_bias = bias;
  D0_ASSIGN_OR_RETURN(spec.mlp_bias, core.optional_bool("mlp_bias", false));
  // The releases' embedding dropout (remote code) acts in training only; transformers does not read it.
  ignore_keys(cfg, {"embed_dropout"});
  return Status::ok();
}

void write_exaone(const ModelSpec& spec, nlohmann::json& out) {
  out["attention_bias"] = spec.qkv_bias;
  out["mlp_bias"] = spec.mlp_bias;
}

// The release's names for Llama's (transformers' conversion, undone), in the order they apply.
StoredLayout exaone_release_layout() {
  StoredLayout layout;
  layout.name =
      "the exaone release names (transformer.h.N.attn.attention.*, ln_1 / ln_2, mlp.c_fc_0 / c_fc_1 / "
      "c_proj)";
  layout.release = true;
  layout.renames = {
      {"model.embed_tokens.", "transformer.wte.", true},
      {"model.layers.", "transformer.h.", true},
      {"model.norm.", "transformer.ln_f.", true},
      {".self_attn.o_proj.", ".attn.attention.out_proj."},
      {".self_attn.", ".attn.attention."},
      {".input_layernorm.", ".ln_1."},
      {".post_attention_layernorm.", ".ln_2."},
      {".mlp.gate_proj.", ".mlp.c_fc_0."},
      {".mlp.up_proj.", ".mlp.c_fc_1."},
      {".mlp.down_proj.", ".mlp.c_proj."},
  };
  return layout;
}

// Weights: Llama's table (a dense SwiGLU in every layer), read under the release's names.
void weights_exaone(const ModelSpec& s, WeightTableBuilder& b) {
  dense_decoder_weights(s, b);
  b.stored_layout(exaone_release_layout());
}

const FamilyRegistrar kFamily({
    .model_types = {"exaone"},
    .architectures = {"ExaoneForCausalLM"},
    .summary =
        "Llama's GQA decoder under EXAONE's own tensor names (transformer.h.N, attn.attention, c_fc_0/1)",
    .loaded_as_architectures = {"LlamaForCausalLM"},
    .parse = parse_exaone,
    .write = write_exaone,
    .weights = weights_exaone,
});

}  // namespace
}  // namespace day0::families
