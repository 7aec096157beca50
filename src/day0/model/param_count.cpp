#include "day0/model/param_count.h"

#include <algorithm>

#include "day0/core/checked_math.h"

namespace day0 {

Result<ParamCounts> count_params(const ModelSpec& spec, const TensorManifest& manifest) {
  ParamCounts c;
  bool ok = true;
  auto add = [&ok](int64_t& into, int64_t value) {
    auto sum = checked_add(into, value);
    if (!sum) ok = false;
    into = sum.value_or(0);
  };
  for (const auto& t : manifest.tensors) {
    if (t.mtp) {  // multi-token-prediction layers are not part of the main model: counted apart
      if (t.role != TensorRole::kQuantScale) add(c.mtp, t.params);
      continue;
    }
    auto bytes = checked_add(c.stored_bytes, t.bytes);
    if (!bytes) ok = false;
    c.stored_bytes = bytes.value_or(0);
    if (t.role == TensorRole::kQuantScale) continue;
    add(c.total, t.params);
    switch (t.role) {
      case TensorRole::kEmbedding:
        add(c.embedding, t.params);
        break;
      case TensorRole::kLmHead:
        add(c.lm_head, t.params);
        break;
      case TensorRole::kNorm:
        add(c.norms, t.params);
        break;
      case TensorRole::kAttention:
        add(c.attention, t.params);
        break;
      case TensorRole::kDenseMlp:
        add(c.dense_mlp, t.params);
        break;
      case TensorRole::kRouter:
        add(c.router, t.params);
        break;
      case TensorRole::kRoutedExpert:
        add(c.routed_experts, t.params);
        break;
      case TensorRole::kSharedExpert:
        add(c.shared_experts, t.params);
        break;
      case TensorRole::kHyperConnection:
        add(c.hyper_connections, t.params);
        break;
      case TensorRole::kQuantScale:
        break;
    }
  }
  if (!ok) return out_of_range("parameter count overflows 64 bits");
  if (spec.moe && spec.moe->n_experts > 0) {
    // Every MoE layer has n_experts equal experts, so the routed total is a multiple of n_experts
    // and the active share is exactly top-k of them (fused expert tensors included).
    const int64_t per_expert = c.routed_experts / spec.moe->n_experts;
    const auto active = checked_mul(per_expert, spec.moe->experts_per_token);
    if (!active) return out_of_range("active parameter count overflows 64 bits");
    c.routed_experts_active = *active;
  }
  c.active = c.total - c.routed_experts + c.routed_experts_active;
  c.active_min = c.active;
  if (spec.moe && spec.moe->n_experts > 0 && spec.moe->n_zero_experts > 0) {
    const int64_t fewest = std::max<int64_t>(0, spec.moe->experts_per_token - spec.moe->n_zero_experts);
    c.active_min = c.total - c.routed_experts + c.routed_experts / spec.moe->n_experts * fewest;
  }
  // A tied embedding is still read in full as the head, so only an untied input table drops out.
  c.active_without_embedding = spec.tie_word_embeddings ? c.active : c.active - c.embedding;
  c.active_without_embeddings = c.active - c.embedding - c.lm_head;
  return c;
}

Result<ParamCounts> count_params(const ModelSpec& spec) {
  D0_ASSIGN_OR_RETURN(TensorManifest manifest, build_tensor_manifest(spec));
  return count_params(spec, manifest);
}

}  // namespace day0
