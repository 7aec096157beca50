#pragma once
// What several family files share. Each family file registers its parser, writer and weight table
// (family_registry.h). A parser receives the config object that holds the text model's keys (an image-text
// wrapper's text_config) with spec.architecture / model_type / family already set, and fills the rest of
// the spec; the writer adds the family's keys on top of write_core().
#include <initializer_list>
#include <utility>

#include <nlohmann/json.hpp>

#include "day0/core/status.h"
#include "day0/model/config_common.h"
#include "day0/model/config_reader.h"
#include "day0/model/model_spec.h"
#include "day0/model/weight_table.h"

namespace day0::families {

// Shared by the DeepSeek-style MoE families (deepseek_v2, deepseek_v3, glm4_moe): routed + shared
// experts, dense layers before first_k_dense_replace.
struct DeepseekMoeDefaults {
  const char* scoring = "softmax";
  const char* topk_method = "greedy";
  int64_t n_group = 1;
  int64_t topk_group = 1;
  bool norm_topk_prob = false;
  double routed_scaling_factor = 1.0;
  int64_t first_k_dense_replace = 0;
  int64_t n_shared_experts = 0;
};
// DeepSeek-V3's class defaults (sigmoid noaux_tc routing in 8 groups keeping 4, 2.5x, one shared
// expert, three dense layers), which DeepSeek-V3.2 keeps.
DeepseekMoeDefaults deepseek_v3_moe_defaults();
// GLM-4.5's router (sigmoid + correction bias, noaux_tc, renormalised, scaling 1), one shared expert after
// one dense layer: the class defaults that GLM-4.7-Flash and Solar Open start from too.
DeepseekMoeDefaults glm4_moe_defaults();
Status parse_deepseek_moe(const ConfigReader& cfg, const DeepseekMoeDefaults& defaults, ModelSpec& spec);
void write_deepseek_moe(const ModelSpec& spec, nlohmann::json& out);
// DeepSeek's sparse-attention (DSA) lightning indexer: index_n_heads (the class's default_heads),
// index_head_dim (128, at least the rotary width), index_topk (2048), rotated with `rope`; sets spec.indexer.
Status parse_dsa_indexer(const ConfigReader& cfg, int64_t default_heads, RopeLayout rope, ModelSpec& spec);
// The indexer's rows of one layer (scope "model.layers.{L}."): self_attn.indexer.wq_b [n_I * d_I, q_lora],
// wk [d_I, H] (FP8 blocks in an FP8 release), k_norm weight and bias [d_I] (float32), weights_proj [n_I, H]
// stored as `weights_proj` says (a BF16 projection, or float32 where the class keeps it so).
void dsa_indexer_weights(const ModelSpec& spec, WeightTableBuilder& b, WeightStorage weights_proj);
// transformers 5 writes every layer of a DSA model as layer_types "indexed_attention": anything else is
// refused.
Status check_indexed_layer_types(const ConfigReader& cfg, const ModelSpec& spec);
// parse_core for the GLM MLA classes whose head_dim is qk_rope_head_dim (hidden need not divide by the
// heads): the rotary part must be all of it (partial_rotary_factor 1; `cls` names the class in the refusal).
Status parse_core_rope_head_dim(const ConfigReader& core, FamilyDefaults defaults, const char* cls,
                                ModelSpec& spec);
// Multi-head latent attention keys (q_lora_rank, kv_lora_rank, qk_*_head_dim, v_head_dim).
// The config class's defaults for absent MLA keys (transformers reads an absent q_lora_rank as its class
// default, an explicit null as no query compression).
struct MlaDefaults {
  int64_t q_lora_rank = 1536;  // DeepseekV2/V3/V32Config, LongcatFlashConfig
  int64_t kv_lora_rank = 512;
  int64_t qk_nope_head_dim = 128;
  int64_t qk_rope_head_dim = 64;
  int64_t v_head_dim = 128;
};
Status parse_mla(const ConfigReader& cfg, const MlaDefaults& defaults, ModelSpec& spec);
void write_mla(const ModelSpec& spec, nlohmann::json& out);
// Gated DeltaNet hybrids (Qwen3-Next, Qwen3.5): the linear_* sizes into spec.linear_attention (the
// classes' defaults: kernel 4, 16 key heads and 32 value heads of 128) and each layer's kind from layer_types
// or full_attention_interval (default 4: every 4th layer full attention); both given must agree.
Status parse_gated_deltanet(const ConfigReader& cfg, ModelSpec& spec);
void write_gated_deltanet(const ModelSpec& spec, nlohmann::json& out);
// Qwen MoE placement: sparse iff not in mlp_only_layers and (N + 1) % decoder_sparse_step == 0.
Status parse_qwen_moe_layers(const ConfigReader& cfg, ModelSpec& spec);
void write_qwen_moe_layers(const ModelSpec& spec, nlohmann::json& out);
// Qwen sliding window: sliding iff use_sliding_window and N >= max_window_layers (or layer_types).
Status parse_qwen_sliding(const ConfigReader& cfg, ModelSpec& spec);
void write_qwen_sliding(const ModelSpec& spec, nlohmann::json& out);
// Weight tables shared by several families: a dense SwiGLU decoder (llama, mistral, qwen2, qwen3),
// the Qwen MoE decoder (qwen2_moe, qwen3_moe) and the DeepSeek FFN of one layer (deepseek_v2/v3, glm4_moe).
void dense_decoder_weights(const ModelSpec& spec, WeightTableBuilder& b);
void qwen_moe_weights(const ModelSpec& spec, WeightTableBuilder& b);
// The FFN of one Qwen MoE-style layer (scope "model.layers.{L}."): a dense mlp, or mlp.gate, mlp.experts
// and the sigmoid-gated mlp.shared_expert (qwen2_moe, qwen3_moe, qwen3_next).
void qwen_moe_ffn(const ModelSpec& spec, WeightTableBuilder& b, const LayerSpec& layer);
void deepseek_ffn_weights(const ModelSpec& spec, WeightTableBuilder& b, const LayerSpec& layer);
// mlp_layer_types ("dense" / "sparse" per layer, as transformers 5 saves them) sets each layer's FFN: a dense
// SwiGLU of intermediate_size or the MoE. `types` must have n_layers entries.
Status apply_mlp_layer_types(const ConfigReader& cfg, const std::vector<std::string>& types, ModelSpec& spec);
// mlp_layer_types when the config lists them, else layer 0 dense and the others MoE (the class default of
// GLM-4.7-Flash and HY3); a first_k_dense_replace the release ships beside them, which transformers never
// reads, must agree.
Status apply_mlp_layer_types_or_first_dense(const ConfigReader& cfg, ModelSpec& spec);
// The config with each {alias, canonical} key (transformers' attribute_map, the spelling of releases
// written by remote code) under its canonical name, for a reader derived from `cfg` (the aliases count
// as read). Both present with different values is an error.
Result<nlohmann::json> with_canonical_keys(
    const ConfigReader& cfg, std::initializer_list<std::pair<const char*, const char*>> aliases);
// Compressed-KV attention layers (LayerSpec::kv_compress_ratio, compressed_sparse): layer_types, else the
// legacy compress_ratios (0 / 4 / 128 per layer), else two heavily compressed layers then compressed sparse
// and heavily compressed in turn; lists longer than the layers are cut (as the class cuts them), shorter
// ones refused. Ratios from compress_rates (default 4 and 128; legacy compress_rate_csa / _hca override).
// Every layer also keeps a sliding window of sliding_window (default 128) raw keys.
Status parse_compressed_kv_layer_types(const ConfigReader& cfg, ModelSpec& spec);
// Hash-routed MoE layers (LayerSpec::hash_routed): mlp_layer_types "hash_moe" / "moe", else the first
// num_hash_layers (default 3) hash-routed; every layer is a MoE.
Status parse_hash_moe_layer_types(const ConfigReader& cfg, ModelSpec& spec);
// The inverse of both: layer_types, compress_rates, mlp_layer_types and sliding_window.
void write_compressed_kv_layer_types(const ModelSpec& spec, nlohmann::json& out);
// Index of the first layer whose FFN is MoE, or n_layers.
int64_t first_moe_layer(const ModelSpec& spec);

}  // namespace day0::families
