#pragma once
// Config pieces every family shares: the core transformer sizes, RoPE scaling, quantization_config,
// layer_types, and their inverse for writing a config back. Family files (families/*.cpp) combine them.
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "day0/core/status.h"
#include "day0/model/config_reader.h"
#include "day0/model/model_spec.h"

namespace day0 {

// Class defaults of the transformers config class of a family, used when a key is absent.
struct FamilyDefaults {
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  int64_t max_position_embeddings = 2048;
  int64_t head_dim = 0;                // 0: hidden_size / num_attention_heads
  double partial_rotary_factor = 1.0;  // top level (v4) or inside rope_parameters (v5)
  bool require_intermediate = true;
  // The family's modeling code applies attention_dropout in training only (checked there), and its
  // releases ship a non-zero rate: any rate in [0, 1) is then accepted and has no effect.
  bool training_only_attention_dropout = false;
};

inline constexpr int64_t kMaxLayers = 1 << 16;
inline constexpr int64_t kMaxExperts = 1 << 20;

// vocab_size, hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim,
// intermediate_size, max_position_embeddings, rms_norm_eps, rope_theta + rope_scaling,
// tie_word_embeddings, torch_dtype, quantization_config. Layers start as causal dense layers.
Status parse_core(const ConfigReader& cfg, const FamilyDefaults& defaults, ModelSpec& spec);
// attention_bias (default false): biases on q, k, v and o together, as most transformers classes read it.
Status parse_attention_bias(const ConfigReader& cfg, ModelSpec& spec);
// rope_scaling (legacy) or rope_parameters (transformers v5) into spec.rope / spec.rope_theta.
Status parse_rope(const ConfigReader& cfg, ModelSpec& spec);
// One rope_parameters / rope_scaling object (its rope_type or type, factor, YaRN and llama3 keys,
// partial_rotary_factor) into spec.rope and spec.partial_rotary_factor; rope_theta is the caller's.
Status parse_rope_parameters_object(const ConfigReader& rope, ModelSpec& spec);
// rope_parameters keyed by layer type (transformers 5: {"full_attention": {...}, "sliding_attention":
// {...}}, each a rope_parameters object, its partial_rotary_factor included): the full-attention entry
// into spec.rope_theta / partial_rotary_factor / rope, the sliding one into spec.sliding_rope where it
// differs. `full` / `sliding` are the config class's defaults for an absent entry.
Status parse_rope_by_layer_type(const ConfigReader& cfg, const LayerRope& full, const LayerRope& sliding,
                                ModelSpec& spec);
// The inverse (replaces rope_theta / rope_scaling with the keyed rope_parameters).
void write_rope_by_layer_type(const ModelSpec& spec, nlohmann::json& out);
// quantization_config into spec.weights (fp8 block, mxfp4); absent = the activation dtype.
Status parse_quantization(const ConfigReader& cfg, ModelSpec& spec);
// Applies `layer_types` when the config lists them ("full_attention", "sliding_attention",
// "chunked_attention"); returns whether it did.
Result<bool> apply_layer_types(const ConfigReader& cfg, ModelSpec& spec);
// A float as transformers writes one: a number, or (transformers 5, for inf and nan) {"__float__":
// "Infinity" | "-Infinity" | "NaN"}; nullopt for anything else.
std::optional<double> config_float(const nlohmann::json& value);
// Keys the family knows to be irrelevant to inference (read nothing; accounted for in the audit).
void ignore_keys(const ConfigReader& cfg, std::initializer_list<const char*> keys);
// A key a release carries that the reference code never reads, because it hard-codes the released value:
// absent or equal passes (and is accounted for); any other value describes a model the reference would
// silently misrun, so it is kUnsupported, naming `implementation` ("LongCat-Flash implements true").
Status require_released(const ConfigReader& cfg, const char* key, const nlohmann::json& released,
                        std::string_view implementation);
// An integer saved under one of several names (transformers' attribute_map aliases, e.g.
// num_experts / num_local_experts); two present with different values is an error.
Result<int64_t> aliased_int(const ConfigReader& cfg, std::initializer_list<const char*> keys, int64_t min,
                            int64_t max, std::optional<int64_t> fallback = std::nullopt);
// transformers 5.25's per_layer_config (its heterogeneous configs): {"<layer index>": {attribute: value}}
// overriding the global config in some layers. Applies head_dim and num_key_value_heads (LayerSpec::head_dim,
// n_kv_heads; 0 where equal to the model's) and refuses any other attribute. Returns whether the key is
// there at all (a null or empty one too: no layer differs).
Result<bool> apply_per_layer_config(const ConfigReader& cfg, ModelSpec& spec);
// Marks every layer sliding with `window` (0 = leave causal).
void set_all_sliding(ModelSpec& spec, int64_t window);

// Writers: the keys parse_core / parse_rope / parse_quantization read.
void write_core(const ModelSpec& spec, nlohmann::json& out);
nlohmann::json write_rope_scaling(const ModelSpec& spec);
void write_layer_types(const ModelSpec& spec, nlohmann::json& out);
// enable_moe_block (Gemma 4): every layer a MoE beside its dense MLP (ModelSpec::dense_mlp_beside_moe) of
// num_experts x moe_intermediate_size, top_k_experts picks by a softmax router with its own input norm and
// per-expert scales, the top-k renormalized. The sizes have no class default: required with the block,
// not read without it.
Status parse_moe_beside_dense_mlp(const ConfigReader& cfg, ModelSpec& spec);

}  // namespace day0
