#include "day0/dist/expert_load.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "day0/core/atomic_file.h"
#include "day0/core/json_reader.h"

namespace day0::dist {
namespace {

constexpr const char* kFormat = "day0-expert-load";
constexpr int kVersion = 1;
// A load file holds one count per expert per layer: 64 MiB is far above any model's (61 layers x 384
// experts is about 0.2 MB) and bounds what a hostile file can make us allocate.
constexpr JsonLimits kExpertLoadLimits{size_t{64} << 20, 8};

Status bad(const std::string& path, const std::string& key, const std::string& expected,
           const std::string& found) {
  return invalid_argument(
      fmt::format("expert load {}: {}: expected {}, found {}", path, key, expected, found));
}

}  // namespace

Result<ExpertLoad> read_expert_load(const std::string& path) {
  D0_ASSIGN_OR_RETURN(std::string text, read_bounded_file(path, kExpertLoadLimits.max_bytes));
  return parse_expert_load(text, path);
}

Result<ExpertLoad> parse_expert_load(std::string_view text, const std::string& path) {
  D0_ASSIGN_OR_RETURN(nlohmann::json j, parse_json_text(text, path, kExpertLoadLimits));
  if (!j.is_object()) return bad(path, "(top level)", "an object", json_excerpt(j));
  if (!j.contains("format") || j["format"] != kFormat)
    return bad(path, "format", fmt::format("\"{}\"", kFormat),
               j.contains("format") ? json_excerpt(j["format"]) : "nothing");
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"].get<int64_t>() != kVersion)
    return bad(path, "version", std::to_string(kVersion),
               j.contains("version") ? json_excerpt(j["version"]) : "nothing");
  ExpertLoad out;
  if (!j.contains("n_experts") || !j["n_experts"].is_number_integer() || j["n_experts"].get<int64_t>() < 1)
    return bad(path, "n_experts", "a positive integer",
               j.contains("n_experts") ? json_excerpt(j["n_experts"]) : "nothing");
  out.n_experts = j["n_experts"].get<int64_t>();
  if (!j.contains("layers") || !j["layers"].is_array())
    return bad(path, "layers", "an array", j.contains("layers") ? json_excerpt(j["layers"]) : "nothing");
  const nlohmann::json& layers = j["layers"];
  for (size_t i = 0; i < layers.size(); ++i) {
    const nlohmann::json& l = layers[i];
    const std::string at = fmt::format("layers[{}]", i);
    if (!l.is_object()) return bad(path, at, "an object", json_excerpt(l));
    if (!l.contains("layer") || !l["layer"].is_number_integer() || l["layer"].get<int64_t>() < 0)
      return bad(path, at + ".layer", "a layer index",
                 l.contains("layer") ? json_excerpt(l["layer"]) : "nothing");
    const int64_t layer = l["layer"].get<int64_t>();
    if (out.layers.contains(layer))
      return bad(path, at + ".layer", "each layer once", fmt::format("{} again", layer));
    if (!l.contains("picks") || !l["picks"].is_array())
      return bad(path, at + ".picks", "an array", l.contains("picks") ? json_excerpt(l["picks"]) : "nothing");
    const nlohmann::json& picks = l["picks"];
    if (static_cast<int64_t>(picks.size()) != out.n_experts) {
      return bad(path, at + ".picks", fmt::format("{} counts (n_experts)", out.n_experts),
                 std::to_string(picks.size()));
    }
    std::vector<int64_t>& counts = out.layers[layer];
    for (size_t e = 0; e < picks.size(); ++e) {
      if (!picks[e].is_number_integer() || picks[e].get<int64_t>() < 0)
        return bad(path, fmt::format("{}.picks[{}]", at, e), "a count (integer >= 0)",
                   json_excerpt(picks[e]));
      counts.push_back(picks[e].get<int64_t>());
    }
  }
  return out;
}

Status check_expert_load(const ExpertLoad& load, const std::string& path, int64_t n_experts,
                         std::span<const int64_t> moe_layers) {
  if (load.n_experts != n_experts)
    return bad(path, "n_experts", fmt::format("{} (the model's routed experts)", n_experts),
               std::to_string(load.n_experts));
  for (int64_t l : moe_layers) {
    if (!load.layers.contains(l))
      return bad(path, "layers", fmt::format("an entry for MoE layer {}", l), "none");
  }
  for (const auto& [l, picks] : load.layers) {
    if (std::find(moe_layers.begin(), moe_layers.end(), l) == moe_layers.end())
      return bad(path, "layers", "only the model's MoE layers", fmt::format("layer {}", l));
  }
  return Status::ok();
}

std::string expert_load_json(const ExpertLoad& load, const std::string& model) {
  // One line per layer: a model of 61 layers x 384 experts stays readable and diffable.
  std::string out =
      fmt::format("{{\"format\": \"{}\", \"version\": {}, \"model\": {}, \"n_experts\": {},\n \"layers\": [",
                  kFormat, kVersion, nlohmann::json(model).dump(), load.n_experts);
  bool first = true;
  for (const auto& [l, picks] : load.layers) {
    out +=
        fmt::format("{}\n  {{\"layer\": {}, \"picks\": [{}]}}", first ? "" : ",", l, fmt::join(picks, ", "));
    first = false;
  }
  return out + "]}\n";
}

Status write_expert_load(const std::string& path, const ExpertLoad& load, const std::string& model) {
  return write_file_atomic(path, expert_load_json(load, model));  // never half-written
}

std::shared_ptr<const ExpertPlacement> place_model_experts(int64_t n_experts, int ep, int64_t redundant,
                                                           int64_t n_layers,
                                                           std::span<const int64_t> moe_layers,
                                                           const ExpertLoad* load) {
  auto out = std::make_shared<ExpertPlacement>();
  out->redundant = redundant;
  out->layers.resize(static_cast<size_t>(n_layers));
  for (int64_t l : moe_layers) {
    std::vector<double> weights;
    if (load != nullptr) {
      const std::vector<int64_t>& picks = load->layers.at(l);
      weights.assign(picks.begin(), picks.end());
    }
    out->layers[static_cast<size_t>(l)] = place_layer_experts(n_experts, ep, redundant, weights);
  }
  return out;
}

}  // namespace day0::dist
