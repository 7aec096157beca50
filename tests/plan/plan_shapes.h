#pragma once
// Model shapes for planner tests that do not need a config file: the architecture numbers of public
// releases (from their config.json) and a hypothetical 3T model.
#include "day0/plan/model_cost.h"

namespace day0::plan::testing {

ModelShape deepseek_v3_shape();
ModelShape llama31_8b_shape();
ModelShape three_trillion_shape();

}  // namespace day0::plan::testing

namespace day0::plan::testing {
// Kimi K2 config.json: DeepSeek-V3's layer with 64 heads, 384 experts, 1 leading dense layer, vocab 163840.
ModelShape kimi_k2_shape();
}  // namespace day0::plan::testing

namespace day0::plan::testing {
// The bench shapes of ../shared/docs/benchmarks.md as `day0 synth` writes them for bench/e2e.sh.
ModelShape bench_dense_1b();
ModelShape bench_moe_a02b();
}  // namespace day0::plan::testing
