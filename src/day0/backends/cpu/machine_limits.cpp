#include "day0/backends/cpu/machine_limits.h"

#include <algorithm>
#include <chrono>
#include <cstdint>

#include <sys/mman.h>
#include <unistd.h>

#include <new>

#include "day0/backends/cpu/simd_level.h"

namespace day0 {

// Register-only loops in peak_avx512.cpp / peak_avx2.cpp; they return the FLOPs done.
double fma_loop_avx512(int64_t iterations);
double bf16_loop_avx512(int64_t iterations);
double int8_vnni_loop_avx512(int64_t iterations);
double fma_loop_avx2(int64_t iterations);
namespace cpu {
double amx_bf16_loop(int64_t iterations);  // simd/kernels_amx.cpp
double amx_int8_loop(int64_t iterations);  // simd/kernels_amx.cpp
}  // namespace cpu

namespace {
using Clock = std::chrono::steady_clock;

template <typename F>
double timed_gbps(F pass, int passes) {
  double best = 0;
  for (int i = 0; i < passes; ++i) {
    const auto t0 = Clock::now();
    const size_t bytes = pass();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, static_cast<double>(bytes) / s / 1e9);
  }
  return best;
}

template <typename F>
double peak(ThreadPool& pool, F loop) {
  constexpr int64_t kIterations = 20'000'000;
  loop(1000);  // warm up the units
  std::vector<double> flops(static_cast<size_t>(pool.size()));
  const auto t0 = Clock::now();
  pool.run([&](int t) { flops[static_cast<size_t>(t)] = loop(kIterations); });
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  double total = 0;
  for (double f : flops) total += f;
  return total / s / 1e9;
}
}  // namespace

size_t bandwidth_probe_bytes() {
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  const size_t four_l3 = l3 > 0 ? size_t{4} * static_cast<size_t>(l3) : 0;
  return std::clamp(four_l3, size_t{256} << 20, size_t{1} << 30);
}

void* allocate_huge_pages(size_t bytes) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, rounded);
  if (p == nullptr) throw std::bad_alloc();
  ::madvise(p, rounded, MADV_HUGEPAGE);  // a hint: refused where THP is off
  return p;
}

BandwidthProbe::BandwidthProbe(size_t bytes_per_array) : a_(bytes_per_array / sizeof(double), 1.0) {}

size_t BandwidthProbe::read_pass(ThreadPool& pool) {
  std::vector<double> partial(static_cast<size_t>(pool.size()), 0.0);
  const auto n = static_cast<int64_t>(a_.size());
  pool.run([&](int t) {
    const int64_t begin = n * t / pool.size();
    const int64_t end = n * (t + 1) / pool.size();
    const double* a = a_.data();
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = begin;
    // One cache line per step, the line prefetch_doubles ahead prefetched where the decode row dots do.
    const int64_t prefetch_doubles = software_prefetch_bytes() / 8;
    for (; i + 8 <= end; i += 8) {
      if (prefetch_doubles != 0) __builtin_prefetch(a + i + prefetch_doubles);
      s0 += a[i] + a[i + 4];
      s1 += a[i + 1] + a[i + 5];
      s2 += a[i + 2] + a[i + 6];
      s3 += a[i + 3] + a[i + 7];
    }
    for (; i < end; ++i) s0 += a[i];
    partial[static_cast<size_t>(t)] = s0 + s1 + s2 + s3;
  });
  double total = 0;
  for (double p : partial) total += p;
  sink_ = total;
  return a_.size() * sizeof(double);
}

size_t BandwidthProbe::triad_pass(ThreadPool& pool) {
  if (b_.size() != a_.size()) {
    b_.assign(a_.size(), 2.0);
    c_.assign(a_.size(), 0.5);
  }
  const auto n = static_cast<int64_t>(a_.size());
  const double s = 3.0;
  pool.run([&](int t) {
    const int64_t begin = n * t / pool.size();
    const int64_t end = n * (t + 1) / pool.size();
    double* a = a_.data();
    const double* b = b_.data();
    const double* c = c_.data();
    for (int64_t i = begin; i < end; ++i) a[i] = b[i] + s * c[i];
  });
  return 3 * a_.size() * sizeof(double);
}

double BandwidthProbe::read_gbps(ThreadPool& pool, int passes) {
  return timed_gbps([&] { return read_pass(pool); }, passes);
}
double BandwidthProbe::triad_gbps(ThreadPool& pool, int passes) {
  return timed_gbps([&] { return triad_pass(pool); }, passes);
}

double measure_fma_peak_gflops(ThreadPool& pool) {
  switch (detected_simd_level()) {
    case SimdLevel::kAmx:
    case SimdLevel::kAvx512:
      return peak(pool, fma_loop_avx512);
    case SimdLevel::kAvx2:
      return peak(pool, fma_loop_avx2);
    default:
      return 0.0;
  }
}

double measure_fma_avx2_peak_gflops(ThreadPool& pool) {
  return detected_simd_level() >= SimdLevel::kAvx2 ? peak(pool, fma_loop_avx2) : 0.0;
}

double measure_bf16_peak_gflops(ThreadPool& pool) {
  return cpu_has_avx512_bf16() ? peak(pool, bf16_loop_avx512) : 0.0;
}

bool bf16_dot_outruns_fma() {
  static const bool faster = [] {
    if (!cpu_has_avx512_bf16()) return false;
    // Best of three interleaved short runs: the first ones may run at a lower AVX-512 clock.
    constexpr int64_t kIterations = 100'000;
    const auto rate = [](double (*loop)(int64_t)) {
      const auto t0 = Clock::now();
      const double flops = loop(kIterations);
      return flops / std::max(1e-9, std::chrono::duration<double>(Clock::now() - t0).count());
    };
    double fma = 0, dot = 0;
    for (int i = 0; i < 3; ++i) {
      fma = std::max(fma, rate(fma_loop_avx512));
      dot = std::max(dot, rate(bf16_loop_avx512));
    }
    return dot > fma;
  }();
  return faster;
}

double measure_int8_vnni_peak_gops(ThreadPool& pool) {
  return cpu_has_avx512_vnni() && detected_simd_level() >= SimdLevel::kAvx512
             ? peak(pool, int8_vnni_loop_avx512)
             : 0.0;
}

double measure_amx_bf16_peak_gflops(ThreadPool& pool) {
  if (!cpu_has_amx_bf16()) return 0.0;
  // Fewer iterations than the vector loops: one TDPBF16PS is 16 cycles of work, so a pass is ~10 ms, and
  // on a shared 2-core host one pass in two ran at half the rate (a thread's core taken meanwhile):
  // the best of three passes.
  double best = 0;
  for (int pass = 0; pass < 3; ++pass)
    best = std::max(best, peak(pool, [](int64_t n) { return cpu::amx_bf16_loop(n / 16); }));
  return best;
}

double measure_amx_int8_peak_gops(ThreadPool& pool) {
  if (!cpu_has_amx_int8()) return 0.0;
  // As the BF16 tiles: one TDPBSSD is 16 cycles of work; the best of three passes.
  double best = 0;
  for (int pass = 0; pass < 3; ++pass)
    best = std::max(best, peak(pool, [](int64_t n) { return cpu::amx_int8_loop(n / 16); }));
  return best;
}

}  // namespace day0
