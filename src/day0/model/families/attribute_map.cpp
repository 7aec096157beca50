// Config keys saved under another name: transformers' attribute_map aliases (num_layers for
// num_hidden_layers, ...), which releases written by remote code use, read under the names the shared
// parsers expect.
#include <fmt/format.h>

#include "day0/model/families/families.h"

namespace day0::families {

Result<nlohmann::json> with_canonical_keys(
    const ConfigReader& cfg, std::initializer_list<std::pair<const char*, const char*>> aliases) {
  nlohmann::json merged = cfg.json();
  for (const auto& [alias, canonical] : aliases) {
    if (!cfg.contains(alias)) continue;
    cfg.mark_used(alias);
    const nlohmann::json& value = cfg.json().at(alias);
    if (cfg.contains(canonical) && cfg.json().at(canonical) != value) {
      return cfg.invalid(
          alias, fmt::format("{} disagrees with {} ({}); they name the same setting", describe_json(value),
                             canonical, describe_json(cfg.json().at(canonical))));
    }
    merged[canonical] = value;
    merged.erase(alias);
  }
  return merged;
}

}  // namespace day0::families
