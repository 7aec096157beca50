// DeepseekV32ForCausalLM (DeepSeek-V3.2): DeepSeek-V3's MLA and noaux_tc MoE plus DeepSeek Sparse
// Attention: in every layer a lightning indexer (wq_b over the q-LoRA latent, one LayerNorm'd key
// head wk shared by its index_n_heads heads, per-head weights weights_proj) scores the cached tokens
// and MLA attends to the top index_topk of them only. transformers hard-codes the q-LoRA path,
// interleaved MLA rope, sigmoid scoring and noaux_tc selection; the release's switches for them are
// accepted at those values only. transformers 5 saves head_dim overwritten with qk_rope_head_dim,
// qk_head_dim, mlp_layer_types ("dense" / "sparse" per layer, which decides) and layer_types (all
// "indexed_attention").
#include <fmt/format.h>

#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {

// Switches transformers' DeepseekV32 model never reads: only the values it hard-codes are accepted
// (require_released), and refusals name this code.
constexpr const char* kImplementation = "transformers' DeepSeek-V3.2";

namespace {

// mlp_layer_types (transformers 5), when given, decides over first_k_dense_replace, as in
// DeepseekV32DecoderLayer.
Status apply_saved_mlp_layer_types(const ConfigReader& cfg, ModelSpec& spec) {
  D0_ASSIGN_OR_RETURN(std::vector<std::string> types, cfg.optional_string_list("mlp_layer_types"));
  if (types.empty()) return Status::ok();
  return apply_mlp_layer_types(cfg, types, spec);
}

}  // namespace

Status parse_deepseek_v32(const ConfigReader& cfg, ModelSpec& spec) {
  // The reference keeps the router in float32: its logits and the routing weights.
  spec.router_logits_f32 = true;
  spec.routing_weights_f32 = true;
  // DeepseekV32Config reroutes a num_experts keyword to n_routed_experts (it wins when both are given).
  nlohmann::json merged = cfg.json();
  if (cfg.present("num_experts")) {
    D0_ASSIGN_OR_RETURN(int64_t n, cfg.required_int("num_experts", 1, kMaxExperts));
    merged["n_routed_experts"] = n;
  }
  const ConfigReader core = cfg.derived(merged, "");
  FamilyDefaults defaults;  // DeepseekV32Config
  defaults.rms_norm_eps = 1e-6;
  defaults.rope_theta = 10000.0;
  defaults.max_position_embeddings = 163840;
  D0_RETURN_IF_ERROR(parse_core(core, defaults, spec));
  // head_dim is overwritten with qk_rope_head_dim by the config class whatever it says.
  D0_RETURN_IF_ERROR(parse_mla(core, MlaDefaults{}, spec));
  if (spec.mla->q_lora_rank <= 0) {
    return unsupported(fmt::format(
        "{}: q_lora_rank: null is not supported (DeepSeek-V3.2 always compresses the queries; the "
        "indexer reads the q-LoRA latent)",
        cfg.source()));
  }
  spec.rope_layout = RopeLayout::kInterleaved;
  D0_RETURN_IF_ERROR(require_released(cfg, "rope_interleave", true, kImplementation));
  D0_RETURN_IF_ERROR(parse_deepseek_moe(core, deepseek_v3_moe_defaults(), spec));
  D0_RETURN_IF_ERROR(require_released(cfg, "scoring_func", "sigmoid", kImplementation));
  D0_RETURN_IF_ERROR(require_released(cfg, "topk_method", "noaux_tc", kImplementation));
  D0_RETURN_IF_ERROR(apply_saved_mlp_layer_types(cfg, spec));

  D0_RETURN_IF_ERROR(parse_dsa_indexer(cfg, 64, RopeLayout::kHalfSplit, spec));
  return check_indexed_layer_types(cfg, spec);
}

void write_deepseek_v32(const ModelSpec& spec, nlohmann::json& out) {
  write_mla(spec, out);
  write_deepseek_moe(spec, out);
  out["rope_interleave"] = true;
  out["qk_head_dim"] = spec.mla->qk_nope_head_dim + spec.mla->qk_rope_head_dim;
  nlohmann::json mlp = nlohmann::json::array(), attn = nlohmann::json::array();
  for (const LayerSpec& l : spec.layers) {
    mlp.push_back(l.moe ? "sparse" : "dense");
    attn.push_back("indexed_attention");
  }
  out["mlp_layer_types"] = mlp;
  out["layer_types"] = attn;
  out["index_n_heads"] = spec.indexer->n_heads;
  out["index_head_dim"] = spec.indexer->head_dim;
  out["index_topk"] = spec.indexer->topk;
}

// Weights: DeepSeek-V3's, plus the indexer's rows in every layer, MTP layers included (dsa_indexer_weights;
// the release keeps weights_proj in BF16).
void weights_deepseek_v32(const ModelSpec& s, WeightTableBuilder& b) {
  const weights::LayerFfn layer = [&](WeightTableBuilder& lb, const LayerSpec& l) {
    dsa_indexer_weights(s, lb, WeightStorage::kPlain);
    deepseek_ffn_weights(s, lb, l);
  };
  weights::decoder(s, b, layer);
  weights::deepseek_mtp_layers(s, b, layer);
}

const FamilyRegistrar kFamily({
    .model_types = {"deepseek_v32"},
    .architectures = {"DeepseekV32ForCausalLM"},
    .summary = "MLA with sparse attention (lightning indexer, top-k keys), DeepSeek-V3 MoE",
    .parse = parse_deepseek_v32,
    .write = write_deepseek_v32,
    .weights = weights_deepseek_v32,
});

}  // namespace day0::families
