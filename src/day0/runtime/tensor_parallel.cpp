// Tensor-parallel shapes: which rows each rank holds, which specs can be split, and the spec a rank's
// blocks compute with (its heads and FFN columns).
#include <algorithm>

#include <fmt/format.h>

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
  const std::string what = fmt::format("tensor parallelism over {} ranks ({})", tp, family_name(s.family));
  if (s.attention != AttentionKind::kGqa) return unsupported(what + ": MLA attention is not split yet");
  if (s.linear_attention) return unsupported(what + ": Gated DeltaNet (linear attention) is not split yet");
  for (const LayerSpec& l : s.layers) {
    if (l.moe) return unsupported(what + ": MoE layers are not split yet (expert parallelism comes later)");
    if (l.dense_intermediate % tp != 0) {
      return invalid_argument(
          fmt::format("{}: the FFN width {} does not divide into {} parts", what, l.dense_intermediate, tp));
    }
  }
  if (s.n_heads % tp != 0)
    return invalid_argument(
        fmt::format("{}: {} attention heads do not divide into {} parts", what, s.n_heads, tp));
  if (s.n_kv_heads % tp != 0 && tp % s.n_kv_heads != 0) {
    return invalid_argument(fmt::format(
        "{}: {} KV heads neither divide into {} parts nor into their multiple", what, s.n_kv_heads, tp));
  }
  if (s.qk_norm && s.qk_norm_full_width)
    return unsupported(what + ": q/k RMSNorm over all heads (MiniMax-M2) needs a reduction; not split yet");
  if (s.weights.format != WeightFormat::kBF16 && s.weights.format != WeightFormat::kF16 &&
      s.weights.format != WeightFormat::kF32) {
    return unsupported(fmt::format("{}: {} weights are not split yet (BF16, F16 and F32 are)", what,
                                   weight_format_name(s.weights.format)));
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
  for (LayerSpec& l : local.layers) l.dense_intermediate /= shard.size;
  return local;
}

}  // namespace day0
