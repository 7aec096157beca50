#include "day0/model/catalog.h"

#include <fmt/format.h>

#include "day0/core/error.h"
#include "day0/core/json_reader.h"
#include "day0/io/gguf_convert.h"
#include "day0/model/config_parser.h"
#include "day0/model/family_registry.h"

namespace day0 {

namespace {

struct EmbeddedCatalogFile {
  const char* path;  // "data/catalog/deepseek-v3.json"
  const char* text;
};

// Written by src/day0/CMakeLists.txt from data/catalog/entries.txt and the files it names.
constexpr EmbeddedCatalogFile kEmbeddedCatalog[] = {
#include "day0/model/catalog_entries.inc"
};

// The files are our own data, checked by the tests: anything malformed is a bug, not bad input.
CatalogEntry parse_catalog_file(const EmbeddedCatalogFile& file) {
  const std::string path = file.path;
  auto parsed = parse_json_text(file.text, path);
  D0_CHECK_MSG(parsed.is_ok(), parsed.status().to_string());
  const nlohmann::json& doc = *parsed;
  D0_CHECK_MSG(doc.is_object(), path + ": not a JSON object");
  for (const auto& [key, value] : doc.items()) {
    const bool text_key = key == "name" || key == "description" || key == "source" || key == "note";
    D0_CHECK_MSG(text_key ? value.is_string() : key == "config" && value.is_object(),
                 fmt::format("{}: \"{}\" is not a key of a catalog file, or not of its type", path, key));
  }
  for (const char* key : {"name", "description", "source", "config"}) {
    D0_CHECK_MSG(doc.contains(key), fmt::format("{}: no \"{}\"", path, key));
  }
  // "note" is for people reading the file (data/catalog/README.md): not kept.
  CatalogEntry entry{doc["name"].get<std::string>(), doc["description"].get<std::string>(),
                     doc["source"].get<std::string>(), doc["config"]};
  D0_CHECK_MSG(path == "data/catalog/" + entry.name + ".json",
               fmt::format("{}: its name is \"{}\"", path, entry.name));
  return entry;
}

}  // namespace

const std::vector<CatalogEntry>& model_catalog() {
  static const std::vector<CatalogEntry> kCatalog = [] {
    std::vector<CatalogEntry> out;
    for (const auto& file : kEmbeddedCatalog) {
      out.push_back(parse_catalog_file(file));
      for (size_t i = 0; i + 1 < out.size(); ++i) {
        D0_CHECK_MSG(out[i].name != out.back().name,
                     fmt::format("data/catalog/entries.txt: \"{}\" is listed twice", out.back().name));
      }
    }
    return out;
  }();
  return kCatalog;
}

const CatalogEntry* find_catalog_entry(std::string_view name) {
  for (const auto& entry : model_catalog()) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

std::string catalog_names_text() {
  std::string out;
  for (const auto& entry : model_catalog()) {
    if (!out.empty()) out += ", ";
    out += entry.name;
  }
  return out;
}

namespace {

std::string nearest_catalog_name(std::string_view name) {
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const auto& entry : model_catalog()) {
    const size_t d = edit_distance(name, entry.name);
    if (d < best_distance) {
      best_distance = d;
      best = entry.name;
    }
  }
  return best;
}

}  // namespace

Result<ModelSpec> catalog_model(std::string_view name, ConfigAudit* audit, bool strict) {
  const CatalogEntry* entry = find_catalog_entry(name);
  if (entry == nullptr) {
    return not_found(fmt::format("\"{}\" is not in the built-in catalog (nearest: {}; catalog: {})", name,
                                 nearest_catalog_name(name), catalog_names_text()));
  }
  return parse_model_config(entry->config, "catalog:" + entry->name, audit, strict);
}

Result<ResolvedModel> resolve_model(const std::string& arg, bool strict_config) {
  namespace fs = std::filesystem;
  ResolvedModel out;
  std::error_code ec;
  // A .gguf file stands for the Hugging Face folder it converts to (cached; see io/gguf_convert.h).
  std::string folder_arg = arg;
  if (gguf::is_gguf_file(arg)) {
    D0_ASSIGN_OR_RETURN(folder_arg, gguf::gguf_cached_hf_folder(arg));
  }
  const fs::path path(folder_arg);
  if (fs::exists(path, ec)) {
    fs::path config = path;
    if (fs::is_directory(path, ec)) {
      config = path / "config.json";
      if (!fs::exists(config, ec)) {
        return not_found(fmt::format("{}: the folder has no config.json", path.string()));
      }
      out.folder = path;
    } else {
      out.folder = path.parent_path();
    }
    D0_ASSIGN_OR_RETURN(out.spec, load_model_config(config, &out.config_audit, strict_config));
    out.source = config.string();
    return out;
  }
  if (find_catalog_entry(arg) != nullptr) {
    D0_ASSIGN_OR_RETURN(out.spec, catalog_model(arg, &out.config_audit, strict_config));
    out.source = "catalog:" + arg;
    out.from_catalog = true;
    return out;
  }
  return not_found(
      fmt::format("{}: no such file or folder, and not a catalog model (nearest: {}; catalog: {})", arg,
                  nearest_catalog_name(arg), catalog_names_text()));
}

}  // namespace day0
