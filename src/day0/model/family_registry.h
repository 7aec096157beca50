#pragma once
// Family registry: Hugging Face `architectures` / `model_type` strings -> the family's parser and
// writer and weight table. Adding a family: see docs/HOWTO-add-a-model.md.
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "day0/core/status.h"
#include "day0/model/config_reader.h"
#include "day0/model/model_spec.h"
#include "day0/model/weight_table.h"

namespace day0 {

struct FamilyInfo {
  Family family;
  std::vector<std::string> model_types;    // first = the one we write
  std::vector<std::string> architectures;  // first = the one we write
  Status (*parse)(const ConfigReader& cfg, ModelSpec& spec);
  void (*write)(const ModelSpec& spec, nlohmann::json& out);
  WeightTableFn weights;  // every tensor of a checkpoint (weight_table.h)
};

const std::vector<FamilyInfo>& family_registry();
const FamilyInfo& family_info(Family family);
// Comma-separated supported family names, for error messages and --help.
std::string supported_families_text();
// Finds the family of a config from architectures[0] (preferred) or model_type. Unknown names give
// kUnsupported naming the string, listing the supported families and the nearest known name.
Result<const FamilyInfo*> detect_family(const ConfigReader& cfg);
// Levenshtein distance, case-insensitive.
size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace day0
