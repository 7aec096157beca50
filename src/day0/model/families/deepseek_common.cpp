// Pieces shared by the DeepSeek-style families: multi-head latent attention keys and the
// DeepSeekMoE block (routed + shared experts, dense layers before first_k_dense_replace).
#include <fmt/format.h>

#include "day0/model/config_common.h"
#include "day0/model/families/families.h"
#include "day0/model/weight_blocks.h"

namespace day0::families {

namespace {

Result<RouterScoring> parse_scoring(const ConfigReader& cfg, const char* fallback) {
  D0_ASSIGN_OR_RETURN(std::string name, cfg.optional_string("scoring_func", fallback));
  if (name == "softmax") return RouterScoring::kSoftmax;
  if (name == "sigmoid") return RouterScoring::kSigmoid;
  return cfg.mismatch("scoring_func", "\"softmax\" or \"sigmoid\"");
}

Result<TopkMethod> parse_topk_method(const ConfigReader& cfg, const char* fallback) {
  D0_ASSIGN_OR_RETURN(std::string name, cfg.optional_string("topk_method", fallback));
  // "gready" is the spelling of DeepSeek-V2's own configuration class default.
  if (name == "greedy" || name == "gready") return TopkMethod::kGreedy;
  if (name == "group_limited_greedy") return TopkMethod::kGroupLimitedGreedy;
  if (name == "noaux_tc") return TopkMethod::kNoauxTc;
  return cfg.mismatch("topk_method", "\"greedy\", \"group_limited_greedy\" or \"noaux_tc\"");
}

}  // namespace

int64_t first_moe_layer(const ModelSpec& spec) {
  for (int64_t n = 0; n < spec.n_layers; ++n) {
    if (spec.layers[static_cast<size_t>(n)].moe) return n;
  }
  return spec.n_layers;
}

Status apply_mlp_layer_types(const ConfigReader& cfg, const std::vector<std::string>& types,
                             ModelSpec& spec) {
  if (static_cast<int64_t>(types.size()) != spec.n_layers) {
    return cfg.invalid("mlp_layer_types", fmt::format("expected {} entries (num_hidden_layers), found {}",
                                                      spec.n_layers, types.size()));
  }
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] != "dense" && types[i] != "sparse") {
      return cfg.mismatch(fmt::format("mlp_layer_types[{}]", i), "\"dense\" or \"sparse\"");
    }
    LayerSpec& layer = spec.layers[i];
    layer.moe = types[i] == "sparse";
    layer.dense_intermediate = layer.moe ? 0 : spec.intermediate_size;
  }
  return Status::ok();
}

Status apply_mlp_layer_types_or_first_dense(const ConfigReader& cfg, ModelSpec& spec) {
  D0_ASSIGN_OR_RETURN(std::vector<std::string> types, cfg.optional_string_list("mlp_layer_types"));
  if (types.empty()) {
    types.assign(static_cast<size_t>(spec.n_layers), "sparse");
    types[0] = "dense";
  }
  D0_RETURN_IF_ERROR(apply_mlp_layer_types(cfg, types, spec));
  // Releases also ship first_k_dense_replace, which transformers ignores: it must say the same.
  if (cfg.present("first_k_dense_replace")) {
    D0_ASSIGN_OR_RETURN(int64_t k, cfg.required_int("first_k_dense_replace", 0));
    for (int64_t n = 0; n < spec.n_layers; ++n) {
      if (spec.layers[static_cast<size_t>(n)].moe != (n >= k)) {
        return unsupported(fmt::format(
            "{}: first_k_dense_replace: {} disagrees with the MoE layers transformers builds from "
            "mlp_layer_types (layer {} is {}); Day0 will not guess which one the checkpoint follows",
            cfg.source(), k, n, spec.layers[static_cast<size_t>(n)].moe ? "sparse" : "dense"));
      }
    }
  }
  return Status::ok();
}

Status parse_mla(const ConfigReader& cfg, const MlaDefaults& defaults, ModelSpec& spec) {
  MlaSpec mla;
  // Absent: the class default; null: no query compression (q_proj).
  if (cfg.contains("q_lora_rank")) {
    D0_ASSIGN_OR_RETURN(mla.q_lora_rank, cfg.optional_int("q_lora_rank", 0, 1));
  } else {
    mla.q_lora_rank = defaults.q_lora_rank;
  }
  D0_ASSIGN_OR_RETURN(mla.kv_lora_rank, cfg.optional_int("kv_lora_rank", defaults.kv_lora_rank, 1));
  D0_ASSIGN_OR_RETURN(mla.qk_nope_head_dim,
                      cfg.optional_int("qk_nope_head_dim", defaults.qk_nope_head_dim, 1));
  D0_ASSIGN_OR_RETURN(mla.qk_rope_head_dim,
                      cfg.optional_int("qk_rope_head_dim", defaults.qk_rope_head_dim, 1));
  D0_ASSIGN_OR_RETURN(mla.v_head_dim, cfg.optional_int("v_head_dim", defaults.v_head_dim, 1));
  if (mla.qk_rope_head_dim % 2 != 0) return cfg.mismatch("qk_rope_head_dim", "an even integer");
  // transformers 5 also writes the derived qk_head_dim = qk_nope_head_dim + qk_rope_head_dim.
  D0_ASSIGN_OR_RETURN(int64_t qk_head_dim,
                      cfg.optional_int("qk_head_dim", mla.qk_nope_head_dim + mla.qk_rope_head_dim, 1));
  if (qk_head_dim != mla.qk_nope_head_dim + mla.qk_rope_head_dim) {
    return cfg.mismatch("qk_head_dim", fmt::format("qk_nope_head_dim + qk_rope_head_dim = {}",
                                                   mla.qk_nope_head_dim + mla.qk_rope_head_dim));
  }
  spec.mla = mla;
  spec.attention = AttentionKind::kMla;
  // transformers sets head_dim = qk_rope_head_dim for MLA (the RoPE dimension); KV heads = heads.
  spec.head_dim = mla.qk_rope_head_dim;
  spec.n_kv_heads = spec.n_heads;
  D0_ASSIGN_OR_RETURN(bool mlp_bias, cfg.optional_bool("mlp_bias", false));
  if (mlp_bias) {
    return unsupported(fmt::format(
        "{}: mlp_bias: true is not supported for MLA families (Day0 implements false)", cfg.source()));
  }
  D0_RETURN_IF_ERROR(parse_attention_bias(cfg, spec));
  return Status::ok();
}

void write_mla(const ModelSpec& spec, nlohmann::json& out) {
  const MlaSpec& mla = *spec.mla;
  out["q_lora_rank"] = mla.q_lora_rank > 0 ? nlohmann::json(mla.q_lora_rank) : nlohmann::json(nullptr);
  out["kv_lora_rank"] = mla.kv_lora_rank;
  out["qk_nope_head_dim"] = mla.qk_nope_head_dim;
  out["qk_rope_head_dim"] = mla.qk_rope_head_dim;
  out["v_head_dim"] = mla.v_head_dim;
  out["head_dim"] = mla.qk_rope_head_dim;
  out["attention_bias"] = spec.qkv_bias;
}

DeepseekMoeDefaults deepseek_v3_moe_defaults() {
  DeepseekMoeDefaults moe;
  moe.scoring = "sigmoid";
  moe.topk_method = "noaux_tc";
  moe.n_group = 8;
  moe.topk_group = 4;
  moe.norm_topk_prob = true;
  moe.routed_scaling_factor = 2.5;
  moe.n_shared_experts = 1;
  moe.first_k_dense_replace = 3;
  return moe;
}

DeepseekMoeDefaults glm4_moe_defaults() {
  DeepseekMoeDefaults moe;
  moe.scoring = "sigmoid";
  moe.topk_method = "noaux_tc";
  moe.norm_topk_prob = true;
  moe.routed_scaling_factor = 1.0;
  moe.n_shared_experts = 1;
  moe.first_k_dense_replace = 1;
  return moe;
}

Status parse_core_rope_head_dim(const ConfigReader& core, FamilyDefaults defaults, const char* cls,
                                ModelSpec& spec) {
  D0_ASSIGN_OR_RETURN(defaults.head_dim, core.optional_int("qk_rope_head_dim", 64, 1));
  D0_RETURN_IF_ERROR(parse_core(core, defaults, spec));
  // The rotary embedding spans head_dim (= qk_rope_head_dim) times the factor: it must cover the whole
  // rope part of every head.
  if (spec.partial_rotary_factor != 1.0) {
    return unsupported(
        fmt::format("{}: partial_rotary_factor: {} is not supported ({} rotates all "
                    "qk_rope_head_dim dimensions; Day0 implements 1.0)",
                    core.source(), spec.partial_rotary_factor, cls));
  }
  return Status::ok();
}

Status parse_dsa_indexer(const ConfigReader& cfg, int64_t default_heads, RopeLayout rope, ModelSpec& spec) {
  IndexerSpec ix;
  D0_ASSIGN_OR_RETURN(ix.n_heads, cfg.optional_int("index_n_heads", default_heads, 1, 4096));
  D0_ASSIGN_OR_RETURN(ix.head_dim, cfg.optional_int("index_head_dim", 128, 1, 4096));
  D0_ASSIGN_OR_RETURN(ix.topk, cfg.optional_int("index_topk", 2048, 1));
  ix.rope_layout = rope;
  if (ix.head_dim < spec.mla->qk_rope_head_dim) {
    return cfg.invalid("index_head_dim",
                       fmt::format("{} is narrower than qk_rope_head_dim ({}), the indexer's rotary part",
                                   ix.head_dim, spec.mla->qk_rope_head_dim));
  }
  spec.indexer = ix;
  return Status::ok();
}

void dsa_indexer_weights(const ModelSpec& s, WeightTableBuilder& lb, WeightStorage weights_proj) {
  const IndexerSpec& ix = *s.indexer;
  const int64_t H = s.hidden_size;
  const auto role = TensorRole::kAttention;
  lb.add("self_attn.indexer.wq_b.weight", {ix.n_heads * ix.head_dim, s.mla->q_lora_rank},
         WeightStorage::kProjection, role, weights::kReplicated, WeightSlot::kIndexerQ);
  lb.add("self_attn.indexer.wk.weight", {ix.head_dim, H}, WeightStorage::kProjection, role,
         weights::kReplicated, WeightSlot::kIndexerK);
  lb.add("self_attn.indexer.k_norm.weight", {ix.head_dim}, WeightStorage::kKeptF32, TensorRole::kNorm,
         weights::kReplicated, WeightSlot::kIndexerKNorm);
  lb.add("self_attn.indexer.k_norm.bias", {ix.head_dim}, WeightStorage::kKeptF32, TensorRole::kNorm,
         weights::kReplicated, WeightSlot::kIndexerKNormBias);
  lb.add("self_attn.indexer.weights_proj.weight", {ix.n_heads, H}, weights_proj, role, weights::kReplicated,
         WeightSlot::kIndexerWeights);
}

Status check_indexed_layer_types(const ConfigReader& cfg, const ModelSpec& spec) {
  D0_ASSIGN_OR_RETURN(std::vector<std::string> types, cfg.optional_string_list("layer_types"));
  if (!types.empty() && static_cast<int64_t>(types.size()) != spec.n_layers) {
    return cfg.invalid("layer_types", fmt::format("expected {} entries (num_hidden_layers), found {}",
                                                  spec.n_layers, types.size()));
  }
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] != "indexed_attention") {
      return cfg.mismatch(fmt::format("layer_types[{}]", i), "\"indexed_attention\"");
    }
  }
  return Status::ok();
}

Status parse_deepseek_moe(const ConfigReader& cfg, const DeepseekMoeDefaults& defaults, ModelSpec& spec) {
  MoeSpec moe;
  D0_ASSIGN_OR_RETURN(moe.n_experts,
                      aliased_int(cfg, {"n_routed_experts", "num_local_experts"}, 1, kMaxExperts));
  D0_ASSIGN_OR_RETURN(moe.experts_per_token, cfg.required_int("num_experts_per_tok", 1, moe.n_experts));
  D0_ASSIGN_OR_RETURN(moe.expert_intermediate, cfg.required_int("moe_intermediate_size"));
  D0_ASSIGN_OR_RETURN(moe.n_shared_experts,
                      cfg.optional_int("n_shared_experts", defaults.n_shared_experts, 0, kMaxExperts));
  moe.shared_intermediate = moe.n_shared_experts * moe.expert_intermediate;
  D0_ASSIGN_OR_RETURN(moe.scoring, parse_scoring(cfg, defaults.scoring));
  D0_ASSIGN_OR_RETURN(moe.topk_method, parse_topk_method(cfg, defaults.topk_method));
  D0_ASSIGN_OR_RETURN(moe.n_group, cfg.optional_int("n_group", defaults.n_group, 1, moe.n_experts));
  D0_ASSIGN_OR_RETURN(moe.topk_group, cfg.optional_int("topk_group", defaults.topk_group, 1, moe.n_group));
  if (moe.n_experts % moe.n_group != 0) {
    return cfg.invalid(
        "n_group", fmt::format("must divide n_routed_experts ({}), found {}", moe.n_experts, moe.n_group));
  }
  D0_ASSIGN_OR_RETURN(moe.norm_topk_prob, cfg.optional_bool("norm_topk_prob", defaults.norm_topk_prob));
  D0_ASSIGN_OR_RETURN(moe.routed_scaling_factor,
                      cfg.optional_double("routed_scaling_factor", defaults.routed_scaling_factor));
  moe.correction_bias = moe.topk_method == TopkMethod::kNoauxTc;
  spec.moe = moe;
  D0_ASSIGN_OR_RETURN(int64_t first_dense,
                      cfg.optional_int("first_k_dense_replace", defaults.first_k_dense_replace, 0));
  // transformers places MoE on every layer from first_k_dense_replace on; moe_layer_freq is 1 in
  // every release and the native classes ignore it: another value would mean a layout they (and we)
  // do not build.
  D0_ASSIGN_OR_RETURN(int64_t freq, cfg.optional_int("moe_layer_freq", 1, 1));
  if (freq != 1) {
    return unsupported(
        fmt::format("{}: moe_layer_freq: {} is not supported (Day0 implements 1)", cfg.source(), freq));
  }
  for (int64_t n = 0; n < spec.n_layers; ++n) {
    LayerSpec& layer = spec.layers[static_cast<size_t>(n)];
    layer.moe = n >= first_dense;
    layer.dense_intermediate = layer.moe ? 0 : spec.intermediate_size;
  }
  D0_ASSIGN_OR_RETURN(spec.n_mtp_layers, cfg.optional_int("num_nextn_predict_layers", 0, 0, 64));
  return Status::ok();
}

void write_deepseek_moe(const ModelSpec& spec, nlohmann::json& out) {
  const MoeSpec& moe = *spec.moe;
  out["n_routed_experts"] = moe.n_experts;
  out["num_experts_per_tok"] = moe.experts_per_token;
  out["moe_intermediate_size"] = moe.expert_intermediate;
  out["n_shared_experts"] = moe.n_shared_experts;
  out["scoring_func"] = moe.scoring == RouterScoring::kSigmoid ? "sigmoid" : "softmax";
  out["topk_method"] = topk_method_name(moe.topk_method);
  out["n_group"] = moe.n_group;
  out["topk_group"] = moe.topk_group;
  out["norm_topk_prob"] = moe.norm_topk_prob;
  out["routed_scaling_factor"] = moe.routed_scaling_factor;
  out["first_k_dense_replace"] = first_moe_layer(spec);
  out["moe_layer_freq"] = 1;
  out["num_nextn_predict_layers"] = spec.n_mtp_layers;
}

void deepseek_ffn_weights(const ModelSpec& s, WeightTableBuilder& b, const LayerSpec& layer) {
  if (layer.moe) return weights::deepseek_moe(s, b);
  weights::dense_mlp(s, b, "mlp.", layer.dense_intermediate, false);
}

}  // namespace day0::families
