#include "day0/plan/model_cost_adapter.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <string_view>

#include "day0/model/catalog.h"

namespace day0::plan {

namespace {

bool contains(std::string_view name, std::string_view part) {
  return name.find(part) != std::string_view::npos;
}

// Attention tensors by how TP splits them: MLA down-projections are whole on every rank, GQA k/v split
// by kv head, the rest by head.
WeightGroup attention_group(std::string_view name) {
  if (contains(name, "q_a_proj") || contains(name, "kv_a_proj")) return WeightGroup::kAttentionReplicated;
  if (contains(name, "k_proj") || contains(name, "v_proj")) return WeightGroup::kAttentionKv;
  return WeightGroup::kAttentionSharded;
}

// Scale tensors follow the weight they scale; their name says which.
std::optional<WeightGroup> scale_group(std::string_view name) {
  if (contains(name, "shared_expert")) return WeightGroup::kSharedExperts;
  if (contains(name, "experts")) return WeightGroup::kRoutedExperts;
  if (contains(name, "self_attn")) return attention_group(name);
  if (contains(name, "mlp") || contains(name, "feed_forward")) return WeightGroup::kDenseMlp;
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
  m.tied_embeddings = spec.tie_word_embeddings;
  if (m.mla) {
    m.qk_head_dim = spec.mla->qk_nope_head_dim + spec.mla->qk_rope_head_dim;
    m.v_head_dim = spec.mla->v_head_dim;
  } else {
    m.qk_head_dim = spec.head_dim;
    m.v_head_dim = spec.head_dim;
  }
  if (spec.moe) {
    m.n_experts = spec.moe->n_experts;
    m.experts_per_token = spec.moe->experts_per_token;
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
  m.layers.resize(static_cast<size_t>(spec.n_layers));
  const auto heads = static_cast<double>(spec.n_heads);
  for (int64_t i = 0; i < spec.n_layers; ++i) {
    const LayerSpec& ls = spec.layers[static_cast<size_t>(i)];
    LayerCost& l = m.layers[static_cast<size_t>(i)];
    l.moe = ls.moe;
    if (!ls.moe) m.dense_intermediate = std::max(m.dense_intermediate, ls.dense_intermediate);
    if (ls.mask != AttentionMask::kCausal && ls.window > 0) l.kv_window = ls.window;
    if (m.mla) {
      const auto latent = static_cast<double>(spec.mla->kv_lora_rank);
      const auto rope = static_cast<double>(spec.mla->qk_rope_head_dim);
      l.kv_elements_per_token = latent + rope;
      l.attn_flops_per_pair_decode = heads * (2 * (latent + rope) + 2 * latent);
      l.attn_flops_per_pair_prefill =
          heads * (2 * static_cast<double>(m.qk_head_dim) + 2 * static_cast<double>(m.v_head_dim));
    } else {
      const auto hd = static_cast<double>(spec.head_dim);
      l.kv_elements_per_token = 2 * static_cast<double>(spec.n_kv_heads) * hd;
      l.attn_flops_per_pair_decode = heads * 4 * hd;
      l.attn_flops_per_pair_prefill = heads * 4 * hd;
    }
  }
  for (const TensorSpec& t : manifest.tensors) {
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
    if (t.layer >= spec.n_layers) continue;  // MTP layers are not planned
    LayerCost& l = m.layers[static_cast<size_t>(t.layer)];
    std::optional<WeightGroup> group;
    switch (t.role) {
      case TensorRole::kAttention:
        group = attention_group(t.name);
        break;
      case TensorRole::kDenseMlp:
        group = WeightGroup::kDenseMlp;
        break;
      case TensorRole::kRouter:
        group = WeightGroup::kRouter;
        break;
      case TensorRole::kRoutedExpert:
        group = WeightGroup::kRoutedExperts;
        break;
      case TensorRole::kSharedExpert:
        group = WeightGroup::kSharedExperts;
        break;
      case TensorRole::kNorm:
        group = WeightGroup::kNorm;
        break;
      case TensorRole::kQuantScale:
        group = scale_group(t.name);
        break;
      case TensorRole::kEmbedding:
      case TensorRole::kLmHead:
        break;
    }
    if (!group) {
      return internal_error(fmt::format("{}: tensor {} has no planner weight group", name, t.name));
    }
    l.param(*group) += params;
    l.stored(*group) += bytes;
  }
  return m;
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
