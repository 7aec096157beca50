// The planner's attention cost per (query, key) pair (model/attention_cost.h) is what the engine's
// kernels cost: on a miniature of every catalog entry (the release's head widths and MLA ranks kept),
// the recording backend's attention FLOPs of the prefill step and of the decode step grow, from 1 key
// a query to 2, by exactly the step's query rows times the sum of the layers' per-pair figures.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "day0/model/attention_cost.h"
#include "day0/model/catalog.h"
#include "day0/ops/op_names.h"
#include "day0/runtime/op_recording.h"
#include "day0/synth/miniature.h"

namespace day0 {
namespace {

bool is_attention(const std::string& op) {
  return op == op::kAttention || op == op::kPagedAttention || op == op::kMlaAttention ||
         op == op::kPagedMlaAttention;
}

// The attention kernels' FLOPs of one step, less their weight matmuls (MLA's absorption per query and
// expansion per key): what scales with the (query, key) pairs.
double attention_pair_flops(const std::vector<RecordedCall>& calls, StepPhase phase) {
  double flops = 0;
  for (const RecordedCall& c : calls) {
    if (c.phase == phase && is_attention(c.op.name))
      flops += c.op.flops_per_token - c.op.matmul_flops_per_token;
  }
  return flops;
}

TEST(AttentionCost, PerPairFlopsAreWhatTheRecorderMeasuresOnEveryCatalogEntry) {
  int checked = 0;
  for (const CatalogEntry& entry : model_catalog()) {
    SCOPED_TRACE(entry.name);
    auto full = catalog_model(entry.name);
    ASSERT_TRUE(full.is_ok()) << full.status().to_string();
    if (!unimplemented_mechanisms(*full).empty()) continue;  // not run yet: nothing to record
    MiniatureOptions shrink;
    shrink.release_attention = true;
    auto mini = make_miniature_spec(*full, shrink);
    ASSERT_TRUE(mini.is_ok()) << mini.status().to_string();
    // Every query costed with 1 cached key, then 2 (windows and sparse selections hold at least 2).
    auto one_key = record_calls(*mini, 0);
    auto two_keys = record_calls(*mini, 1);
    ASSERT_TRUE(one_key.is_ok()) << one_key.status().to_string();
    ASSERT_TRUE(two_keys.is_ok()) << two_keys.status().to_string();
    double decode = 0, prefill = 0;
    for (const LayerSpec& layer : mini->layers) {
      const AttentionPairCost pair = attention_pair_cost(*mini, layer);
      decode += pair.decode_flops;
      prefill += pair.prefill_flops;
    }
    const double measured_decode = attention_pair_flops(*two_keys, StepPhase::kDecode) -
                                   attention_pair_flops(*one_key, StepPhase::kDecode);
    const double measured_prefill = attention_pair_flops(*two_keys, StepPhase::kPrefill) -
                                    attention_pair_flops(*one_key, StepPhase::kPrefill);
    EXPECT_DOUBLE_EQ(measured_decode, decode);  // one query row
    EXPECT_DOUBLE_EQ(measured_prefill, static_cast<double>(recorded_prompt_tokens(*mini)) * prefill);
    checked += decode > 0 ? 1 : 0;  // a miniature's few layers may all be recurrent
  }
  EXPECT_GT(checked, 40);
}

}  // namespace
}  // namespace day0
