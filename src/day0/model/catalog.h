#pragma once
// Built-in catalog of well-known releases, so `day0 inspect deepseek-v3` works offline. Each entry is
// a data file, data/catalog/<name>.json (its README says what it holds), embedded in the library at
// build time; its config goes through the same parser as a config.json, and tests check that every
// entry parses to exactly the ModelSpec of the release config it was taken from.
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "day0/core/status.h"
#include "day0/model/config_parser.h"
#include "day0/model/model_spec.h"

namespace day0 {

struct CatalogEntry {
  std::string name;         // "deepseek-v3"
  std::string description;  // one line for listings
  // The release config this entry transcribes, as a path in the folder of release configs the tests read
  // (DAY0_SHARED_DIR/configs, e.g. "deepseek-v3/config.json"); empty when that folder has none
  // (deepseek-v2-lite: formed from the release's values).
  std::string source;
  nlohmann::json config;  // the entry as a Hugging Face config.json
};

// The embedded entries in the order of data/catalog/entries.txt, parsed on first use; an embedded file
// that does not parse is an InternalError naming it.
const std::vector<CatalogEntry>& model_catalog();
const CatalogEntry* find_catalog_entry(std::string_view name);
// Parses a catalog entry; unknown names give kNotFound listing the catalog and the nearest name.
Result<ModelSpec> catalog_model(std::string_view name, ConfigAudit* audit = nullptr, bool strict = false);
std::string catalog_names_text();  // "deepseek-v3, deepseek-r1, ..."

// MODEL as the CLI takes it: a folder holding config.json, a config.json path, or a catalog name.
struct ResolvedModel {
  ModelSpec spec;
  std::string source;            // the config path, or "catalog:<name>"
  std::filesystem::path folder;  // the checkpoint folder ("" for catalog entries)
  bool from_catalog = false;
  ConfigAudit config_audit;  // keys of the config Day0 does not account for
};
// `strict_config`: an unknown config key is an error (--strict-config).
Result<ResolvedModel> resolve_model(const std::string& arg, bool strict_config = false);

}  // namespace day0
