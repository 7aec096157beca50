#pragma once
// Which decoder layers each pipeline stage runs: one rule for the binder, the engine and `run`'s report.
//
// Rule: contiguous blocks balanced by layer count. Stage s of `pp` runs layers
//   [floor(s * L / pp), floor((s + 1) * L / pp))
// so stages differ by at most one layer and the first stage (which also holds the embedding) is never
// the one with the extra layer. Count, not weight bytes: every layer caches the same KV rows and runs
// the same attention per token, which is what a decode step's time follows; a model whose first layers
// are dense and the rest MoE puts more weight bytes on the later stages, which a byte
// balance would fix at the cost of uneven KV and attention. Fewer layers than stages is refused
// (check_pipeline_parallel): a stage would hold nothing.
#include <cstdint>

#include "day0/dist/expert_placement.h"

namespace day0::dist {

using LayerBlock = ExpertBlock;  // [begin, end) of decoder layers

// The layers stage `stage` of `pp` runs, of `n_layers` (all of them when pp is 1).
constexpr LayerBlock stage_layers(int64_t n_layers, int64_t pp, int64_t stage) {
  return balanced_block(n_layers, pp, stage);
}

// The stage that runs layer `l`.
constexpr int64_t stage_of_layer(int64_t n_layers, int64_t pp, int64_t l) {
  return ((l + 1) * pp - 1) / n_layers;
}

}  // namespace day0::dist
