// GlmMoeDsaForCausalLM (GLM-5 / 5.1 / 5.2): DeepSeek-V3.2's MLA with DeepSeek Sparse Attention under
// GLM's sigmoid noaux_tc MoE (one group, x2.5, one shared expert, three dense layers first). Checked
// against transformers' models/glm_moe_dsa (configuration_glm_moe_dsa.py, modular_glm_moe_dsa.py).
// What differs from DeepSeek-V3.2: the indexer rotates its rope part interleaved (V3.2: half-split),
// and indexer_types may mark layers "shared" (IndexShare), which reuse the previous full layer's key
// selection instead of running an indexer. transformers hard-codes the q-LoRA path, interleaved rope,
// sigmoid scoring and noaux_tc selection; release switches for them are accepted at those values only.
#include <fmt/format.h>

#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {
namespace {

constexpr const char* kGlmDsaCode = "transformers' GlmMoeDsa";

// GlmMoeDsaConfig reroutes num_experts to n_routed_experts.
Result<nlohmann::json> glm_dsa_merged(const ConfigReader& cfg) {
  nlohmann::json out = cfg.json();
  if (cfg.present("num_experts")) {
    D0_ASSIGN_OR_RETURN(int64_t n, cfg.required_int("num_experts", 1, kMaxExperts));
    out["n_routed_experts"] = n;
  }
  return out;
}

// indexer_types as GlmMoeDsaConfig derives it when absent: index_topk_pattern ("F" / "S" letters or a
// list), else layer i is full iff max(i - offset + 1, 0) % freq == 0 (index_topk_freq, default 1 = every
// layer; index_skip_topk_offset, default 2).
Result<std::vector<std::string>> derived_indexer_types(const ConfigReader& cfg, int64_t n_layers) {
  std::vector<std::string> out;
  if (cfg.present("index_topk_pattern")) {
    const nlohmann::json& p = cfg.json().at("index_topk_pattern");
    if (p.is_string()) {
      for (char ch : p.get<std::string>()) {
        if (ch != 'F' && ch != 'S') return cfg.mismatch("index_topk_pattern", "letters F and S");
        out.push_back(ch == 'F' ? "full" : "shared");
      }
    } else {
      D0_ASSIGN_OR_RETURN(out, cfg.optional_string_list("index_topk_pattern"));
    }
    cfg.mark_used("index_topk_freq");
    cfg.mark_used("index_skip_topk_offset");
    return out;
  }
  D0_ASSIGN_OR_RETURN(int64_t freq, cfg.optional_int("index_topk_freq", 1, INT64_MIN));
  D0_ASSIGN_OR_RETURN(int64_t offset, cfg.optional_int("index_skip_topk_offset", 2, INT64_MIN));
  freq = std::max<int64_t>(freq, 1);
  for (int64_t i = 0; i < n_layers; ++i) {
    out.push_back(std::max<int64_t>(i - offset + 1, 0) % freq == 0 ? "full" : "shared");
  }
  return out;
}

Status apply_indexer_types(const ConfigReader& cfg, ModelSpec& spec) {
  D0_ASSIGN_OR_RETURN(std::vector<std::string> derived, derived_indexer_types(cfg, spec.n_layers));
  D0_ASSIGN_OR_RETURN(std::vector<std::string> types, cfg.optional_string_list("indexer_types"));
  if (types.empty()) {
    types = derived;
  } else if (cfg.present("index_topk_pattern") || cfg.present("index_topk_freq") ||
             cfg.present("index_skip_topk_offset")) {
    // transformers lets indexer_types win; a schedule saying otherwise is not guessed between.
    if (types != derived) {
      return unsupported(fmt::format(
          "{}: indexer_types disagrees with the schedule of index_topk_pattern / index_topk_freq / "
          "index_skip_topk_offset; Day0 will not guess which one the checkpoint follows",
          cfg.source()));
    }
  }
  if (static_cast<int64_t>(types.size()) != spec.n_layers) {
    return cfg.invalid("indexer_types", fmt::format("expected {} entries (num_hidden_layers), found {}",
                                                    spec.n_layers, types.size()));
  }
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] != "full" && types[i] != "shared") {
      return cfg.mismatch(fmt::format("indexer_types[{}]", i), "\"full\" or \"shared\"");
    }
    spec.layers[i].shared_key_selection = types[i] == "shared";
  }
  // GlmMoeDsaAttention stops on a shared layer with no full layer before it.
  if (spec.layers[0].shared_key_selection) {
    return cfg.invalid("indexer_types", "layer 0 is \"shared\": no earlier layer selects its keys");
  }
  return Status::ok();
}

Status parse_glm_moe_dsa(const ConfigReader& cfg, ModelSpec& spec) {
  // GlmMoeDsaTopkRouter keeps its logits and the routing weights in float32.
  spec.router_logits_f32 = true;
  spec.routing_weights_f32 = true;
  D0_ASSIGN_OR_RETURN(const nlohmann::json merged, glm_dsa_merged(cfg));
  const ConfigReader core = cfg.derived(merged, "");
  FamilyDefaults defaults;  // GlmMoeDsaConfig
  defaults.rms_norm_eps = 1e-5;
  defaults.rope_theta = 10000.0;
  defaults.max_position_embeddings = 202752;
  // The class overwrites head_dim with qk_rope_head_dim.
  D0_RETURN_IF_ERROR(parse_core_rope_head_dim(core, defaults, "GlmMoeDsa", spec));
  D0_RETURN_IF_ERROR(
      parse_mla(core, {.q_lora_rank = 2048, .qk_nope_head_dim = 192, .v_head_dim = 256}, spec));
  if (spec.mla->q_lora_rank <= 0) {
    return unsupported(
        fmt::format("{}: q_lora_rank: null is not supported (the indexer reads the q-LoRA "
                    "latent)",
                    cfg.source()));
  }
  spec.rope_layout = RopeLayout::kInterleaved;
  D0_RETURN_IF_ERROR(require_released(cfg, "rope_interleave", true, kGlmDsaCode));
  DeepseekMoeDefaults moe = glm4_moe_defaults();
  moe.routed_scaling_factor = 2.5;
  moe.first_k_dense_replace = 3;
  D0_RETURN_IF_ERROR(parse_deepseek_moe(core, moe, spec));
  D0_RETURN_IF_ERROR(require_released(cfg, "scoring_func", "sigmoid", kGlmDsaCode));
  D0_RETURN_IF_ERROR(require_released(cfg, "topk_method", "noaux_tc", kGlmDsaCode));
  // mlp_layer_types ("dense" / "sparse"), when given, decides over first_k_dense_replace.
  D0_ASSIGN_OR_RETURN(std::vector<std::string> mlp, cfg.optional_string_list("mlp_layer_types"));
  if (!mlp.empty()) {
    D0_RETURN_IF_ERROR(apply_mlp_layer_types(cfg, mlp, spec));
  }

  // GlmMoeDsaIndexer rotates interleaved pairs (DeepSeek-V3.2's is half-split).
  D0_RETURN_IF_ERROR(parse_dsa_indexer(cfg, 32, RopeLayout::kInterleaved, spec));
  D0_RETURN_IF_ERROR(apply_indexer_types(cfg, spec));
  return check_indexed_layer_types(cfg, spec);
}

void write_glm_moe_dsa(const ModelSpec& spec, nlohmann::json& out) {
  write_mla(spec, out);
  write_deepseek_moe(spec, out);
  // The class has no such keys: it routes with sigmoid + noaux_tc and places MoE by mlp_layer_types.
  for (const char* key : {"scoring_func", "topk_method", "moe_layer_freq"}) out.erase(key);
  out["qk_head_dim"] = spec.mla->qk_nope_head_dim + spec.mla->qk_rope_head_dim;
  nlohmann::json mlp = nlohmann::json::array(), attn = nlohmann::json::array(),
                 index = nlohmann::json::array();
  for (const LayerSpec& l : spec.layers) {
    mlp.push_back(l.moe ? "sparse" : "dense");
    attn.push_back("indexed_attention");
    index.push_back(l.shared_key_selection ? "shared" : "full");
  }
  out["mlp_layer_types"] = mlp;
  out["layer_types"] = attn;
  out["indexer_types"] = index;
  out["index_n_heads"] = spec.indexer->n_heads;
  out["index_head_dim"] = spec.indexer->head_dim;
  out["index_topk"] = spec.indexer->topk;
}

// Weights: DeepSeek-V3.2's names (MLA, self_attn.indexer.{wq_b, wk, k_norm, weights_proj} in layers with an
// indexer, mlp.gate + e_score_correction_bias, experts, shared_experts), then num_nextn_predict_layers MTP
// layers with an indexer each (model.layers.78 in the release), which transformers skips on load.
void weights_glm_moe_dsa(const ModelSpec& s, WeightTableBuilder& b) {
  // weights_proj is in _keep_in_fp32_modules: a release may store it float32.
  weights::decoder(s, b, [&](WeightTableBuilder& lb, const LayerSpec& l) {
    if (!l.shared_key_selection) dsa_indexer_weights(s, lb, WeightStorage::kKeptF32);
    deepseek_ffn_weights(s, lb, l);
  });
  weights::deepseek_mtp_layers(s, b, [&](WeightTableBuilder& lb, const LayerSpec& l) {
    dsa_indexer_weights(s, lb, WeightStorage::kKeptF32);
    deepseek_ffn_weights(s, lb, l);
  });
}

const FamilyRegistrar kFamily({
    .model_types = {"glm_moe_dsa"},
    .architectures = {"GlmMoeDsaForCausalLM"},
    .summary = "MLA with sparse attention (interleaved-rope indexer, IndexShare), GLM's sigmoid MoE",
    .parse = parse_glm_moe_dsa,
    .write = write_glm_moe_dsa,
    .weights = weights_glm_moe_dsa,
});

}  // namespace
}  // namespace day0::families
