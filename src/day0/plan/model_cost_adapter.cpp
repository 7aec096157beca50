#include "day0/plan/model_cost_adapter.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "day0/model/attention_cost.h"
#include "day0/model/catalog.h"
#include "day0/model/config_parser.h"
#include "day0/model/model_memory.h"

namespace day0::plan {

namespace {

// The planner's group of a decoder-layer tensor, from the weight table's role and shard rule (a
// quantization scale follows the weight it scales).
std::optional<WeightGroup> weight_group(const TensorSpec& t) {
  const TensorRole role = t.role == TensorRole::kQuantScale ? t.scaled_role : t.role;
  switch (role) {
    case TensorRole::kAttention:
      if (t.shard.rule == ShardRule::kReplicated) return WeightGroup::kAttentionReplicated;
      if (t.shard.rule == ShardRule::kColumnKv) return WeightGroup::kAttentionKv;
      return WeightGroup::kAttentionSharded;
    case TensorRole::kDenseMlp:
      return WeightGroup::kDenseMlp;
    case TensorRole::kRouter:
      return WeightGroup::kRouter;
    case TensorRole::kRoutedExpert:
      return WeightGroup::kRoutedExperts;
    case TensorRole::kSharedExpert:
      return WeightGroup::kSharedExperts;
    case TensorRole::kNorm:
      return WeightGroup::kNorm;
    case TensorRole::kHyperConnection:  // small, float32, on every rank
      return WeightGroup::kAttentionReplicated;
    case TensorRole::kEmbedding:
    case TensorRole::kLmHead:
    case TensorRole::kQuantScale:
      break;
  }
  return std::nullopt;
}

}  // namespace

Result<ModelCost> model_cost_from_spec(const ModelSpec& spec, const TensorManifest& manifest,
                                       const std::string& name) {
  if (spec.n_layers <= 0 || static_cast<int64_t>(spec.layers.size()) != spec.n_layers) {
    return invalid_argument(
        fmt::format("{}: spec has {} layers but {} layer entries", name, spec.n_layers, spec.layers.size()));
  }
  ModelCost m;
  m.name = name;
  m.mla = spec.attention == AttentionKind::kMla && spec.mla.has_value();
  m.hidden = spec.hidden_size;
  m.max_context = spec.max_position_embeddings;
  m.vocab = spec.vocab_size;
  m.n_heads = spec.n_heads;
  m.n_kv_heads = m.mla ? 1 : spec.n_kv_heads;
  if (spec.shared_kv_low_rank) m.out_groups = spec.shared_kv_low_rank->out_groups;
  m.tied_embeddings = spec.tie_word_embeddings;
  m.unimplemented = unimplemented_mechanisms(spec);
  if (m.mla) {
    m.qk_head_dim = spec.mla->qk_nope_head_dim + spec.mla->qk_rope_head_dim;
    m.v_head_dim = spec.mla->v_head_dim;
  } else {
    m.qk_head_dim = spec.head_dim;
    m.v_head_dim = value_head_dim(spec);
  }
  if (spec.moe) {
    m.n_experts = spec.moe->n_experts;
    m.experts_per_token = static_cast<double>(spec.moe->experts_per_token) * spec.moe->mean_real_expert_share;
    m.expert_intermediate = spec.moe->expert_intermediate;
    m.shared_intermediate = spec.moe->shared_intermediate;
  }
  switch (spec.weights.format) {
    case WeightFormat::kFp8Block:
      m.checkpoint_precision = WeightPrecision::kFP8;
      break;
    case WeightFormat::kMxfp4:
      m.checkpoint_precision = WeightPrecision::kINT4;
      break;
    default:
      m.checkpoint_precision = WeightPrecision::kBF16;
      break;
  }
  // Pack-quantized projections are dequantized at load today: the compute stays BF16, while the
  // stored bytes (from the weight table) are the packed ones.
  m.layers.resize(static_cast<size_t>(spec.n_layers));
  for (int64_t i = 0; i < spec.n_layers; ++i) {
    const LayerSpec& ls = spec.layers[static_cast<size_t>(i)];
    LayerCost& l = m.layers[static_cast<size_t>(i)];
    l.moe = ls.moe;
    l.heads_norm_all_reduce = spec.qk_norm && spec.qk_norm_full_width;
    if (!ls.moe || spec.dense_mlp_beside_moe)  // a dense MLP of its own or beside the MoE
      m.dense_intermediate = std::max(m.dense_intermediate, ls.dense_intermediate);
    if (ls.mask != AttentionMask::kCausal && ls.window > 0) l.kv_window = ls.window;
    set_kv_bytes_per_token(l, spec, !layer_has_kv(ls));
    if (!layer_is_recurrent(ls)) l.state_bytes_per_sequence = 0.0;  // an FFN-only layer keeps nothing
    // A compressed KV layer's partial groups join the sequence's state (set after the line above).
    set_compressed_kv_bytes_per_token(l, spec, ls);
    // Attention's cost per (query, key) pair: the figure the recorder measures on the engine's kernels.
    const AttentionPairCost pair = attention_pair_cost(spec, ls);
    l.attn_flops_per_pair_decode = pair.decode_flops;
    l.attn_flops_per_pair_prefill = pair.prefill_flops;
    l.reach = pair.reach;
    l.index_flops_per_pair = pair.index_flops;
    // An indexer over raw keys reads one index key a token, cached in the same rows (beside K and V, or
    // the MLA latent); a compressed layer's index keys sit in its entries, beside the pooled key = value
    // (model_memory.h compressed_kv_entry_bytes).
    const int64_t index_width = ls.block_sparse && spec.block_indexer ? spec.block_indexer->head_dim
                                : spec.indexer                        ? spec.indexer->head_dim
                                                                      : 0;
    if (pair.index_flops > 0 && pair.reach.entry_ratio == 0 && index_width > 0) {
      l.index_key_share = static_cast<double>(index_width * kv_dtype_bytes(KvDtype::kBF16)) /
                          static_cast<double>(kv_bytes_per_token_per_layer(spec, KvDtype::kBF16));
    }
    if (pair.index_flops > 0 && pair.reach.entry_ratio > 0) {  // the indexer's key beside the pooled entry
      const auto index_dim = static_cast<double>(spec.compressed_kv->index_head_dim);
      l.index_key_share = index_dim / (static_cast<double>(spec.head_dim) + index_dim);
    }
  }
  for (const TensorSpec& t : manifest.tensors) {
    if (t.mtp) continue;  // multi-token-prediction layers are not planned
    const auto params = static_cast<double>(t.params);
    const auto bytes = static_cast<double>(t.bytes);
    if (t.layer < 0) {
      switch (t.role) {
        case TensorRole::kEmbedding:
          m.embedding_params += params;
          m.embedding_checkpoint_bytes += bytes;
          break;
        case TensorRole::kLmHead:
          m.lm_head_params += params;
          m.lm_head_checkpoint_bytes += bytes;
          break;
        default:  // final norm (and any scale outside the layers)
          m.final_norm_params += params;
          break;
      }
      continue;
    }
    LayerCost& l = m.layers[static_cast<size_t>(t.layer)];
    const std::optional<WeightGroup> group = weight_group(t);
    if (!group) {
      return internal_error(fmt::format("{}: tensor {} has no planner weight group", name, t.name));
    }
    l.param(*group) += params;
    l.stored(*group) += bytes;
  }
  return m;
}

Result<ModelCost> model_cost_from_config(const nlohmann::json& config, const std::string& name) {
  D0_ASSIGN_OR_RETURN(ModelSpec spec, parse_model_config(config, name));
  D0_ASSIGN_OR_RETURN(TensorManifest manifest, build_tensor_manifest(spec));
  return model_cost_from_spec(spec, manifest, name);
}

Result<ModelCost> load_model_cost(const std::string& model_arg) {
  D0_ASSIGN_OR_RETURN(ResolvedModel resolved, resolve_model(model_arg));
  D0_ASSIGN_OR_RETURN(TensorManifest manifest, build_tensor_manifest(resolved.spec));
  std::string name = model_arg;
  if (resolved.from_catalog) {
    const std::string prefix = "catalog:";
    name = resolved.source.rfind(prefix, 0) == 0 ? resolved.source.substr(prefix.size()) : model_arg;
  } else if (!resolved.folder.empty()) {
    name = std::filesystem::path(resolved.folder).lexically_normal().filename().string();
    if (name.empty()) name = std::filesystem::path(resolved.folder).parent_path().filename().string();
  }
  return model_cost_from_spec(resolved.spec, manifest, name);
}

}  // namespace day0::plan
