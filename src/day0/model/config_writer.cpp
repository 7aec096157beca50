#include "day0/model/config_writer.h"

#include "day0/core/error.h"
#include "day0/model/config_common.h"
#include "day0/model/config_parser.h"
#include "day0/model/family_registry.h"

namespace day0 {

nlohmann::json to_hf_config(const ModelSpec& spec, const HfConfigOptions& options) {
  const Status valid = validate_model_spec(spec);
  D0_CHECK_MSG(valid.is_ok(), "to_hf_config on an invalid spec: " + valid.to_string());
  const FamilyInfo& info = family_info(spec.family);
  nlohmann::json text = nlohmann::json::object();
  write_core(spec, text);
  info.write(spec, text);
  if (options.native_model_type && !spec.multimodal_wrapper) text["model_type"] = info.model_types.front();
  if (!spec.multimodal_wrapper) return text;
  // An image-text wrapper: the text model nests under text_config; transformers builds a default vision
  // tower from an absent vision_config.
  nlohmann::json root = {{"architectures", text["architectures"]},
                         {"model_type", spec.model_type},
                         {"torch_dtype", text["torch_dtype"]},
                         {"tie_word_embeddings", spec.tie_word_embeddings}};
  if (text.contains("quantization_config")) {
    root["quantization_config"] = text["quantization_config"];
    text.erase("quantization_config");
  }
  text.erase("architectures");
  text["model_type"] = info.name();
  root["text_config"] = text;
  return root;
}

}  // namespace day0
