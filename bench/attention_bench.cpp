// Decode attention (one query token, 32 heads, 8 kv heads, head dim 128, float32 KV cache) at 4k and
// 32k context on the cpu backend: time per token and GB/s of K/V read. Args: context, threads.
#include <benchmark/benchmark.h>

#include "bench_weights.h"
#include "day0/backends/backend.h"

namespace {

constexpr int64_t kHeads = 32;
constexpr int64_t kKvHeads = 8;
constexpr int64_t kDim = 128;

void BM_AttentionDecode(benchmark::State& state) {
  const int64_t context = state.range(0);
  const auto q = day0::bench::make_activations(kHeads * kDim, 1);
  const auto k = day0::bench::make_activations(context * kKvHeads * kDim, 2);
  const auto v = day0::bench::make_activations(context * kKvHeads * kDim, 3);
  std::vector<float> out(static_cast<size_t>(kHeads * kDim));
  day0::BackendOptions opts;
  opts.n_threads = static_cast<int>(state.range(1));
  auto be = std::move(day0::make_backend("cpu", opts).value());
  for (auto _ : state) {
    be->attention({.q = {q.data(), 1, kHeads * kDim},
                   .k = {k.data(), context, kKvHeads * kDim},
                   .v = {v.data(), context, kKvHeads * kDim},
                   .out = {out.data(), 1, kHeads * kDim},
                   .n_heads = kHeads,
                   .n_kv_heads = kKvHeads,
                   .head_dim = kDim,
                   .q_pos0 = context - 1});
    benchmark::DoNotOptimize(out.data());
  }
  const double bytes = 2.0 * static_cast<double>(context * kKvHeads * kDim) * 4.0;
  state.counters["kv_GB/s"] =
      benchmark::Counter(bytes / 1e9 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_AttentionDecode)
    ->ArgsProduct({{4096, 32768}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
