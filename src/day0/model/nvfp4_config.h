#pragma once
// The quantization_config of an NVFP4 checkpoint, in either layout that ships them (model_spec.h,
// Nvfp4Layout), parsed into spec.weights.nvfp4 and written back; and which modules it quantizes.
//
// NVIDIA ModelOpt (config.json's quantization_config, or hf_quant_config.json's "quantization" object,
// which load_model_config reads when config.json has none):
//   {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
//    "exclude_modules": ["lm_head", "model.layers.*.mlp.gate"], "kv_cache_quant_algo": null}
// compressed-tensors' nvfp4 preset (NVFP4A16 leaves input_activations null):
//   {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
//    "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "float",
//      "strategy": "tensor_group", "group_size": 16, "symmetric": true, "dynamic": false},
//      "input_activations": {"num_bits": 4, "type": "float", "strategy": "tensor_group",
//      "group_size": 16, "dynamic": "local"}}}, "ignore": ["lm_head"]}
#include <string>

#include <nlohmann/json.hpp>

#include "day0/core/status.h"
#include "day0/model/config_reader.h"
#include "day0/model/model_spec.h"

namespace day0 {

// quant_method "modelopt": anything but quant_algo NVFP4 with group_size 16 and an unquantized KV cache
// is kUnsupported naming the key, what Day0 expects and what the file holds.
Status parse_modelopt_quantization(const ConfigReader& quant, ModelSpec& spec);
// quant_method "compressed-tensors" with format "nvfp4-pack-quantized".
Status parse_compressed_tensors_nvfp4(const ConfigReader& quant, ModelSpec& spec);
// The quantization_config object for `nvfp4` (layout not kNone) in its own layout.
nlohmann::json nvfp4_quantization_config(const Nvfp4Spec& nvfp4);

// True when `module` (a Linear's tensor name without ".weight") is stored NVFP4.
bool nvfp4_module(const Nvfp4Spec& nvfp4, const std::string& module);

// ModelOpt's exclude_modules entries are shell globs over module names ('*' any run, '?' one character)
// matching a whole module name or a module that contains it: the same entry as a "re:" pattern for
// matches_module_pattern.
std::string glob_to_module_pattern(const std::string& glob);

// The stored tensor names of an NVFP4 projection whose module is `stem`.
struct Nvfp4TensorNames {
  std::string values;        // U8 [out, in/2]
  std::string scales;        // F8_E4M3 [out, in/16]
  std::string global_scale;  // F32 scalar
  std::string input_scale;   // F32 scalar (activation_scales only)
};
Nvfp4TensorNames nvfp4_tensor_names(Nvfp4Layout layout, const std::string& stem);

}  // namespace day0
