#include "day0/model/model_spec.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace day0 {

std::string output_groups_split_problem(int64_t out_groups, int64_t tp) {
  if (tp <= 0 || out_groups % tp == 0) return {};
  return fmt::format("{} output projection groups (o_groups) do not divide into {} parts", out_groups, tp);
}

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
    case RopeType::kProportional:
      return "proportional";
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

std::vector<std::string> unimplemented_mechanisms(const ModelSpec& spec) {
  // Every mechanism a family file parses has its block today; a family parsed ahead of its blocks
  // lists them here (one line each, named as a user would look them up).
  (void)spec;
  return {};
}

Status check_engine_runs(const ModelSpec& spec) {
  const std::vector<std::string> missing = unimplemented_mechanisms(spec);
  if (missing.empty()) return Status::ok();
  return unsupported(fmt::format(
      "{} ({}) is parsed, counted and planned, but the engine does not run it yet; not implemented: {}. "
      "inspect, verify, coverage and plan work on it",
      spec.architecture, spec.family, fmt::join(missing, ", ")));
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
  return !layer.linear_attention && !layer.mamba && !layer.no_mixer && layer.kv_source < 0;
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

int64_t layer_head_dim(const ModelSpec& spec, const LayerSpec& layer) {
  return layer.head_dim > 0 ? layer.head_dim : spec.head_dim;
}

int64_t layer_value_head_dim(const ModelSpec& spec, const LayerSpec& layer) {
  return spec.value_head_dim > 0 ? spec.value_head_dim : layer_head_dim(spec, layer);
}

int64_t max_key_width(const ModelSpec& spec) {
  int64_t n = spec.n_kv_heads * spec.head_dim;
  for (const auto& layer : spec.layers) {
    if (layer_has_kv(layer)) n = std::max(n, layer_kv_heads(spec, layer) * layer_head_dim(spec, layer));
  }
  return n;
}

int64_t max_value_width(const ModelSpec& spec) {
  int64_t n = spec.n_kv_heads * value_head_dim(spec);
  for (const auto& layer : spec.layers) {
    if (layer_has_kv(layer)) n = std::max(n, layer_kv_heads(spec, layer) * layer_value_head_dim(spec, layer));
  }
  return n;
}

bool assign_shared_kv_layers(ModelSpec& spec, int64_t n_shared) {
  const int64_t first = spec.n_layers - n_shared;
  for (LayerSpec& layer : spec.layers) layer.kv_source = -1;
  if (n_shared <= 0) return true;
  if (first <= 0) return false;
  for (int64_t l = first; l < spec.n_layers; ++l) {
    LayerSpec& layer = spec.layers[static_cast<size_t>(l)];
    for (int64_t p = first - 1; p >= 0 && layer.kv_source < 0; --p) {
      const LayerSpec& producer = spec.layers[static_cast<size_t>(p)];
      if (producer.mask == layer.mask && producer.window == layer.window) layer.kv_source = p;
    }
    if (layer.kv_source < 0) return false;
  }
  return true;
}

int64_t rotary_dims(int64_t head_dim, double factor) {
  return static_cast<int64_t>(static_cast<double>(head_dim) * factor) / 2 * 2;
}

}  // namespace day0
