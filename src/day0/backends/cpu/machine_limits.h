#pragma once
// The machine limits every speed figure is stated against: measured memory bandwidth (STREAM-like
// read and triad) and arithmetic peaks (FP32 FMA, BF16 dot, AMX BF16, INT8 VNNI), measured with our
// own loops on a pool.
#include <cstddef>
#include <cstdlib>
#include <vector>

#include "day0/backends/thread_pool.h"

namespace day0 {

// Bytes per array of a bandwidth probe: four times the last-level cache (some hosts have 260 MiB of
// L3), at least 256 MiB and at most 1 GiB.
size_t bandwidth_probe_bytes();

// Memory in 2 MiB pages (MADV_HUGEPAGE), as the weights' mappings ask for: a read bandwidth, or a
// kernel's speed, measured over 4 KiB pages understates what decoding over huge pages reaches. Sizes
// round up to 2 MiB; free with std::free.
void* allocate_huge_pages(size_t bytes);
template <typename T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  explicit HugePageAllocator(const HugePageAllocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(allocate_huge_pages(n * sizeof(T))); }
  void deallocate(T* p, size_t) { std::free(p); }
  bool operator==(const HugePageAllocator&) const { return true; }
};

// Buffers for the bandwidth loops, allocated and touched once (bytes per array, >> last-level cache; the
// triad's second and third arrays only on its first pass).
class BandwidthProbe {
 public:
  explicit BandwidthProbe(size_t bytes_per_array = bandwidth_probe_bytes());
  // One pass; returns bytes moved. Reads `a` (read: with software prefetch where the decode kernels
  // use it, software_prefetch_bytes(), so the roofline is what they can reach) or writes a = b + s c (triad:
  // 3 arrays).
  size_t read_pass(ThreadPool& pool);
  size_t triad_pass(ThreadPool& pool);
  // Best of `passes` passes, in GB/s (1e9 bytes / s).
  double read_gbps(ThreadPool& pool, int passes);
  double triad_gbps(ThreadPool& pool, int passes);

 private:
  std::vector<double, HugePageAllocator<double>> a_, b_, c_;
  volatile double sink_ = 0;
};

// FLOP/s of a register-only FMA loop on every thread of the pool at the best SIMD level (FP32) and
// with vdpbf16ps (BF16 dot; 0 when the CPU lacks AVX-512 BF16).
double measure_fma_peak_gflops(ThreadPool& pool);
// The FP32 FMA loop on 256-bit registers, as the avx2 level's kernels run (0 without AVX2).
double measure_fma_avx2_peak_gflops(ThreadPool& pool);
double measure_bf16_peak_gflops(ThreadPool& pool);
// Whether vdpbf16ps does more FLOP/s than FP32 FMA on one thread of this CPU (false without AVX-512
// BF16). Zen 4 and Zen 5 issue it at the FMA rate (twice the FLOPs); some Intel cores at half, where the
// BF16 GEMM is faster with the weights widened to float32. A few milliseconds, measured once per process.
bool bf16_dot_outruns_fma();
// FLOP/s of a register-only TDPBF16PS loop on AMX tiles (0 where the CPU or the OS has no AMX).
double measure_amx_bf16_peak_gflops(ThreadPool& pool);
// Integer OP/s (a multiply and an add per byte product) of a register-only vpdpbusd loop on 512-bit
// registers, the INT8 / INT4 matmuls' instruction at the avx512 level (0 without AVX-512 VNNI).
double measure_int8_vnni_peak_gops(ThreadPool& pool);
// Integer OP/s of a register-only TDPBSSD loop on full AMX tiles (0 where the CPU or the OS has no
// AMX-INT8): the unit of INT8 / INT4 prompts at the amx level.
double measure_amx_int8_peak_gops(ThreadPool& pool);

}  // namespace day0
