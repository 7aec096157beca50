// MiniMax-M3 (MiniMaxM3SparseForConditionalGeneration, text model minimax_m3_vl_text): GQA with
// Gemma-style per-head q/k RMSNorm and partial RoPE, every RMSNorm zero-centred ((1 + w) in float32),
// per-layer dense MLP or MoE (sigmoid router + correction bias, top-k renormalised, routed sum x
// routed_scaling_factor, one ungated shared expert), SwiGLU-OAI ((clamp(up) + 1) g sigmoid(alpha g),
// g = min(gate, limit)) in every MLP and expert, and block-sparse attention on the "minimax_m3_sparse"
// layers: an indexer of index_n_heads heads max-pools its per-key scores over blocks of index_block_size
// keys, and each index head's query heads attend to its top index_topk_blocks blocks only, the
// index_local_blocks blocks ending at the query's own always among them. Checked against transformers
// 5.25's models/minimax_m3_vl (configuration_minimax_m3_vl.py, modeling_minimax_m3_vl.py) and the
// minimax_m3_vl entry of conversion_mapping.py. Day0 runs the text model only (token ids in).
#include <fmt/format.h>
#include <cmath>

#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/family_registry.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {
namespace {

// Switches the release carries that transformers' code never reads (it hard-codes these values).
constexpr const char* kImplementation = "transformers' MiniMax-M3";

// A per-layer list of flags as the release writes them (0 / 1 or booleans; absent: empty).
Result<std::vector<bool>> m3_flag_list(const ConfigReader& cfg, const char* key, int64_t n_layers) {
  std::vector<bool> out;
  if (!cfg.present(key)) return out;
  const nlohmann::json& list = cfg.json().at(key);
  if (!list.is_array() || static_cast<int64_t>(list.size()) != n_layers) {
    return cfg.mismatch(key, fmt::format("a list of {} flags (num_hidden_layers)", n_layers));
  }
  for (const auto& v : list) {
    if (!v.is_boolean() && !v.is_number_integer()) return cfg.mismatch(key, "a list of 0 / 1 flags");
    out.push_back(v.is_boolean() ? v.get<bool>() : v.get<int64_t>() != 0);
  }
  return out;
}

// Per-layer kinds: the v5 lists (mlp_layer_types, layer_types), else the release's flags (moe_layer_freq,
// sparse_attention_config.sparse_attention_freq), else every layer MoE and full attention. A list and
// the flags it supersedes must agree.
Status parse_m3_layer_kinds(const ConfigReader& cfg, const std::vector<bool>& sparse_freq,
                            int64_t dense_width, ModelSpec& spec) {
  D0_ASSIGN_OR_RETURN(std::vector<bool> moe_freq, m3_flag_list(cfg, "moe_layer_freq", spec.n_layers));
  D0_ASSIGN_OR_RETURN(std::vector<std::string> mlp, cfg.optional_string_list("mlp_layer_types"));
  D0_ASSIGN_OR_RETURN(std::vector<std::string> attn, cfg.optional_string_list("layer_types"));
  for (const auto* list : {&mlp, &attn}) {
    if (!list->empty() && static_cast<int64_t>(list->size()) != spec.n_layers) {
      return cfg.invalid(
          list == &mlp ? "mlp_layer_types" : "layer_types",
          fmt::format("expected {} entries (num_hidden_layers), found {}", spec.n_layers, list->size()));
    }
  }
  for (int64_t n = 0; n < spec.n_layers; ++n) {
    const auto i = static_cast<size_t>(n);
    LayerSpec& layer = spec.layers[i];
    layer.moe = mlp.empty() ? (moe_freq.empty() || moe_freq[i]) : mlp[i] == "sparse";
    if (!mlp.empty() && mlp[i] != "sparse" && mlp[i] != "dense") {
      return cfg.mismatch(fmt::format("mlp_layer_types[{}]", n), "\"dense\" or \"sparse\"");
    }
    layer.block_sparse =
        attn.empty() ? (!sparse_freq.empty() && sparse_freq[i]) : attn[i] == "minimax_m3_sparse";
    if (!attn.empty() && attn[i] != "minimax_m3_sparse" && attn[i] != "full_attention") {
      return cfg.mismatch(fmt::format("layer_types[{}]", n), "\"full_attention\" or \"minimax_m3_sparse\"");
    }
    if ((!mlp.empty() && !moe_freq.empty() && moe_freq[i] != layer.moe) ||
        (!attn.empty() && !sparse_freq.empty() && sparse_freq[i] != layer.block_sparse)) {
      return unsupported(fmt::format(
          "{}: layer {}: the per-layer flags (moe_layer_freq / sparse_attention_freq) disagree with "
          "mlp_layer_types / layer_types, which transformers follows; Day0 will not guess which one the "
          "checkpoint follows",
          cfg.source(), n));
    }
    layer.dense_intermediate = layer.moe ? 0 : dense_width;
  }
  return Status::ok();
}

// The indexer's sizes: the flat index_* keys (v5), overridden by the release's sparse_attention_config
// as transformers does; the config's switches for math transformers hard-codes accepted at those values.
// Returns sparse_attention_config.sparse_attention_freq (empty when absent).
Result<std::vector<bool>> parse_m3_block_indexer(const ConfigReader& cfg, int64_t n_layers,
                                                 BlockIndexerSpec& ix) {
  D0_ASSIGN_OR_RETURN(ix.n_heads, cfg.optional_int("index_n_heads", 4, 1, 4096));
  D0_ASSIGN_OR_RETURN(ix.head_dim, cfg.optional_int("index_head_dim", 128, 1, 4096));
  D0_ASSIGN_OR_RETURN(ix.block_size, cfg.optional_int("index_block_size", 128, 1));
  D0_ASSIGN_OR_RETURN(ix.topk_blocks, cfg.optional_int("index_topk_blocks", 16, 1));
  D0_ASSIGN_OR_RETURN(ix.local_blocks, cfg.optional_int("index_local_blocks", 1, 0));
  D0_ASSIGN_OR_RETURN(std::optional<ConfigReader> legacy, cfg.optional_object("sparse_attention_config"));
  if (!legacy) return std::vector<bool>{};
  D0_ASSIGN_OR_RETURN(ix.n_heads, legacy->optional_int("sparse_num_index_heads", ix.n_heads, 1, 4096));
  D0_ASSIGN_OR_RETURN(ix.head_dim, legacy->optional_int("sparse_index_dim", ix.head_dim, 1, 4096));
  D0_ASSIGN_OR_RETURN(ix.block_size, legacy->optional_int("sparse_block_size", ix.block_size, 1));
  D0_ASSIGN_OR_RETURN(ix.topk_blocks, legacy->optional_int("sparse_topk_blocks", ix.topk_blocks, 1));
  D0_ASSIGN_OR_RETURN(ix.local_blocks, legacy->optional_int("sparse_local_block", ix.local_blocks, 0));
  D0_RETURN_IF_ERROR(require_released(*legacy, "use_sparse_attention", true, kImplementation));
  D0_RETURN_IF_ERROR(require_released(*legacy, "sparse_score_type", "max", kImplementation));
  D0_RETURN_IF_ERROR(require_released(*legacy, "sparse_init_block", 0, kImplementation));
  D0_ASSIGN_OR_RETURN(std::vector<bool> freq, m3_flag_list(*legacy, "sparse_attention_freq", n_layers));
  // transformers builds no index-value branch: every sparse layer must have it disabled.
  D0_ASSIGN_OR_RETURN(std::vector<bool> no_value,
                      m3_flag_list(*legacy, "sparse_disable_index_value", n_layers));
  for (size_t i = 0; i < no_value.size() && i < freq.size(); ++i) {
    if (freq[i] && !no_value[i]) {
      return unsupported(
          fmt::format("{}: sparse_attention_config.sparse_disable_index_value[{}]: 0 is not "
                      "supported ({} has no index-value branch)",
                      cfg.source(), i, kImplementation));
    }
  }
  return freq;
}

Status parse_minimax_m3(const ConfigReader& cfg, ModelSpec& spec) {
  // Gemma RMSNorms: the offset w of the gain 1 + w applied to the float32 normed row, one cast.
  spec.zero_centered_norms = true;
  spec.norm_gain_f32 = true;
  // The routing weights stay float32 until each expert's output is scaled (then rounded).
  spec.routing_weights_f32 = true;
  // hidden_act: the release's "swigluoai" or transformers' "silu" (its config overwrites any value); the
  // activation is SwiGLU-OAI either way.
  nlohmann::json merged = cfg.json();
  D0_ASSIGN_OR_RETURN(std::string act, cfg.optional_string("hidden_act", "silu"));
  if (act != "silu" && act != "swigluoai") {
    return unsupported(
        fmt::format("{}: hidden_act: \"{}\" is not supported ({} implements SwiGLU-OAI: "
                    "\"swigluoai\" or \"silu\")",
                    cfg.source(), act, kImplementation));
  }
  merged["hidden_act"] = "silu";
  std::string path = cfg.key_path("");  // this reader's path (text_config in a wrapper), plus "."
  if (!path.empty()) path.pop_back();
  const ConfigReader core = cfg.derived(merged, path);
  FamilyDefaults defaults;  // MiniMaxM3VLTextConfig
  defaults.rms_norm_eps = 1e-6;
  defaults.rope_theta = 5e6;
  defaults.max_position_embeddings = 524288;
  defaults.head_dim = 128;
  defaults.require_intermediate = false;
  D0_RETURN_IF_ERROR(parse_core(core, defaults, spec));
  // transformers rotates head_dim * partial_rotary_factor (1 when absent) and never reads rotary_dim, the
  // release's own spelling: the two must agree.
  if (cfg.present("rotary_dim")) {
    D0_ASSIGN_OR_RETURN(int64_t rotary_dim, cfg.required_int("rotary_dim", 1, spec.head_dim));
    if (rotary_dim != rotary_dims(spec.head_dim, spec.partial_rotary_factor)) {
      return cfg.invalid("rotary_dim",
                         fmt::format("{} disagrees with head_dim {} x partial_rotary_factor {}, "
                                     "the part transformers rotates",
                                     rotary_dim, spec.head_dim, spec.partial_rotary_factor));
    }
  }
  spec.qk_norm = true;  // per head
  D0_RETURN_IF_ERROR(require_released(cfg, "use_qk_norm", true, kImplementation));
  D0_RETURN_IF_ERROR(require_released(cfg, "qk_norm_type", "per_head", kImplementation));
  D0_RETURN_IF_ERROR(require_released(cfg, "use_gemma_norm", true, kImplementation));
  D0_RETURN_IF_ERROR(require_released(cfg, "attention_output_gate", false, kImplementation));
  D0_RETURN_IF_ERROR(require_released(cfg, "scoring_func", "sigmoid", kImplementation));
  D0_RETURN_IF_ERROR(require_released(cfg, "use_routing_bias", true, kImplementation));
  D0_RETURN_IF_ERROR(require_released(cfg, "n_shared_experts", 1, kImplementation));
  D0_RETURN_IF_ERROR(require_released(cfg, "swiglu_beta", 1.0, kImplementation));
  // Multi-token-prediction modules: transformers drops their tensors on load; decoding never uses them.
  ignore_keys(cfg, {"use_mtp", "num_mtp_modules", "mtp_transformer_layers", "num_nextn_predict_layers"});

  MoeSpec moe;
  D0_ASSIGN_OR_RETURN(moe.n_experts,
                      aliased_int(cfg, {"num_local_experts", "num_experts"}, 1, kMaxExperts, int64_t{128}));
  D0_ASSIGN_OR_RETURN(moe.experts_per_token, cfg.optional_int("num_experts_per_tok", 4, 1, moe.n_experts));
  D0_ASSIGN_OR_RETURN(moe.expert_intermediate, cfg.optional_int("intermediate_size", 3072, 1));
  D0_ASSIGN_OR_RETURN(moe.shared_intermediate, cfg.optional_int("shared_intermediate_size", 3072, 1));
  moe.n_shared_experts = 1;
  moe.scoring = RouterScoring::kSigmoid;
  moe.topk_method = TopkMethod::kNoauxTc;  // one group: plain top-k of sigmoid + bias
  moe.correction_bias = true;
  moe.norm_topk_prob = true;
  D0_ASSIGN_OR_RETURN(moe.routed_scaling_factor, cfg.optional_double("routed_scaling_factor", 2.0));
  D0_ASSIGN_OR_RETURN(moe.swiglu_limit, cfg.optional_double("swiglu_limit", 7.0));
  D0_ASSIGN_OR_RETURN(moe.swiglu_alpha, cfg.optional_double("swiglu_alpha", 1.702));
  if (!(moe.swiglu_limit > 0.0)) return cfg.mismatch("swiglu_limit", "a positive clamp");
  if (!(moe.swiglu_alpha > 0.0)) return cfg.mismatch("swiglu_alpha", "a positive number");
  spec.mlp_swiglu_limit = moe.swiglu_limit;
  spec.mlp_swiglu_alpha = moe.swiglu_alpha;
  spec.intermediate_size = moe.expert_intermediate;
  spec.moe = moe;
  D0_ASSIGN_OR_RETURN(int64_t dense_width, cfg.optional_int("dense_intermediate_size", 12288, 1));

  BlockIndexerSpec ix;
  D0_ASSIGN_OR_RETURN(std::vector<bool> sparse_freq, parse_m3_block_indexer(cfg, spec.n_layers, ix));
  D0_RETURN_IF_ERROR(parse_m3_layer_kinds(cfg, sparse_freq, dense_width, spec));
  // The indexer's heads each serve n_heads / index_n_heads query heads (transformers' block mask).
  if (spec.n_heads % ix.n_heads != 0) {
    return cfg.invalid("index_n_heads",
                       fmt::format("{} does not divide num_attention_heads {}", ix.n_heads, spec.n_heads));
  }
  // transformers rotates the index q / k with the attention's cos / sin cut to index_head_dim: narrower
  // keys would pair dimensions of different frequencies.
  if (ix.head_dim < rotary_dims(spec.head_dim, spec.partial_rotary_factor)) {
    return unsupported(
        fmt::format("{}: index_head_dim: {} is narrower than the rotated {} dimensions of a "
                    "head; Day0 rotates the index keys like the attention's",
                    cfg.source(), ix.head_dim, rotary_dims(spec.head_dim, spec.partial_rotary_factor)));
  }
  // More local blocks than selected ones tie at +inf in transformers' top-k: its pick is undefined.
  if (ix.local_blocks > ix.topk_blocks) {
    return unsupported(
        fmt::format("{}: index_local_blocks: {} above index_topk_blocks {} is not supported (the "
                    "selection among the forced blocks is undefined)",
                    cfg.source(), ix.local_blocks, ix.topk_blocks));
  }
  spec.block_indexer = ix;
  return Status::ok();
}

void write_minimax_m3(const ModelSpec& spec, nlohmann::json& out) {
  const MoeSpec& m = *spec.moe;
  const BlockIndexerSpec& ix = *spec.block_indexer;
  out["num_local_experts"] = m.n_experts;
  out["num_experts_per_tok"] = m.experts_per_token;
  out["shared_intermediate_size"] = m.shared_intermediate;
  out["routed_scaling_factor"] = m.routed_scaling_factor;
  out["swiglu_limit"] = m.swiglu_limit;
  out["swiglu_alpha"] = m.swiglu_alpha;
  out["partial_rotary_factor"] = spec.partial_rotary_factor;
  out["rotary_dim"] = rotary_dims(spec.head_dim, spec.partial_rotary_factor);
  nlohmann::json mlp = nlohmann::json::array(), attn = nlohmann::json::array();
  int64_t dense_width = 12288;
  for (const LayerSpec& l : spec.layers) {
    mlp.push_back(l.moe ? "sparse" : "dense");
    attn.push_back(l.block_sparse ? "minimax_m3_sparse" : "full_attention");
    if (!l.moe) dense_width = l.dense_intermediate;
  }
  out["dense_intermediate_size"] = dense_width;
  out["mlp_layer_types"] = mlp;
  out["layer_types"] = attn;
  out["index_n_heads"] = ix.n_heads;
  out["index_head_dim"] = ix.head_dim;
  out["index_block_size"] = ix.block_size;
  out["index_topk_blocks"] = ix.topk_blocks;
  out["index_local_blocks"] = ix.local_blocks;
}

// Weights (names as the release and transformers' save write them): per-head q_norm / k_norm [head_dim];
// on block-sparse layers self_attn.index_{q,k}_proj [n_I * d_I, H] / [d_I, H] and index_{q,k}_norm [d_I],
// whole on every rank; a dense mlp.{gate,up,down}_proj, or block_sparse_moe.gate (+ its correction bias
// beside it), experts w1 / w3 / w2 and shared_experts.{gate,up,down}_proj. The vision tower, its
// projectors and the MTP modules are not part of the text model.
void weights_minimax_m3(const ModelSpec& s, WeightTableBuilder& b) {
  const BlockIndexerSpec& ix = *s.block_indexer;
  const int64_t H = s.hidden_size;
  weights::decoder(s, b, [&](WeightTableBuilder& lb, const LayerSpec& l) {
    if (l.block_sparse) {
      const auto role = TensorRole::kAttention;
      lb.add("self_attn.index_q_proj.weight", {ix.n_heads * ix.head_dim, H}, WeightStorage::kProjection, role,
             weights::kReplicated, WeightSlot::kIndexerQ);
      lb.add("self_attn.index_k_proj.weight", {ix.head_dim, H}, WeightStorage::kProjection, role,
             weights::kReplicated, WeightSlot::kIndexerK);
      lb.add("self_attn.index_q_norm.weight", {ix.head_dim}, WeightStorage::kKeptF32, TensorRole::kNorm,
             weights::kReplicated, WeightSlot::kIndexerQNorm);
      lb.add("self_attn.index_k_norm.weight", {ix.head_dim}, WeightStorage::kKeptF32, TensorRole::kNorm,
             weights::kReplicated, WeightSlot::kIndexerKRmsNorm);
    }
    if (!l.moe) return weights::dense_mlp(s, lb, "mlp.", l.dense_intermediate, false);
    weights::router(s, lb, "block_sparse_moe.gate.weight");
    lb.add("block_sparse_moe.e_score_correction_bias", {s.moe->n_experts}, WeightStorage::kF32,
           TensorRole::kRouter, weights::kReplicated, WeightSlot::kCorrectionBias);
    weights::separate_experts(s, lb, "block_sparse_moe.experts.{E}.", {"w1", "w3", "w2"});
    weights::shared_expert(s, lb, "block_sparse_moe.shared_experts.", s.moe->shared_intermediate);
  });
  for (const char* prefix : {"mtp.", "model.mtp.", "language_model.mtp.", "language_model.model.mtp."})
    b.ignore_prefix(prefix);
  if (!s.multimodal_wrapper) return;
  for (const char* prefix : {"vision_tower.", "multi_modal_projector.", "patch_merge_mlp."})
    b.ignore_prefix(prefix);
}

const FamilyRegistrar kFamily({
    .model_types = {"minimax_m3_vl_text", "minimax_m3_vl"},
    .architectures = {"MiniMaxM3VLForCausalLM"},
    .summary = "GQA with Gemma q/k norm and block-sparse attention (top-k key blocks), SwiGLU-OAI MoE",
    .wrapper_architectures = {"MiniMaxM3SparseForConditionalGeneration"},
    .parse = parse_minimax_m3,
    .write = write_minimax_m3,
    .weights = weights_minimax_m3,
});

}  // namespace
}  // namespace day0::families
