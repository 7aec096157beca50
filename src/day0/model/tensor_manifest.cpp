#include "day0/model/tensor_manifest.h"

#include <algorithm>

#include <fmt/format.h>

#include "day0/model/family_registry.h"

namespace day0 {

std::string decoder_prefix(const ModelSpec& spec) {
  return spec.multimodal_wrapper ? "language_model.model." : "model.";
}

namespace {

// Upper bound on the tensors we are willing to list (a trillion-parameter MoE with FP8 scales holds ~140k).
constexpr int64_t kMaxTensors = 20'000'000;

int64_t estimated_tensor_count(const ModelSpec& s) {
  // Counted as if every expert had its own tensors (an upper bound for stacked-expert releases).
  const int64_t experts = s.moe ? s.moe->n_experts + s.moe->n_zero_experts : 0;
  // Both factors are bounded by the parser (layers <= 2^16, experts <= 2^20): no overflow here.
  return (s.n_layers + s.n_mtp_layers) * (2 * 3 * experts + 64) + 8;
}

}  // namespace

void adopt_stored_prefixes(TensorManifest& manifest, const std::function<bool(const std::string&)>& stored) {
  for (const auto& alias : manifest.prefix_aliases) {
    // Plain names, not a structured binding: clang 14 cannot capture those in the lambda below.
    const std::string& canonical = alias.first;
    const std::string& alternative = alias.second;
    const auto first = std::find_if(manifest.tensors.begin(), manifest.tensors.end(),
                                    [&](const TensorSpec& t) { return t.name.starts_with(canonical); });
    if (first == manifest.tensors.end()) continue;
    const std::string renamed = alternative + first->name.substr(canonical.size());
    if (stored(first->name) || !stored(renamed)) continue;
    for (auto* list : {&manifest.tensors, &manifest.unused}) {
      for (TensorSpec& t : *list) {
        if (t.name.starts_with(canonical)) t.name = alternative + t.name.substr(canonical.size());
        if (t.pattern.starts_with(canonical)) t.pattern = alternative + t.pattern.substr(canonical.size());
      }
    }
  }
}

Result<TensorManifest> build_tensor_manifest(const ModelSpec& s) {
  if (s.n_layers <= 0 || s.layers.size() != static_cast<size_t>(s.n_layers)) {
    return invalid_argument("tensor manifest: the spec's layer list does not match num_hidden_layers");
  }
  if (s.n_layers > (int64_t{1} << 20) || (s.moe && s.moe->n_experts > (int64_t{1} << 24)) ||
      s.n_mtp_layers < 0 || s.n_mtp_layers > 64) {
    return out_of_range("tensor manifest: too many layers or experts to list");
  }
  for (const auto& layer : s.layers) {
    if (layer.moe && !s.moe) return invalid_argument("tensor manifest: an MoE layer without MoE settings");
  }
  if ((s.attention == AttentionKind::kMla) != s.mla.has_value()) {
    return invalid_argument("tensor manifest: MLA attention without MLA sizes");
  }
  const int64_t estimate = estimated_tensor_count(s);
  if (estimate > kMaxTensors) {
    return resource_exhausted(
        fmt::format("tensor manifest: the config implies about {} tensors, more than the "
                    "{} we list; its layer or expert counts are implausible",
                    estimate, kMaxTensors));
  }
  TensorManifest manifest;
  WeightTableBuilder b(s, manifest);
  family_info(s.family).weights(s, b);
  if (b.failed()) return out_of_range(b.error());
  return manifest;
}

}  // namespace day0
