#include "day0/model/model_spec.h"

#include <algorithm>

namespace day0 {

const char* attention_mask_name(AttentionMask mask) {
  switch (mask) {
    case AttentionMask::kCausal:
      return "causal";
    case AttentionMask::kSliding:
      return "sliding";
    case AttentionMask::kChunked:
      return "chunked";
  }
  return "unknown";
}

const char* rope_type_name(RopeType type) {
  switch (type) {
    case RopeType::kNone:
      return "none";
    case RopeType::kDefault:
      return "default";
    case RopeType::kLinear:
      return "linear";
    case RopeType::kDynamic:
      return "dynamic";
    case RopeType::kLlama3:
      return "llama3";
    case RopeType::kYarn:
      return "yarn";
  }
  return "unknown";
}

const char* topk_method_name(TopkMethod method) {
  switch (method) {
    case TopkMethod::kGreedy:
      return "greedy";
    case TopkMethod::kGroupLimitedGreedy:
      return "group_limited_greedy";
    case TopkMethod::kNoauxTc:
      return "noaux_tc";
    case TopkMethod::kLogitsThenSoftmax:
      return "logits_then_softmax";
    case TopkMethod::kLogitsThenSigmoid:
      return "logits_then_sigmoid";
  }
  return "unknown";
}

int64_t count_moe_layers(const ModelSpec& spec) {
  int64_t n = 0;
  for (const auto& layer : spec.layers) n += layer.moe ? 1 : 0;
  return n;
}

int64_t count_masked_layers(const ModelSpec& spec, AttentionMask mask) {
  int64_t n = 0;
  for (const auto& layer : spec.layers) n += layer.mask == mask ? 1 : 0;
  return n;
}

bool layer_has_kv(const LayerSpec& layer) {
  return !layer.linear_attention && !layer.mamba && !layer.no_mixer;
}

bool layer_is_recurrent(const LayerSpec& layer) {
  return layer.linear_attention || layer.mamba;
}

int64_t count_kv_layers(const ModelSpec& spec) {
  int64_t n = 0;
  for (const auto& layer : spec.layers) n += layer_has_kv(layer) ? 1 : 0;
  return n;
}

int64_t count_recurrent_layers(const ModelSpec& spec) {
  int64_t n = 0;
  for (const auto& layer : spec.layers) n += layer_is_recurrent(layer) ? 1 : 0;
  return n;
}

int64_t layer_heads(const ModelSpec& spec, const LayerSpec& layer) {
  return layer.n_heads > 0 ? layer.n_heads : spec.n_heads;
}

int64_t layer_kv_heads(const ModelSpec& spec, const LayerSpec& layer) {
  return layer.n_kv_heads > 0 ? layer.n_kv_heads : spec.n_kv_heads;
}

int64_t max_kv_heads(const ModelSpec& spec) {
  int64_t n = spec.n_kv_heads;
  for (const auto& layer : spec.layers) {
    if (layer_has_kv(layer)) n = std::max(n, layer_kv_heads(spec, layer));
  }
  return n;
}

int64_t value_head_dim(const ModelSpec& spec) {
  return spec.value_head_dim > 0 ? spec.value_head_dim : spec.head_dim;
}

int64_t rotary_dims(int64_t head_dim, double factor) {
  return static_cast<int64_t>(static_cast<double>(head_dim) * factor) / 2 * 2;
}

}  // namespace day0
