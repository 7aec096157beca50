// Layer kinds of compressed-KV attention and hash-routed MoE (families.h), in transformers' spelling:
// layer_types "sliding_attention" / "compressed_sparse_attention" / "heavily_compressed_attention" with
// compress_rates per kind, and mlp_layer_types "hash_moe" / "moe".
#include <fmt/format.h>

#include <map>

#include "day0/model/families/families.h"

namespace day0::families {

namespace {

constexpr const char* kSliding = "sliding_attention";
constexpr const char* kSparse = "compressed_sparse_attention";
constexpr const char* kHeavy = "heavily_compressed_attention";

}  // namespace

Status parse_compressed_kv_layer_types(const ConfigReader& cfg, ModelSpec& spec) {
  std::map<std::string, int64_t> rates = {{kSparse, 4}, {kHeavy, 128}};
  D0_ASSIGN_OR_RETURN(std::optional<ConfigReader> given, cfg.optional_object("compress_rates"));
  for (const char* type : {kSparse, kHeavy}) {
    if (given) {
      D0_ASSIGN_OR_RETURN(rates[type], given->optional_int(type, rates[type], 1));
    }
  }
  D0_ASSIGN_OR_RETURN(rates[kSparse], cfg.optional_int("compress_rate_csa", rates[kSparse], 1));
  D0_ASSIGN_OR_RETURN(rates[kHeavy], cfg.optional_int("compress_rate_hca", rates[kHeavy], 1));
  D0_ASSIGN_OR_RETURN(std::vector<std::string> types, cfg.optional_string_list("layer_types"));
  D0_ASSIGN_OR_RETURN(std::vector<int64_t> ratios, cfg.optional_int_list("compress_ratios"));
  const auto n = static_cast<size_t>(spec.n_layers);
  if (types.empty() && !ratios.empty()) {
    for (size_t i = 0; i < ratios.size(); ++i) {
      if (ratios[i] != 0 && ratios[i] != 4 && ratios[i] != 128)
        return cfg.mismatch(fmt::format("compress_ratios[{}]", i), "0, 4 or 128");
      types.emplace_back(ratios[i] == 0 ? kSliding : ratios[i] == 4 ? kSparse : kHeavy);
    }
  }
  if (types.empty()) {
    for (size_t i = 0; i < n; ++i) types.emplace_back(i < 2 ? kHeavy : (i % 2 == 1 ? kSparse : kHeavy));
  }
  if (types.size() < n) {
    return cfg.invalid("layer_types",
                       fmt::format("expected {} entries (num_hidden_layers), found {}", n, types.size()));
  }
  D0_ASSIGN_OR_RETURN(int64_t window, cfg.optional_int("sliding_window", 128, 1));
  for (size_t i = 0; i < n; ++i) {
    if (types[i] != kSliding && types[i] != kSparse && types[i] != kHeavy)
      return cfg.mismatch(fmt::format("layer_types[{}]", i),
                          fmt::format("\"{}\", \"{}\" or \"{}\"", kSliding, kSparse, kHeavy));
    LayerSpec& l = spec.layers[i];
    l.mask = AttentionMask::kSliding;  // every layer keeps its window of raw keys
    l.window = window;
    l.compressed_sparse = types[i] == kSparse;
    l.kv_compress_ratio = types[i] == kSliding ? 0 : rates[types[i]];
  }
  spec.sliding_window = window;
  return Status::ok();
}

Status parse_hash_moe_layer_types(const ConfigReader& cfg, ModelSpec& spec) {
  D0_ASSIGN_OR_RETURN(std::vector<std::string> types, cfg.optional_string_list("mlp_layer_types"));
  D0_ASSIGN_OR_RETURN(int64_t n_hash, cfg.optional_int("num_hash_layers", 3, 0, kMaxLayers));
  const auto n = static_cast<size_t>(spec.n_layers);
  if (types.empty()) {
    for (size_t i = 0; i < n; ++i) types.emplace_back(static_cast<int64_t>(i) < n_hash ? "hash_moe" : "moe");
  }
  if (types.size() < n) {
    return cfg.invalid("mlp_layer_types",
                       fmt::format("expected {} entries (num_hidden_layers), found {}", n, types.size()));
  }
  for (size_t i = 0; i < n; ++i) {
    if (types[i] != "hash_moe" && types[i] != "moe")
      return cfg.mismatch(fmt::format("mlp_layer_types[{}]", i), "\"hash_moe\" or \"moe\"");
    spec.layers[i].moe = true;
    spec.layers[i].dense_intermediate = 0;
    spec.layers[i].hash_routed = types[i] == "hash_moe";
  }
  return Status::ok();
}

void write_compressed_kv_layer_types(const ModelSpec& spec, nlohmann::json& out) {
  nlohmann::json attn = nlohmann::json::array(), mlp = nlohmann::json::array();
  nlohmann::json rates = {{kSparse, 4}, {kHeavy, 128}};
  for (const LayerSpec& l : spec.layers) {
    const char* type = l.kv_compress_ratio == 0 ? kSliding : l.compressed_sparse ? kSparse : kHeavy;
    attn.push_back(type);
    if (l.kv_compress_ratio > 0) rates[type] = l.kv_compress_ratio;
    mlp.push_back(l.hash_routed ? "hash_moe" : "moe");
  }
  out["layer_types"] = attn;
  out["mlp_layer_types"] = mlp;
  out["compress_rates"] = rates;
  out["sliding_window"] = spec.sliding_window;
}

}  // namespace day0::families
