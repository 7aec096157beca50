#include "day0/model/family_registry.h"

#include <fmt/format.h>
#include <algorithm>
#include <cctype>

#include "day0/core/error.h"
#include "day0/model/config_parser.h"
#include "day0/model/config_writer.h"

namespace day0 {

namespace {

std::vector<FamilyInfo>& registry_storage() {
  static std::vector<FamilyInfo> registry;  // constructed on first use, before any registrar adds to it
  return registry;
}

}  // namespace

FamilyRegistrar::FamilyRegistrar(FamilyInfo info) {
  D0_CHECK_MSG(
      !info.model_types.empty() && !info.architectures.empty() && info.parse && info.write && info.weights,
      "a family registers a model_type, an architecture, a parser, a writer and a weight table");
  std::vector<FamilyInfo>& registry = registry_storage();
  for (const FamilyInfo& other : registry) {
    D0_CHECK_MSG(other.name() != info.name(), "family " + info.name() + " registered twice");
  }
  const auto at = std::find_if(registry.begin(), registry.end(),
                               [&](const FamilyInfo& other) { return info.name() < other.name(); });
  registry.insert(at, std::move(info));
}

const std::vector<FamilyInfo>& family_registry() {
  return registry_storage();
}

const FamilyInfo& family_info(std::string_view name) {
  for (const auto& info : family_registry()) {
    if (info.name() == name) return info;
  }
  D0_CHECK_MSG(false, fmt::format("family \"{}\" missing from the registry", name));
  return family_registry().front();
}

std::string supported_families_text() {
  std::string out;
  for (const auto& info : family_registry()) {
    if (!out.empty()) out += ", ";
    out += info.name();
  }
  return out;
}

std::string supported_families_markdown() {
  const auto code_list = [](const std::vector<std::string>& names) {
    std::string out;
    for (const auto& name : names) out += (out.empty() ? "`" : ", `") + name + "`";
    return out;
  };
  std::string out = "| family | architectures | model_type | what it is |\n|---|---|---|---|\n";
  for (const auto& info : family_registry()) {
    std::vector<std::string> architectures = info.architectures;
    architectures.insert(architectures.end(), info.wrapper_architectures.begin(),
                         info.wrapper_architectures.end());
    architectures.insert(architectures.end(), info.loaded_as_architectures.begin(),
                         info.loaded_as_architectures.end());
    out += fmt::format("| {} | {} | {} | {} |\n", info.name(), code_list(architectures),
                       code_list(info.model_types), info.summary);
  }
  return out;
}

nlohmann::json supported_families_json() {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& info : family_registry()) {
    out.push_back({{"family", info.name()},
                   {"architectures", info.architectures},
                   {"wrapper_architectures", info.wrapper_architectures},
                   {"loaded_as_architectures", info.loaded_as_architectures},
                   {"model_types", info.model_types},
                   {"summary", info.summary}});
  }
  return out;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      const bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                        std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

namespace {

// The family that reads this config best. Each family's parser runs on it under the family's own names;
// a family is the further away the more of the config's keys it leaves unread and the more keys of its
// own structure (what its writer emits) the config lacks. Names mislead (a shared suffix says nothing of
// structure); the keys a parser reads and writes are the family's structure.
std::string nearest_by_structure(const nlohmann::json& config) {
  const FamilyInfo* best = nullptr;
  size_t best_distance = SIZE_MAX;
  std::vector<std::string> best_unread;
  for (const auto& info : family_registry()) {
    nlohmann::json as_family = config;
    as_family["architectures"] = {info.architectures.front()};
    as_family["model_type"] = info.name();
    ConfigAudit audit;
    auto spec = parse_model_config(as_family, "config.json", &audit);
    if (!spec.is_ok()) continue;
    // A family whose class defaults every key (Nemotron-H) parses any config: one that reads none of the
    // config's own keys is no neighbour.
    size_t own_keys = 0;
    for (const auto& [key, value] : config.items())
      own_keys += key == "architectures" || key == "model_type" ? 0 : 1;
    if (audit.unknown_keys.size() >= own_keys) continue;
    size_t lacking = 0;
    const nlohmann::json written = to_hf_config(*spec);
    for (const auto& [key, value] : written.items()) lacking += config.contains(key) ? 0 : 1;
    const size_t distance = audit.unknown_keys.size() + lacking;
    // On a tie the family that owns its architecture wins over one built as another's (exaone as Llama).
    const bool owner_beats_variant =
        best != nullptr && !best->loaded_as_architectures.empty() && info.loaded_as_architectures.empty();
    if (distance < best_distance || (distance == best_distance && owner_beats_variant)) {
      best = &info;
      best_distance = distance;
      best_unread = std::move(audit.unknown_keys);
    }
  }
  if (best == nullptr) return "no supported family's parser reads this config";
  std::string out =
      fmt::format("nearest known by structure: {} (family {}", best->architectures.front(), best->name());
  if (best_unread.empty()) return out + " reads every key of this config)";
  out += fmt::format(" reads all but {} of its keys:", best_unread.size());
  for (size_t i = 0; i < best_unread.size() && i < 6; ++i) out += (i ? ", " : " ") + best_unread[i];
  return out + (best_unread.size() > 6 ? ", ...)" : ")");
}

Status unknown(const ConfigReader& cfg, std::string_view what, std::string_view name) {
  return unsupported(fmt::format("{}: {} \"{}\" is not supported; supported families: {}; {}", cfg.source(),
                                 what, name, supported_families_text(), nearest_by_structure(cfg.json())));
}

// An architecture Day0 knows under a model_type that is not its family's: transformers' AutoModel builds
// the model_type's own class (another module tree, other tensor names), so reading the checkpoint as the
// architecture's family would stop at a missing tensor or, worse, run the wrong math.
Status foreign_model_type(const ConfigReader& cfg, const FamilyInfo& family, const std::string& architecture,
                          const std::string& model_type) {
  std::string reads;
  for (const auto& type : family.model_types) reads += (reads.empty() ? "" : ", ") + type;
  return unsupported(
      fmt::format("{}: model_type \"{}\" with architecture \"{}\": transformers builds \"{}\" with its own "
                  "modules and tensor names, and Day0 reads {} checkpoints only as model_type {}",
                  cfg.source(), model_type, architecture, model_type, architecture, reads));
}

}  // namespace

namespace {

bool lists(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Does any family name this architecture as its own (or as an image-text wrapper's)?
bool known_architecture(const std::string& architecture) {
  for (const auto& info : family_registry()) {
    if (lists(info.architectures, architecture) || lists(info.wrapper_architectures, architecture))
      return true;
  }
  return false;
}

// A family that transformers builds as another family's class (loaded_as_architectures): decided by the
// model_type, as AutoModelForCausalLM decides, when the architecture is that class, the family's own or
// a remote-code class no family knows.
const FamilyInfo* model_type_family(const std::string& model_type, const std::string& architecture) {
  if (model_type.empty()) return nullptr;
  for (const auto& info : family_registry()) {
    if (info.loaded_as_architectures.empty() || !lists(info.model_types, model_type)) continue;
    if (architecture.empty() || lists(info.architectures, architecture) ||
        lists(info.loaded_as_architectures, architecture) || !known_architecture(architecture)) {
      return &info;
    }
  }
  return nullptr;
}

}  // namespace

Result<const FamilyInfo*> detect_family(const ConfigReader& cfg) {
  D0_ASSIGN_OR_RETURN(std::vector<std::string> architectures, cfg.optional_string_list("architectures"));
  D0_ASSIGN_OR_RETURN(std::string model_type, cfg.optional_string("model_type", ""));
  if (const FamilyInfo* info =
          model_type_family(model_type, architectures.empty() ? "" : architectures.front())) {
    return info;
  }
  if (!architectures.empty()) {
    for (const auto& info : family_registry()) {
      for (const auto* names : {&info.architectures, &info.wrapper_architectures}) {
        for (const auto& arch : *names) {
          if (arch != architectures.front()) continue;
          const auto& types = info.model_types;
          if (!model_type.empty() && std::find(types.begin(), types.end(), model_type) == types.end()) {
            return foreign_model_type(cfg, info, arch, model_type);
          }
          return &info;
        }
      }
    }
    return unknown(cfg, "architecture", architectures.front());
  }
  if (model_type.empty()) {
    return invalid_argument(
        fmt::format("{}: architectures / model_type: expected the model's architecture "
                    "(e.g. \"LlamaForCausalLM\") or model_type, found neither",
                    cfg.source()));
  }
  for (const auto& info : family_registry()) {
    for (const auto& type : info.model_types) {
      if (type == model_type) return &info;
    }
  }
  return unknown(cfg, "model_type", model_type);
}

}  // namespace day0
