#pragma once
// What one layer's attention costs per (query, cached key) pair, from the spec alone: the planner
// multiplies it by the keys a query sees (plan/model_cost_adapter.cpp), and the recording backend
// measures the same figure on the kernels the engine calls (tests/runtime/attention_cost_test.cpp
// holds the two equal on every catalog entry), so the formula cannot drift from what runs.
#include <cstdint>

#include "day0/model/model_spec.h"

namespace day0 {

struct AttentionPairCost {
  // FLOPs per (query, key) pair over all the layer's query heads: the score and the weighted sum of
  // values. MLA decodes in the absorbed form (scores over latent + rope key, the sum over the latent)
  // and prefills in the expanded one (qk + v head widths); the per-query absorption and the per-key
  // expansion are weight matmuls, not part of the pair. 0 on a layer without attention.
  double decode_flops = 0;
  double prefill_flops = 0;
  // Block-sparse attention (0: dense): a query attends to at most this many keys, its selected blocks,
  // after the block indexer scores every visible key at `index_flops` a pair.
  int64_t attended_keys = 0;
  double index_flops = 0;
};

// Whether a layer attends over cached keys at all: its own KV rows, or those of an earlier layer.
// Gated DeltaNet, Mamba-2 and FFN-only layers do not.
bool layer_attends(const LayerSpec& layer);

AttentionPairCost attention_pair_cost(const ModelSpec& spec, const LayerSpec& layer);

}  // namespace day0
