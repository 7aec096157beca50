#pragma once
// The `quantization_config` of a compressed-tensors checkpoint (quant_method "compressed-tensors",
// format "pack-quantized": int4 / int8 weight-only, per group or per channel), parsed into
// spec.weights.packed and written back; and which modules it packs.
//
//   "quantization_config": {
//     "quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
//     "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": null,
//        "output_activations": null, "weights": {"num_bits": 4, "type": "int", "symmetric": true,
//        "strategy": "group", "group_size": 32, "dynamic": false, "actorder": null, ...}}},
//     "ignore": ["lm_head", "re:.*mlp.gate$"], "kv_cache_scheme": null}
#include <string>

#include <nlohmann/json.hpp>

#include "day0/core/status.h"
#include "day0/model/config_reader.h"
#include "day0/model/model_spec.h"

namespace day0 {

// Parses `quant` (the quantization_config object, quant_method already "compressed-tensors") into
// spec.weights.packed. Anything but weight-only integer pack-quantized (activation quantization,
// float formats, act-order, several groups with different schemes) is kUnsupported naming the key.
Status parse_compressed_tensors(const ConfigReader& quant, ModelSpec& spec);

// GPTQ (quant_method "gptq": bits 4 or 8, group_size (-1 = per channel), sym, desc_act,
// checkpoint_format "gptq" with its z - 1 zero points or "gptq_v2") and AWQ (quant_method "awq",
// version "gemm", zero_point true, modules_to_not_convert) configs into spec.weights.packed.
Status parse_gptq(const ConfigReader& quant, ModelSpec& spec);
Status parse_awq(const ConfigReader& quant, ModelSpec& spec);

// The compressed-tensors quantization_config object for `packed` (bits != 0).
nlohmann::json compressed_tensors_config(const PackedIntSpec& packed);
// The quantization_config of `packed` in its own layout (compressed-tensors, GPTQ or AWQ).
nlohmann::json packed_int_quantization_config(const PackedIntSpec& packed);

// True when `module` (a tensor name without ".weight", e.g. "model.layers.0.self_attn.q_proj") is
// packed: a Linear projection (`is_linear`) selected by a target ("Linear" or a "re:" pattern matched
// from the start of the name) and not ignored (exact name or "re:" pattern).
// A head group (PackedIntSpec::head_target) packs the LM head; a "Linear" target alone never does (the
// head is kept, as llm-compressor's default ignore list keeps it).
bool packs_module(const PackedIntSpec& packed, const std::string& module, bool is_linear);
// The width `module` is packed at: head_bits for the head group's module, `bits` otherwise.
int packed_bits_of(const PackedIntSpec& packed, const std::string& module);

// A module name against an exact name or "re:<regex>" (PCRE2, matched from the start of the name).
bool matches_module_pattern(const std::string& pattern, const std::string& module);
// kInvalidArgument when a "re:" pattern does not compile (or is unreasonably long).
Status validate_module_pattern(const std::string& pattern);

// "int4 g32 sym" / "int8 channel asym" / "int4 g128 asym (GPTQ)".
std::string packed_int_label(const PackedIntSpec& packed);

}  // namespace day0
