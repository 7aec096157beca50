// Decode GEMV (M = 1) per weight format on the cpu backend: GB/s of weight bytes streamed (data +
// scales) and that figure as a fraction of the read bandwidth measured here, now, with the same
// thread count (goal >= 0.8 on 2 threads for BF16, FP8 and MXFP4). Args: format, threads, in cache,
// SIMD level (0 scalar, 1 avx2, 2 avx512; levels this CPU lacks are skipped), activations (0: the
// exact call, 1: BF16 weights with activations that may round, `--dtype bf16`: x in BF16 and vdpbf16ps
// where the CPU has it), offset of the weights past a 64-byte boundary (a mapped safetensors file
// gives 8), tokens (x rows: 1, or 2 / 4, the several-x row dots; GFLOP/s beside the GB/s), fine scales
// (1: FP8 in 32x32 blocks with the scales DeepSeek-V4.1 ships, FP4 with a scale per 16 columns; 2: FP4 as
// NVFP4, E4M3 scales per 16 columns times a global scale; INT8 / INT4 in groups of 32 instead of 128; 2:
// INT4 in groups of 32 with float32 scales instead of the BF16 ones the engine keeps from a BF16
// checkpoint). INT8 / INT4 run the non-exact call: int8 activations and the integer dot products of that
// level.
#include <map>
#include <optional>
#include <string>

#include <benchmark/benchmark.h>

#include "bench_weights.h"
#include "day0/backends/backend.h"
#include "day0/backends/cpu/machine_limits.h"

namespace {

constexpr int64_t kK = 4096;
// The streamed case reads as many weight bytes as the read probe reads (four times the last-level cache,
// 256 MiB to 1 GiB), so that its GB/s are DRAM's on every host, the ones with a 260 MiB L3 included.
const uint64_t kWeightBytes = day0::bandwidth_probe_bytes();

double read_bandwidth(int threads) {
  static std::map<int, double> measured;
  auto it = measured.find(threads);
  if (it != measured.end()) return it->second;
  day0::ThreadPool pool(threads);
  day0::BandwidthProbe probe;
  return measured[threads] = probe.read_gbps(pool, 5);
}

// Weight bytes per case: range(2) = 0 streams kWeightBytes from DRAM; 1 keeps 1 MiB in cache to show
// the kernel's compute ceiling (what it could stream if memory were infinitely fast).
void BM_Gemv(benchmark::State& state) {
  const auto format = day0::kAllWeightFormats[state.range(0)];
  const int threads = static_cast<int>(state.range(1));
  const uint64_t weight_bytes = state.range(2) == 0 ? kWeightBytes : (uint64_t{1} << 20);
  const double bits = format == day0::WeightFormat::kF32        ? 32
                      : format == day0::WeightFormat::kFp8Block ? 8
                      : format == day0::WeightFormat::kMxfp4    ? 4
                      : format == day0::WeightFormat::kInt8     ? 8
                      : format == day0::WeightFormat::kInt4     ? 4
                                                                : 16;
  const auto level = static_cast<day0::SimdLevel>(state.range(3));
  const bool rounded = state.range(4) == 1;
  const auto offset = static_cast<size_t>(state.range(5));
  const int64_t tokens = state.range(6);
  const bool nvfp4 = format == day0::WeightFormat::kMxfp4 && state.range(7) == 2;
  const bool int_f32_scales = state.range(7) == 2 && format == day0::WeightFormat::kInt4;
  const bool fine = state.range(7) == 1 || nvfp4 || int_f32_scales;
  if (static_cast<int>(level) > static_cast<int>(day0::detected_simd_level())) {
    state.SkipWithError("SIMD level not available on this CPU");
    return;
  }
  const auto n = static_cast<int64_t>(static_cast<double>(weight_bytes) * 8 / bits / kK);
  auto w = day0::bench::make_weight(format, n, kK, 1, offset, fine,
                                    int_f32_scales ? std::optional(day0::ScaleType::kF32) : std::nullopt);
  if (nvfp4) {  // the same nibbles and scale bytes (0x78: E4M3 256), read as NVFP4
    w.view.fp4_scale_code = day0::Fp4ScaleCode::kE4M3;
    w.view.fp4_global_scale = 1.0f / 2688.0f;
  }
  const auto x = day0::bench::make_activations(tokens * kK);  // [tokens, K]
  std::vector<float> y(static_cast<size_t>(tokens * n));      // [tokens, N]
  day0::BackendOptions opts;
  opts.n_threads = threads;
  opts.simd = level;
  auto be = std::move(day0::make_backend("cpu", opts).value());
  const double bw = read_bandwidth(threads);
  for (auto _ : state) {
    be->matmul({.x = {x.data(), tokens, kK},
                .w = w.view,
                .y = {y.data(), tokens, n},
                .exact = !w.view.is_int() && !rounded});
    benchmark::DoNotOptimize(y.data());
  }
  const double bytes = static_cast<double>(w.view.data_bytes() + w.view.scale_bytes());
  state.SetLabel(std::string(day0::weight_format_name(format)) + " " + day0::simd_level_name(level) +
                 (rounded ? " bf16 x" : "") + (offset != 0 ? " at +" + std::to_string(offset) : "") +
                 (nvfp4  ? " NVFP4"
                  : fine ? (format == day0::WeightFormat::kMxfp4 ? " group 16"
                            : w.view.is_int()                    ? " group 32"
                                                                 : " 32x32")
                         : "") +
                 (int_f32_scales ? " f32 scales" : ""));
  state.SetBytesProcessed(static_cast<int64_t>(bytes * static_cast<double>(state.iterations())));
  state.counters["weight_GB/s"] =
      benchmark::Counter(bytes / 1e9 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["read_bw_GB/s"] = bw;
  state.counters["GFLOP/s"] = benchmark::Counter(
      2e-9 * static_cast<double>(tokens * n * kK) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Gemv)
    ->ArgsProduct({{0, 1, 2, 3, 4, 5, 6}, {1, 2}, {0, 1}, {0, 1, 2}, {0}, {0}, {1}, {0}})
    ->ArgsProduct({{1}, {1, 2}, {0, 1}, {2}, {1}, {0, 24}, {1}, {0}})
    ->ArgsProduct({{1}, {2}, {0}, {2}, {1}, {0}, {2, 4}, {0}})
    ->ArgsProduct({{3, 4}, {1, 2}, {0, 1}, {0, 1, 2}, {0}, {0, 8}, {1}, {1}})
    ->ArgsProduct({{4}, {1, 2}, {0, 1}, {0, 1, 2}, {0}, {0}, {1}, {2}})
    ->ArgsProduct({{5, 6}, {1, 2}, {0, 1}, {0, 1, 2}, {0}, {0}, {1}, {1}})
    ->ArgsProduct({{6}, {1, 2}, {0, 1}, {0, 1, 2}, {0}, {0}, {1}, {2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.5);

}  // namespace

BENCHMARK_MAIN();
