// Planner speed: a hypothetical 3-trillion-parameter MLA MoE over 1,024 devices must plan in under a
// second (issue 6). Prints the layouts costed and the count that fit beside the time.
#include <benchmark/benchmark.h>

#include "day0/model/catalog.h"
#include "day0/plan/model_cost_adapter.h"
#include "day0/plan/planner.h"
#include "day0/plan/presets.h"

namespace {

using namespace day0::plan;

// DeepSeek-V3 (the catalog's config in BF16) with 66 layers (2 dense) of 1024 experts of width 2112,
// top-8: ~2.99 T parameters, counted by the family's weight table.
ModelCost three_trillion() {
  nlohmann::json config = day0::find_catalog_entry("deepseek-v3")->config;
  config.erase("quantization_config");
  config["num_hidden_layers"] = 66;
  config["first_k_dense_replace"] = 2;
  config["n_routed_experts"] = 1024;
  config["moe_intermediate_size"] = 2112;
  return model_cost_from_config(config, "hypothetical-3t").value();
}

void BM_Plan3TOver1024Devices(benchmark::State& state, const char* cluster_name, WeightPrecision weights) {
  const ModelCost model = three_trillion();
  const ClusterSpec cluster = resolve_preset(cluster_name).value();
  Workload w;
  w.weights = weights;
  int64_t costed = 0, feasible = 0;
  for (auto _ : state) {
    auto result = plan_model(model, cluster, w);
    costed = result->n_costed;
    feasible = static_cast<int64_t>(result->feasible.size());
    benchmark::DoNotOptimize(result);
  }
  state.counters["params_T"] = model.total_params() / 1e12;
  state.counters["devices"] = static_cast<double>(cluster.total_devices());
  state.counters["layouts_costed"] = static_cast<double>(costed);
  state.counters["layouts_fit"] = static_cast<double>(feasible);
}

BENCHMARK_CAPTURE(BM_Plan3TOver1024Devices, h200_fp8, "128x8xH200", WeightPrecision::kFP8)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Plan3TOver1024Devices, h100_bf16, "128x8xH100", WeightPrecision::kBF16)
    ->Unit(benchmark::kMillisecond);
// Cross-node TP widens the search (TP up to 1,024).
void BM_Plan3TCrossNodeTp(benchmark::State& state) {
  const ModelCost model = three_trillion();
  const ClusterSpec cluster = resolve_preset("128x8xH100").value();
  Workload w;
  w.weights = WeightPrecision::kBF16;
  w.allow_cross_node_tp = true;
  for (auto _ : state) benchmark::DoNotOptimize(plan_model(model, cluster, w));
}
BENCHMARK(BM_Plan3TCrossNodeTp)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
