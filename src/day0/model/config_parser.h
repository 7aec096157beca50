#pragma once
// Hugging Face config.json -> validated ModelSpec, with every default transformers derives made
// explicit. Errors name the file, the key path and what was expected versus found.
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "day0/core/status.h"
#include "day0/model/model_spec.h"

namespace day0 {

// `source` names the config in error messages (usually its path).
Result<ModelSpec> parse_model_config(const nlohmann::json& config, const std::string& source);
Result<ModelSpec> parse_model_config_text(std::string_view text, const std::string& source);
// Reads and parses a config.json file.
Result<ModelSpec> load_model_config(const std::filesystem::path& path);

// Invariants every spec must satisfy (parsed ones always do; hand-built ones are checked here):
// layer count, MoE/MLA presence, and that the tensor manifest's sizes do not overflow.
Status validate_model_spec(const ModelSpec& spec);
// The softmax scale transformers uses: head_dim^-1/2, MLA (d_nope + d_rope)^-1/2 times the YaRN
// mscale(factor, mscale_all_dim)^2 correction.
double derive_attention_scale(const ModelSpec& spec);

}  // namespace day0
