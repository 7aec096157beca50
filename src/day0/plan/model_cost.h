#pragma once
// What the planner needs to know about a model, and nothing more: parameters and stored bytes per layer
// and per sharding rule, the KV cache a token leaves behind in each layer, the math per token, and the
// head/expert counts that decide which parallel degrees divide evenly. Built from a ModelSpec and its
// tensor manifest (model_cost_adapter.h); a hypothetical model is a config with keys changed
// (model_cost_from_config), so that its parameters are counted by its family's weight table too.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "day0/model/attention_cost.h"
#include "day0/model/model_spec.h"
#include "day0/plan/workload.h"

namespace day0::plan {

// Weight groups of a decoder layer, named by how tensor/expert parallelism splits them.
enum class WeightGroup : int {
  kAttentionSharded,     // q / o projections, MLA q_b / kv_b: split by TP (heads)
  kAttentionReplicated,  // MLA q_a / kv_a down-projections and their norms: whole on every TP rank
  kAttentionKv,          // GQA k / v projections: split by TP until TP exceeds the kv heads, then copied
  kDenseMlp,             // dense SwiGLU: split by TP
  kSharedExperts,        // shared experts: split by TP
  kRoutedExperts,        // routed experts: split over EP x expert-TP (all devices of a pipeline stage)
  kRouter,               // router / gate: whole on every rank
  kNorm,                 // layer norms: whole on every rank
};
inline constexpr int kWeightGroups = 8;
const char* weight_group_name(WeightGroup g);
// Groups whose storage follows --weights (the projections); the rest stay 16-bit or as stored.
bool weight_group_quantizable(WeightGroup g);

struct LayerCost {
  std::array<double, kWeightGroups> params{};            // logical parameters
  std::array<double, kWeightGroups> checkpoint_bytes{};  // as stored in the release, scales included
  // Cached bytes per token, all kv heads (MLA: latent + rope key), by KvDtype: the engine's figure,
  // kv_bytes_per_token_per_layer() (model/model_memory.h).
  std::array<double, 3> kv_bytes_per_token{};
  // Compressed KV attention: each token's share of the layer's compressed entries (entry bytes / ratio),
  // by KvDtype, held for the whole sequence whatever kv_window says (compressed_kv_bytes_per_token()).
  std::array<double, 3> compressed_kv_bytes_per_token{};
  // A linear-attention layer's fixed state per sequence (conv window + delta-rule state) in a BF16 run,
  // recurrent_state_bytes_per_layer(); its kv_bytes_per_token are 0.
  double state_bytes_per_sequence = 0;
  int64_t kv_window = 0;                   // 0: every token stays cached; else at most this many per sequence
  double attn_flops_per_pair_decode = 0;   // FLOPs per (new token, cached token) pair, all heads
  double attn_flops_per_pair_prefill = 0;  // the same for prefill (MLA runs the expanded form there)
  // The keys a token reads (model/attention_cost.h: its window, compressed entries, sparse selection);
  // an indexer scores its candidates at `index_flops_per_pair` FLOPs each, reading their index keys,
  // `index_key_share` of the layer's KV bytes per token where the keys are raw rows, of an entry's bytes
  // where they are compressed entries.
  KeyReach reach;
  double index_flops_per_pair = 0;
  double index_key_share = 0;
  bool moe = false;
  // q/k RMSNorm over all heads (qk_norm_full_width): heads split over TP ranks, so each norm all-reduces its
  // per-token sum of squares (one float32 for q and one for k).
  bool heads_norm_all_reduce = false;
  double& param(WeightGroup g) { return params[static_cast<int>(g)]; }
  double param(WeightGroup g) const { return params[static_cast<int>(g)]; }
  double kv_bytes(KvPrecision kv) const { return kv_bytes_per_token[static_cast<size_t>(kv)]; }
  double compressed_kv_bytes(KvPrecision kv) const {
    return compressed_kv_bytes_per_token[static_cast<size_t>(kv)];
  }
  double& stored(WeightGroup g) { return checkpoint_bytes[static_cast<int>(g)]; }
  double stored(WeightGroup g) const { return checkpoint_bytes[static_cast<int>(g)]; }
};

struct ModelCost {
  std::string name;
  bool mla = false;  // KV cache is one latent shared by all heads: replicated across TP ranks
  int64_t hidden = 0;
  int64_t vocab = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;  // GQA kv heads (MLA: 1)
  int64_t qk_head_dim = 0;
  int64_t v_head_dim = 0;
  int64_t n_experts = 0;  // routed experts (0: dense)
  // Real routed experts a token uses, on average: top-k, fewer with zero-computation experts
  // (then the release's published average, MoeSpec::mean_real_expert_share).
  double experts_per_token = 0;
  int64_t expert_intermediate = 0;
  int64_t dense_intermediate = 0;   // widest dense MLP (0: none)
  int64_t shared_intermediate = 0;  // shared expert width (0: none)
  int64_t out_groups = 0;           // grouped output projection's groups (o_groups; 0: none): split whole
  int64_t max_context = 0;          // max_position_embeddings of the release (0: unknown)
  bool tied_embeddings = false;
  double embedding_params = 0;
  double embedding_checkpoint_bytes = 0;
  double lm_head_params = 0;  // 0 when tied
  double lm_head_checkpoint_bytes = 0;
  double final_norm_params = 0;
  WeightPrecision checkpoint_precision = WeightPrecision::kBF16;  // what compute the release implies
  std::vector<LayerCost> layers;
  // Mechanisms no engine block runs yet (unimplemented_mechanisms()): planned, but no launch line.
  std::vector<std::string> unimplemented;

  int64_t n_layers() const { return static_cast<int64_t>(layers.size()); }
  double total_params() const;
  double active_params_per_token() const;  // dense parts + shared + top-k routed experts
  // Cached bytes a token leaves in all layers (ignoring windows): 61 MLA layers of 576 BF16 values = 70,272.
  double kv_bytes_per_token(KvPrecision kv) const;
  // Fixed bytes a sequence holds whatever its length (linear-attention states, compressed KV layers'
  // partial groups; 0 for most models).
  double state_bytes_per_sequence() const;
};

// Fills layer.kv_bytes_per_token for every KV dtype from kv_bytes_per_token_per_layer(spec, dtype), the
// one figure the engine's pool, `inspect` and the planner share; a linear-attention layer gets 0 there
// and its recurrent_state_bytes_per_layer() in state_bytes_per_sequence instead.
void set_kv_bytes_per_token(LayerCost& layer, const ModelSpec& spec, bool linear_attention = false);
// And the compressed share of a compressed-KV layer (0 for the others), and its partial groups
// (compressed_kv_state_bytes_per_layer) added to state_bytes_per_sequence.
void set_compressed_kv_bytes_per_token(LayerCost& layer, const ModelSpec& spec, const LayerSpec& layer_spec);

// Bytes a group's parameters take at `precision` (checkpoint: as stored). Quantized formats carry their
// scales: FP8 one f32 per 128x128 block, INT8 one bf16 per output row (ignored), INT4 one bf16 per 128.
double group_bytes(const LayerCost& layer, WeightGroup g, WeightPrecision precision);
double bytes_per_param(WeightPrecision precision);  // for quantizable groups; checkpoint -> 0 (as stored)

// The plain weight table: parameters times element width (no scales).
struct WeightTableRow {
  const char* dtype;
  double bytes;
};
std::array<WeightTableRow, 5> weight_table(double params);  // FP32, BF16, FP8, INT8, INT4

}  // namespace day0::plan
