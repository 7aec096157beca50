#pragma once
// Family registry: Hugging Face `architectures` / `model_type` strings -> the family's parser, writer and
// weight table. Each family file registers itself with a FamilyRegistrar: adding a family is one new file
// under model/families/ (docs/HOWTO-add-a-model.md).
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "day0/core/status.h"
#include "day0/model/config_reader.h"
#include "day0/model/layer_recipe.h"
#include "day0/model/model_spec.h"
#include "day0/model/weight_table.h"

namespace day0 {

struct FamilyInfo {
  std::vector<std::string> model_types;    // first = the family's name, the one we write
  std::vector<std::string> architectures;  // first = the one we write
  // One line for `day0 inspect --families`: attention, FFN, what sets the family apart.
  std::string summary;
  // Image-text wrappers whose config nests this text model under text_config and whose tensors sit under
  // "language_model." (the text model runs; the vision tower is not part of the spec).
  std::vector<std::string> wrapper_architectures;
  // Another family's classes that transformers builds for this family's model_types (AutoModelForCausalLM
  // maps the model_type onto them and converts the release's tensor names on load; its save writes that
  // class into `architectures`). A config with one of `model_types` and one of these, one of
  // `architectures` or a remote-code class no family knows is this family.
  std::vector<std::string> loaded_as_architectures;
  bool mxfp4_experts = false;  // the family defines MXFP4 expert weights (quant_method mxfp4)
  Status (*parse)(const ConfigReader& cfg, ModelSpec& spec) = nullptr;
  void (*write)(const ModelSpec& spec, nlohmann::json& out) = nullptr;
  WeightTableFn weights = nullptr;  // every tensor of a checkpoint (weight_table.h)
  // The layer's forward steps when they are not the standard pre-norm decoder layer (layer_recipe.h).
  LayerRecipeFn layer_recipe = nullptr;

  const std::string& name() const { return model_types.front(); }
};

// A family file holds one of these at namespace scope: `const FamilyRegistrar kFamily({...});`.
class FamilyRegistrar {
 public:
  explicit FamilyRegistrar(FamilyInfo info);
};

// Every registered family, sorted by name (registration order depends on the link).
const std::vector<FamilyInfo>& family_registry();
// The family of that name (ModelSpec::family); D0_CHECKs that it exists.
const FamilyInfo& family_info(std::string_view name);
// Comma-separated supported family names, for error messages and --help.
std::string supported_families_text();
// The supported families as a Markdown table (family, architectures, model_type, summary): what
// `day0 inspect --families` prints and the README shows.
std::string supported_families_markdown();
// The same as JSON: [{"family", "architectures", "wrapper_architectures", "model_types", "summary"}].
nlohmann::json supported_families_json();
// Finds the family of a config from architectures[0] (preferred) or model_type. Unknown names give
// kUnsupported naming the string, listing the supported families and the nearest known name.
Result<const FamilyInfo*> detect_family(const ConfigReader& cfg);
// Levenshtein distance, case-insensitive.
size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace day0
