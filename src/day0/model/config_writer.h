#pragma once
// ModelSpec -> Hugging Face config.json. parse_model_config(to_hf_config(spec)) == spec, and the
// output carries the model_type / architectures / keys transformers needs to build the model
// (including quantization_config for FP8 block and MXFP4 checkpoints). A model_type a family accepts
// beside its own (FamilyInfo::model_types after the first) is kept as is, though transformers may load
// it only with the release's remote code.
#include <nlohmann/json.hpp>

#include "day0/model/model_spec.h"

namespace day0 {

struct HfConfigOptions {
  // Write the model_type transformers knows natively for the family (an accepted alias becomes the
  // family's own, its first model_type) so AutoConfig loads the file without remote code. Parsing it back
  // then gives a spec that differs only in model_type.
  bool native_model_type = false;
};

nlohmann::json to_hf_config(const ModelSpec& spec, const HfConfigOptions& options = {});

}  // namespace day0
