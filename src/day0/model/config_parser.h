#pragma once
// Hugging Face config.json -> validated ModelSpec, with every default transformers derives made
// explicit. Errors name the file, the key path and what was expected versus found.
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "day0/core/status.h"
#include "day0/model/model_spec.h"

namespace day0 {

// What parsing found beyond the spec: keys that neither the family reads nor are known to be
// irrelevant to inference. Each may change the math; `inspect`, `coverage` and `adapt` report them
// and --strict-config makes them an error.
struct ConfigAudit {
  std::vector<std::string> unknown_keys;  // key paths, e.g. "rope_parameters.mrope_section"
};

// `source` names the config in error messages (usually its path). With `audit`, unknown keys are
// listed there; with `strict`, any unknown key is a kUnsupported error naming it.
Result<ModelSpec> parse_model_config(const nlohmann::json& config, const std::string& source,
                                     ConfigAudit* audit = nullptr, bool strict = false);
Result<ModelSpec> parse_model_config_text(std::string_view text, const std::string& source,
                                          ConfigAudit* audit = nullptr, bool strict = false);
// Reads and parses a config.json file.
Result<ModelSpec> load_model_config(const std::filesystem::path& path, ConfigAudit* audit = nullptr,
                                    bool strict = false);
// "unknown field — may change the math" lines for a report, one per key.
std::string unknown_keys_text(const ConfigAudit& audit);

// Invariants every spec must satisfy (parsed ones always do; hand-built ones are checked here):
// layer count, MoE/MLA presence, and that the tensor manifest's sizes do not overflow.
Status validate_model_spec(const ModelSpec& spec);
// The softmax scale transformers uses: head_dim^-1/2, MLA (d_nope + d_rope)^-1/2 times the YaRN
// mscale(factor, mscale_all_dim)^2 correction.
double derive_attention_scale(const ModelSpec& spec);

}  // namespace day0
