#pragma once
// ModelSpec -> Hugging Face config.json. parse_model_config(to_hf_config(spec)) == spec, and the
// output carries the model_type / architectures / keys transformers needs to build the model
// (including quantization_config for FP8 block and MXFP4 checkpoints). Kimi K2's model_type
// "kimi_k2" is kept as is; transformers loads it only with the release's remote code.
#include <nlohmann/json.hpp>

#include "day0/model/model_spec.h"

namespace day0 {

nlohmann::json to_hf_config(const ModelSpec& spec);

}  // namespace day0
