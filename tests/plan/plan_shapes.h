#pragma once
// The models of the planner tests, costed the way a release is: a config (a catalog entry's, its keys
// changed for what-if models and in BF16, quantization_config dropped) parsed by its family, its
// parameters counted from the family's weight table (model_cost_from_config). No parameter formula of
// its own: a figure here is the one `day0 plan` gives the same config.
#include <string>

#include <nlohmann/json.hpp>

#include "day0/plan/model_cost.h"

namespace day0::plan::testing {

// The catalog entry's config in BF16 (its quantization_config dropped).
nlohmann::json bf16_config(const std::string& catalog_name);
// The config costed; a config that does not parse or cost fails the calling test (and gives no layers).
ModelCost cost_of(const nlohmann::json& config, const std::string& name);

ModelCost deepseek_v3();     // the catalog's deepseek-v3 in BF16
ModelCost kimi_k2();         // the catalog's kimi-k2 in BF16
ModelCost llama31_8b();      // the catalog's llama-3.1-8b
ModelCost llama31_70b();     // the catalog's llama-3.1-70b
ModelCost three_trillion();  // DeepSeek-V3 with 66 layers (2 dense), 1024 experts of width 2112, top-8

// The bench shapes as bench/e2e.sh synthesises them (`day0 synth`: the miniature of a catalog entry
// with the given sizes; grouped-query attention kept at 2 KV heads). `vocab` overrides 32000.
ModelCost bench_dense_1b(int64_t vocab = 32000);  // llama-3.1-8b, 16 layers of hidden 2048
ModelCost bench_moe_a02b();                       // qwen3-30b-a3b, 12 layers of 64 experts

}  // namespace day0::plan::testing
