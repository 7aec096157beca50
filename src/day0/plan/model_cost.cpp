#include "day0/plan/model_cost.h"

#include <algorithm>

#include "day0/model/model_memory.h"

namespace day0::plan {

const char* weight_group_name(WeightGroup g) {
  switch (g) {
    case WeightGroup::kAttentionSharded:
      return "attention (sharded)";
    case WeightGroup::kAttentionReplicated:
      return "attention (replicated)";
    case WeightGroup::kAttentionKv:
      return "attention k/v";
    case WeightGroup::kDenseMlp:
      return "dense MLP";
    case WeightGroup::kSharedExperts:
      return "shared experts";
    case WeightGroup::kRoutedExperts:
      return "routed experts";
    case WeightGroup::kRouter:
      return "router";
    case WeightGroup::kNorm:
      return "norms";
  }
  return "?";
}

bool weight_group_quantizable(WeightGroup g) {
  return g != WeightGroup::kRouter && g != WeightGroup::kNorm;
}

double bytes_per_param(WeightPrecision precision) {
  switch (precision) {
    case WeightPrecision::kCheckpoint:
      return 0;
    case WeightPrecision::kBF16:
      return 2.0;
    case WeightPrecision::kFP8:
      return 1.0 + 4.0 / (128.0 * 128.0);
    case WeightPrecision::kINT8:
      return 1.0;
    case WeightPrecision::kINT4:
      return 0.5 + 2.0 / 128.0;
  }
  return 2.0;
}

double group_bytes(const LayerCost& layer, WeightGroup g, WeightPrecision precision) {
  if (precision == WeightPrecision::kCheckpoint) return layer.stored(g);
  if (!weight_group_quantizable(g)) return layer.param(g) * 2.0;
  return layer.param(g) * bytes_per_param(precision);
}

std::array<WeightTableRow, 5> weight_table(double params) {
  return {
      {{"FP32", params * 4}, {"BF16", params * 2}, {"FP8", params}, {"INT8", params}, {"INT4", params / 2}}};
}

double ModelCost::total_params() const {
  double total = embedding_params + lm_head_params + final_norm_params;
  for (const auto& layer : layers) {
    for (double p : layer.params) total += p;
  }
  return total;
}

double ModelCost::active_params_per_token() const {
  double total = embedding_params + lm_head_params + final_norm_params;
  for (const auto& layer : layers) {
    for (int g = 0; g < kWeightGroups; ++g) {
      if (g == static_cast<int>(WeightGroup::kRoutedExperts)) {
        if (n_experts > 0) total += layer.params[g] * static_cast<double>(experts_per_token) / n_experts;
      } else {
        total += layer.params[g];
      }
    }
  }
  return total;
}

void set_kv_bytes_per_token(LayerCost& layer, const ModelSpec& spec, bool linear_attention) {
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kFp8E4M3}) {
    const auto i = static_cast<size_t>(dtype);
    layer.kv_bytes_per_token[i] =
        linear_attention ? 0.0 : static_cast<double>(kv_bytes_per_token_per_layer(spec, dtype));
  }
  layer.state_bytes_per_sequence =
      linear_attention ? static_cast<double>(recurrent_state_bytes_per_layer(spec, KvDtype::kBF16)) : 0.0;
}

void set_compressed_kv_bytes_per_token(LayerCost& layer, const ModelSpec& spec, const LayerSpec& layer_spec) {
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kFp8E4M3}) {
    layer.compressed_kv_bytes_per_token[static_cast<size_t>(dtype)] =
        compressed_kv_bytes_per_token(spec, layer_spec, dtype);
  }
  layer.state_bytes_per_sequence +=
      static_cast<double>(compressed_kv_state_bytes_per_layer(spec, layer_spec));
}

double ModelCost::kv_bytes_per_token(KvPrecision kv) const {
  double total = 0;
  for (const auto& layer : layers) total += layer.kv_bytes(kv) + layer.compressed_kv_bytes(kv);
  return total;
}

double ModelCost::state_bytes_per_sequence() const {
  double total = 0;
  for (const auto& layer : layers) total += layer.state_bytes_per_sequence;
  return total;
}

}  // namespace day0::plan
