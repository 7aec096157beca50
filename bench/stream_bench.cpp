// STREAM-like memory bandwidth (read-only sum and triad a = b + s c over arrays of 4x the L3) and the
// arithmetic peaks (FP32 FMA, BF16 dot) of this machine: the limits the other benches are stated
// against. Arg: threads.
#include <benchmark/benchmark.h>

#include "day0/backends/cpu/machine_limits.h"

namespace {

day0::BandwidthProbe& probe() {
  static day0::BandwidthProbe p;
  return p;
}

void BM_ReadBandwidth(benchmark::State& state) {
  day0::ThreadPool pool(static_cast<int>(state.range(0)));
  day0::BandwidthProbe& p = probe();  // allocate and touch the arrays outside the timed loop
  size_t bytes = 0;
  for (auto _ : state) bytes += p.read_pass(pool);
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
}
BENCHMARK(BM_ReadBandwidth)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_TriadBandwidth(benchmark::State& state) {
  day0::ThreadPool pool(static_cast<int>(state.range(0)));
  day0::BandwidthProbe& p = probe();
  size_t bytes = 0;
  for (auto _ : state) bytes += p.triad_pass(pool);
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
}
BENCHMARK(BM_TriadBandwidth)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_Fp32FmaPeak(benchmark::State& state) {
  day0::ThreadPool pool(static_cast<int>(state.range(0)));
  double gflops = 0;
  for (auto _ : state) gflops = day0::measure_fma_peak_gflops(pool);
  state.counters["GFLOP/s"] = gflops;
}
BENCHMARK(BM_Fp32FmaPeak)->Arg(1)->Arg(2)->Iterations(3)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_Bf16DotPeak(benchmark::State& state) {
  day0::ThreadPool pool(static_cast<int>(state.range(0)));
  double gflops = 0;
  for (auto _ : state) gflops = day0::measure_bf16_peak_gflops(pool);
  state.counters["GFLOP/s"] = gflops;
}
BENCHMARK(BM_Bf16DotPeak)->Arg(1)->Arg(2)->Iterations(3)->UseRealTime()->Unit(benchmark::kMillisecond);

// TDPBF16PS on AMX tiles (0 where the CPU or the OS has none).
void BM_AmxBf16Peak(benchmark::State& state) {
  day0::ThreadPool pool(static_cast<int>(state.range(0)));
  double gflops = 0;
  for (auto _ : state) gflops = day0::measure_amx_bf16_peak_gflops(pool);
  state.counters["GFLOP/s"] = gflops;
}
BENCHMARK(BM_AmxBf16Peak)->Arg(1)->Arg(2)->Iterations(3)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
