// Prefill GEMM (T = 512 tokens) per weight format on the cpu backend in GFLOP/s, beside the FP32 FMA,
// BF16 dot and AMX BF16 tile peaks measured on the same threads. Args: format, threads, exact (1: float32
// products; 0: what a model runs, BF16 activations on vdpbf16ps or AMX tiles for BF16 weights).
#include <map>

#include <benchmark/benchmark.h>

#include "bench_weights.h"
#include "day0/backends/backend.h"
#include "day0/backends/cpu/machine_limits.h"

namespace {

constexpr int64_t kT = 512;
constexpr int64_t kK = 2048;
constexpr int64_t kN = 2048;

void BM_Gemm(benchmark::State& state) {
  const auto format = day0::kAllWeightFormats[state.range(0)];
  const int threads = static_cast<int>(state.range(1));
  const bool exact = state.range(2) != 0;
  const auto w = day0::bench::make_weight(format, kN, kK);
  const auto x = day0::bench::make_activations(kT * kK);
  std::vector<float> y(static_cast<size_t>(kT * kN));
  day0::BackendOptions opts;
  opts.n_threads = threads;
  auto be = std::move(day0::make_backend("cpu", opts).value());
  day0::ThreadPool pool(threads);
  const double fp32_peak = day0::measure_fma_peak_gflops(pool);
  const double bf16_peak = day0::measure_bf16_peak_gflops(pool);
  const double amx_peak = day0::measure_amx_bf16_peak_gflops(pool);
  for (auto _ : state) {
    be->matmul({.x = {x.data(), kT, kK}, .w = w.view, .y = {y.data(), kT, kN}, .exact = exact});
    benchmark::DoNotOptimize(y.data());
  }
  const double flops = 2.0 * kT * kK * kN * static_cast<double>(state.iterations());
  state.SetLabel(std::string(day0::weight_format_name(format)) + (exact ? " exact" : ""));
  state.counters["GFLOP/s"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsRate);
  state.counters["fp32_peak"] = fp32_peak;
  state.counters["bf16_peak"] = bf16_peak;
  state.counters["amx_bf16_peak"] = amx_peak;
}
BENCHMARK(BM_Gemm)
    ->ArgsProduct({{0, 1, 2, 3, 4}, {1, 2}, {1, 0}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
