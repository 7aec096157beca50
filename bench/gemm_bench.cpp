// Prefill GEMM (T = 512 tokens) per weight format on the cpu backend in GFLOP/s, beside the FP32 FMA,
// BF16 dot and AMX BF16 tile peaks measured on the same threads. Args: format, threads, exact (1: float32
// products; 0: what a model runs, BF16 activations on vdpbf16ps or AMX tiles for BF16 weights). Below,
// a serving step's dense matmuls at 4-128 tokens. INT8 / INT4 (formats 5, 6) run the non-exact call (int8
// activations, the integer kernels of the CPU's level) in groups of 128, or 32 with a fourth arg of 1.
#include <map>
#include <vector>

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
  const bool group32 = state.range(3) == 1;
  const auto w = day0::bench::make_weight(format, kN, kK, 1, 0, group32);
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
  state.SetLabel(std::string(day0::weight_format_name(format)) + (exact ? " exact" : "") +
                 (w.view.is_int() ? " group " + std::to_string(w.view.group) : ""));
  state.counters["GFLOP/s"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsRate);
  state.counters["fp32_peak"] = fp32_peak;
  state.counters["bf16_peak"] = bf16_peak;
  state.counters["amx_bf16_peak"] = amx_peak;
}
BENCHMARK(BM_Gemm)
    ->ArgsProduct({{0, 1, 2, 3, 4}, {1, 2}, {1, 0}, {0}})
    ->ArgsProduct({{5, 6}, {1, 2}, {0}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// The dense matmuls of one bench-moe-a02b serving step at `tokens` tokens (BF16 weights, BF16
// activations as `day0 serve --dtype bf16`): per layer q 2048 x 1024, k and v 512 x 1024, o 1024 x 2048,
// 12 layers, then the 32000 x 1024 LM head: 191 MB of weights, read from memory every step (past the
// last-level cache). 5-128 tokens take the few-token path (SimdKernels::dot_rows_bf16_x16) where the CPU
// has vdpbf16ps, more the packed GEMM. Args: tokens.
void BM_ServeStepDense(benchmark::State& state) {
  const int64_t tokens = state.range(0);
  struct Shape {
    int64_t rows, cols;
  };
  std::vector<Shape> shapes;
  for (int l = 0; l < 12; ++l)
    shapes.insert(shapes.end(), {{2048, 1024}, {512, 1024}, {512, 1024}, {1024, 2048}});
  shapes.push_back({32000, 1024});
  std::vector<day0::bench::OwnedWeight> weights;
  weights.reserve(shapes.size());
  double flops_per_step = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    weights.push_back(
        day0::bench::make_weight(day0::WeightFormat::kBF16, shapes[i].rows, shapes[i].cols, i + 1));
    flops_per_step += 2.0 * static_cast<double>(tokens * shapes[i].rows * shapes[i].cols);
  }
  const auto x = day0::bench::make_activations(tokens * 2048);  // [tokens, up to 2048]
  std::vector<float> y(static_cast<size_t>(tokens * 32000));    // [tokens, up to 32000]
  day0::BackendOptions opts;
  opts.n_threads = 2;
  auto be = std::move(day0::make_backend("cpu", opts).value());
  day0::ThreadPool pool(2);
  const double bf16_peak = day0::measure_bf16_peak_gflops(pool);
  for (auto _ : state) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      be->matmul({.x = {x.data(), tokens, shapes[i].cols},
                  .w = weights[i].view,
                  .y = {y.data(), tokens, shapes[i].rows},
                  .exact = false});
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops_per_step * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
  state.counters["bf16_peak"] = bf16_peak;
}
BENCHMARK(BM_ServeStepDense)
    ->Arg(4)
    ->Arg(8)
    ->Arg(16)
    ->Arg(32)
    ->Arg(64)
    ->Arg(128)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
