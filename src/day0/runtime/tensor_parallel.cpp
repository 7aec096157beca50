// Tensor- and expert-parallel shapes: which rows each rank holds, which specs can be split, and the
// spec a rank's blocks compute with (its heads, FFN columns and expert widths).
#include <algorithm>

#include <fmt/format.h>

#include "day0/dist/pipeline_stages.h"
#include "day0/model/tensor_manifest.h"
#include "day0/ops/tensor.h"
#include "day0/runtime/model_weights.h"

namespace day0 {

ShardRange even_shard(int64_t n, TensorShard shard) {
  const int64_t per = n / shard.size;
  return {per * shard.rank, per * (shard.rank + 1)};
}

int64_t vocab_shard_rows(int64_t vocab, TensorShard shard) {
  return (vocab + shard.size - 1) / shard.size;
}

ShardRange vocab_shard(int64_t vocab, TensorShard shard) {
  const int64_t per = vocab_shard_rows(vocab, shard);
  const int64_t begin = std::min(vocab, per * shard.rank);
  return {begin, std::min(vocab, begin + per)};
}

ShardRange kv_head_shard(int64_t rows, int64_t n_kv_heads, TensorShard shard) {
  if (n_kv_heads % shard.size == 0) return even_shard(rows, shard);
  // Fewer KV heads than ranks: each rank keeps the one KV head its query heads read (a copy of it
  // lives on size / n_kv_heads ranks).
  const int64_t per_head = rows / n_kv_heads;
  const int64_t head = static_cast<int64_t>(shard.rank) * n_kv_heads / shard.size;
  return {head * per_head, (head + 1) * per_head};
}

Status check_tensor_parallel(const ModelSpec& s, int tp) {
  if (tp < 1) return invalid_argument(fmt::format("--tp {}: must be at least 1", tp));
  if (tp == 1) return Status::ok();
  const std::string what = fmt::format("tensor parallelism over {} ranks ({})", tp, s.family);
  if (s.attention == AttentionKind::kMla && !s.mla) return invalid_argument(what + ": MLA without its sizes");
  if (s.mamba) return unsupported(what + ": Mamba-2 layers do not split over ranks yet");
  if (s.dense_mlp_beside_moe) return unsupported(what + ": a dense MLP beside the MoE is not split yet");
  if (s.linear_attention && s.linear_attention->n_key_heads % tp != 0) {
    // Gated DeltaNet splits by key heads (each with its value heads, conv channels and state).
    return invalid_argument(fmt::format("{}: {} Gated DeltaNet key heads do not divide into {} parts", what,
                                        s.linear_attention->n_key_heads, tp));
  }
  bool moe_layers = false;
  for (const LayerSpec& l : s.layers) {
    moe_layers = moe_layers || l.moe;
    if (l.moe) continue;
    if (l.dense_intermediate % tp != 0) {
      return invalid_argument(
          fmt::format("{}: the FFN width {} does not divide into {} parts", what, l.dense_intermediate, tp));
    }
  }
  if (s.n_heads % tp != 0) {
    // MLA splits q_b / kv_b by whole heads too (the latent is per token, not per head).
    return invalid_argument(fmt::format("{}: {} {}attention heads do not divide into {} parts", what,
                                        s.n_heads, s.attention == AttentionKind::kMla ? "MLA " : "", tp));
  }
  if (s.shared_kv_low_rank) {
    if (std::string why = output_groups_split_problem(s.shared_kv_low_rank->out_groups, tp); !why.empty())
      return invalid_argument(fmt::format("{}: {}", what, why));
  }
  if (s.n_kv_heads % tp != 0 && tp % s.n_kv_heads != 0) {
    return invalid_argument(fmt::format(
        "{}: {} KV heads neither divide into {} parts nor into their multiple", what, s.n_kv_heads, tp));
  }
  for (const LayerSpec& l : s.layers) {  // layers with head counts of their own
    const int64_t heads = layer_heads(s, l), kv = layer_kv_heads(s, l);
    if (heads % tp != 0 || (kv % tp != 0 && tp % kv != 0)) {
      return invalid_argument(fmt::format("{}: a layer's {} heads / {} KV heads do not split into {} parts",
                                          what, heads, kv, tp));
    }
  }
  if (s.block_indexer && s.block_indexer->n_heads % tp != 0 && tp % s.block_indexer->n_heads != 0) {
    // The indexer is whole on every rank; a rank's query heads must read whole index heads or one part
    // of one.
    return invalid_argument(
        fmt::format("{}: {} block-sparse index heads neither divide into {} parts nor into "
                    "their multiple",
                    what, s.block_indexer->n_heads, tp));
  }
  if (moe_layers && s.moe) {
    // Every routed expert is split like a dense FFN (gate / up by output rows, down by input
    // columns): expert-TP. The shared expert is a dense FFN.
    const MoeSpec& m = *s.moe;
    // Zero-computation experts are added by one rank of the sum (weights_for_sum).
    if (m.expert_intermediate % tp != 0) {
      return invalid_argument(fmt::format("{}: the expert width {} does not divide into {} parts", what,
                                          m.expert_intermediate, tp));
    }
    if (m.shared_intermediate % tp != 0) {
      return invalid_argument(fmt::format("{}: the shared expert width {} does not divide into {} parts",
                                          what, m.shared_intermediate, tp));
    }
    // Experts stacked in one tensor split the same way, expert by expert.
    // FP4 experts (one tensor an expert) split their down projection's input on whole scale groups.
    const int64_t group = s.weights.fp4_expert_group;
    if (group > 0 && (m.expert_intermediate / tp) % group != 0) {
      return invalid_argument(
          fmt::format("{}: FP4 experts of width {} would split inside their {}-column scale groups", what,
                      m.expert_intermediate, group));
    }
  }
  // A q/k RMSNorm over all heads sums each rank's squares over the group (split_rms_norm).
  // FP8 block weights split anywhere (a part's scale grid is re-blocked, WeightBinder::linear_part);
  // MXFP4 experts in whole 32-column groups, or as exact BF16 where a split cuts a group.
  if (s.weights.format != WeightFormat::kBF16 && s.weights.format != WeightFormat::kF16 &&
      s.weights.format != WeightFormat::kF32 && s.weights.format != WeightFormat::kFp8Block &&
      s.weights.format != WeightFormat::kMxfp4) {
    return unsupported(
        fmt::format("{}: {} weights are not split yet (BF16, F16, F32, FP8 blocks and MXFP4 experts are)",
                    what, weight_format_name(s.weights.format)));
  }
  if (vocab_shard_rows(s.vocab_size, {0, tp}) * (tp - 1) >= s.vocab_size) {
    return invalid_argument(
        fmt::format("{}: a vocabulary of {} leaves the last rank no rows", what, s.vocab_size));
  }
  return Status::ok();
}

ModelSpec tensor_parallel_spec(const ModelSpec& spec, TensorShard shard) {
  ModelSpec local = spec;
  if (shard.whole()) return local;
  local.n_heads = spec.n_heads / shard.size;
  local.n_kv_heads = spec.n_kv_heads % shard.size == 0 ? spec.n_kv_heads / shard.size : 1;
  local.intermediate_size = spec.intermediate_size / shard.size;
  for (LayerSpec& l : local.layers) {
    l.dense_intermediate /= shard.size;
    if (l.n_heads > 0) l.n_heads /= shard.size;
    if (l.n_kv_heads > 0) l.n_kv_heads = l.n_kv_heads % shard.size == 0 ? l.n_kv_heads / shard.size : 1;
  }
  // Shared key = value attention: the heads and their output groups split, the one K=V head, compressors
  // and indexer are whole on every rank.
  if (local.shared_kv_low_rank) local.shared_kv_low_rank->out_groups /= shard.size;
  if (local.linear_attention) {  // whole key heads, each with its value heads
    local.linear_attention->n_key_heads /= shard.size;
    local.linear_attention->n_value_heads /= shard.size;
  }
  if (local.moe) {
    local.moe->expert_intermediate /= shard.size;
    local.moe->shared_intermediate /= shard.size;
  }
  return local;
}

Status check_expert_parallel(const ModelSpec& s, int ep) {
  if (ep < 1) return invalid_argument(fmt::format("--ep {}: must be at least 1", ep));
  if (ep == 1) return Status::ok();
  const std::string what = fmt::format("expert parallelism over {} ranks ({})", ep, s.family);
  if (s.moe && s.moe->latent_size > 0)
    return unsupported(what + ": a latent MoE does not split over ranks yet");
  const bool moe_layers =
      s.moe && s.moe->n_experts > 0 &&
      std::any_of(s.layers.begin(), s.layers.end(), [](const LayerSpec& l) { return l.moe; });
  if (!moe_layers) {
    return invalid_argument(what +
                            ": the model has no routed experts (a dense model); --ep places the experts of a "
                            "mixture-of-experts model over ranks, --tp splits a dense one");
  }
  // Gated DeltaNet layers are replicated like attention: each rank keeps the whole
  // recurrent state of every sequence.
  // Zero-computation experts are added once (by one rank of the sum, or by the row's
  // owner under the all-to-all combine) and a shortcut MoE is a MoE like any other.
  if (s.moe->n_experts < ep) {
    return invalid_argument(
        fmt::format("{}: {} routed experts cannot give each of {} ranks one (use --ep {} or fewer)", what,
                    s.moe->n_experts, ep, s.moe->n_experts));
  }
  return Status::ok();
}

Status check_pipeline_parallel(const ModelSpec& s, int pp) {
  if (pp < 1) return invalid_argument(fmt::format("--pp {}: must be at least 1", pp));
  if (pp == 1) return Status::ok();
  const std::string what = fmt::format("pipeline parallelism over {} stages ({})", pp, s.family);
  if (s.n_layers < pp) {
    return invalid_argument(
        fmt::format("{}: {} decoder layers cannot give each stage one (use --pp {} or fewer)", what,
                    s.n_layers, s.n_layers));
  }
  // The MoE of a layer pair is added after the pair's second layer: a stage boundary between them would
  // have to send it too.
  if (s.shortcut_moe) return unsupported(what + ": shortcut-MoE layer pairs are not split yet");
  // Every sequence's cache allocates the recurrent state of every linear-attention layer up front, so
  // each stage would hold all of them.
  if (s.linear_attention)
    return unsupported(what + ": Gated DeltaNet (linear attention) models are not yet split into stages");
  // Per-layer inputs are computed from the token ids on the first stage, for every layer.
  if (s.per_layer_input) return unsupported(what + ": per-layer inputs are not passed between stages yet");
  // A layer attending to an earlier layer's cache needs it on its own stage.
  for (const LayerSpec& l : s.layers) {
    if (l.kv_source >= 0) return unsupported(what + ": KV shared across layers is not split into stages yet");
  }
  // A layer sharing the sparse key selection of the layer before it needs that layer's stage to send it.
  for (int st = 1; st < pp; ++st) {
    const int64_t first = dist::stage_layers(s.n_layers, pp, st).begin;
    if (s.layers[static_cast<size_t>(first)].shared_key_selection) {
      return unsupported(fmt::format(
          "{}: stage {} would start at layer {}, which reuses the sparse key selection of the layer before "
          "it (IndexShare); stages do not pass it on yet",
          what, st, first));
    }
  }
  return Status::ok();
}

}  // namespace day0
