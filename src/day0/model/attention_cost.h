#pragma once
// What one layer's attention costs, from the spec alone: FLOPs per (query, key) pair, and which keys a
// query row reads. The planner multiplies the two (plan/estimate.cpp) and the recording backend costs the
// engine's kernel calls with the same functions (backends/recording_backend.cpp); the tests hold the
// recorded figures to these on every catalog entry (tests/runtime/attention_cost_test.cpp) and the key
// counts to the keys DeepSeek-V4's attention really gathers (the golden checkpoint), so neither drifts.
#include <cstdint>

#include "day0/model/model_spec.h"

namespace day0 {

// Which cached keys one query row reads. A row that sees `visible` positions (itself and the tokens before
// it) attends to
//   - raw keys: the last min(visible, window) positions (window 0: every visible one);
//   - compressed entries (entry_ratio m > 0): one per complete window of m positions, floor(visible / m);
//   - with a selection (selected > 0): at most `selected` of the selectable keys (the entries where the
//     layer compresses, else the raw keys), after the layer's own indexer (indexed) scored every
//     selectable key. A layer sharing another's selection selects without an indexer.
struct KeyReach {
  int64_t window = 0;
  int64_t entry_ratio = 0;
  int64_t selected = 0;
  bool indexed = false;
  bool operator==(const KeyReach&) const = default;
};

struct RowKeys {
  double attended = 0;  // keys in the row's softmax: raw keys and entries
  double indexed = 0;   // keys its indexer scores (0: no indexer)
  double entries = 0;   // of `attended`, the compressed entries (the rest are raw keys)
};

// The keys of the row that sees `visible` positions.
RowKeys row_keys(const KeyReach& reach, int64_t visible);
// Summed over the rows of a causal prompt of `tokens` tokens (visible 1 .. tokens), in closed form: a
// planner costs prompts of a million tokens.
RowKeys prompt_keys(const KeyReach& reach, int64_t tokens);

// FLOPs an indexer spends per (query, key) pair: n_heads dot products of head_dim, then per head a ReLU,
// a weight and a sum (the lightning indexer: DeepSeek-V3.2, GLM-5, DeepSeek-V4's compressed sparse
// layers), or a max over the heads' scores of a block (the block indexer of block-sparse attention).
double lightning_index_flops_per_pair(int64_t n_heads, int64_t head_dim);
double block_index_flops_per_pair(int64_t n_heads, int64_t head_dim);

struct AttentionPairCost {
  // FLOPs per (query, key) pair over all the layer's query heads: the score and the weighted sum of
  // values. MLA decodes in the absorbed form (scores over latent + rope key, the sum over the latent)
  // and prefills in the expanded one (qk + v head widths); the per-query absorption and the per-key
  // expansion are weight matmuls, not part of the pair. 0 on a layer without attention.
  double decode_flops = 0;
  double prefill_flops = 0;
  // The layer's own indexer, per (query, scored key) pair (0: none).
  double index_flops = 0;
  KeyReach reach;  // the keys a row attends to and scores
};

// Whether a layer attends over cached keys at all: its own KV rows, or those of an earlier layer.
// Gated DeltaNet, Mamba-2 and FFN-only layers do not.
bool layer_attends(const LayerSpec& layer);

// The keys a row of `layer` reads: its window, compressed entries, and sparse selection.
KeyReach key_reach(const ModelSpec& spec, const LayerSpec& layer);

AttentionPairCost attention_pair_cost(const ModelSpec& spec, const LayerSpec& layer);

}  // namespace day0
