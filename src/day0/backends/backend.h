#pragma once
// The backend interface: one object per execution target (reference oracle, optimised CPU, later a
// GPU). A backend says which (op, weight format) pairs it runs natively with supports() and exposes
// one callable kernel per op (arguments: ops/kernel_args.h).
//
// Two ways to get one:
//  - make_backend(name): the raw backend. Calling a kernel it does not support() is a bug (throws
//    InternalError). Tests and benchmarks use this.
//  - open_backend(name): the raw backend wrapped by the resolver (graph/resolver.h). Every kernel is
//    callable: native if supported, else its decomposition into simpler ops (repeated until every
//    piece is native), else the host backend's kernel with a warning on stderr naming the op (once
//    per op), or an InternalError when BackendOptions::strict_ops is set. The engine uses this one
//    and can ask resolve() / coverage up front to fail early with a Status instead.
//
// Threading: a backend is used by one caller thread at a time; kernels parallelise internally on the
// backend's thread pool. Memory: host backends read and write the views they are given directly; a
// device backend would require views in its memory_space() and may run kernels asynchronously until
// synchronize(). Callers must call synchronize() before reading outputs on the host.
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "day0/backends/cpu/simd_level.h"
#include "day0/backends/thread_pool.h"
#include "day0/core/status.h"
#include "day0/ops/kernel_args.h"
#include "day0/ops/kernel_list.h"
#include "day0/ops/op_key.h"

namespace day0 {

// The arithmetic unit a matmul runs on: the peak `day0 bench` states prefill against.
//   kScalar        no SIMD (the reference backend, the cpu backend's scalar level)
//   kFp32Fma       FP32 FMA on 512-bit registers (float32 activations, or weights widened to float32)
//   kFp32FmaAvx2   the same on 256-bit registers (the cpu backend's avx2 level)
//   kBf16Dot       vdpbf16ps: activations rounded to BF16 against BF16 weights
//   kAmxBf16       TDPBF16PS on AMX tiles
//   kInt8Avx512Vnni  vpdpbusd on 512-bit registers: int8 activations against INT8 / INT4 codes
//   kInt8Dot       int8 dot products without AVX-512 VNNI (AVX-VNNI, maddubs, scalar)
//   kUnknown       the backend does not say
enum class ComputeUnit {
  kUnknown,
  kScalar,
  kFp32Fma,
  kFp32FmaAvx2,
  kBf16Dot,
  kAmxBf16,
  kInt8Avx512Vnni,
  kInt8Dot,
  kAmxInt8
};
// "unknown", "scalar", "FP32 FMA", "FP32 FMA (AVX2)", "BF16 dot", "AMX BF16", "INT8 VNNI", "INT8 dot",
// "AMX INT8"
const char* compute_unit_name(ComputeUnit unit);

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string_view name() const = 0;
  virtual MemorySpace memory_space() const { return MemorySpace::kHost; }
  // The pool kernels run on; null for single-threaded backends (reference).
  virtual ThreadPool* thread_pool() { return nullptr; }
  // Pure: the same answer for the same key for the whole life of the backend, no side effects.
  virtual bool supports(const OpKey& key) const = 0;
  // Waits until every kernel issued so far has finished (no-op on synchronous host backends).
  virtual void synchronize() {}
  // The unit matmul() runs a call of `rows` activation rows on, with weights of `weights` and
  // MatmulArgs::exact `exact`: answered by the same rule that picks the kernel, so that a speed figure
  // is stated against the peak of what really ran.
  virtual ComputeUnit matmul_unit(WeightFormat weights, bool exact, int64_t rows) const {
    (void)weights, (void)exact, (void)rows;
    return ComputeUnit::kUnknown;
  }

  // ---- kernels: one pure virtual per row of the kernel table (ops/kernel_list.h), contracts in
  // ops/kernel_args.h ----
#define D0_PURE_KERNEL(method, Args, op) virtual void method(const Args& a) = 0;
  D0_FOR_EACH_KERNEL(D0_PURE_KERNEL)
#undef D0_PURE_KERNEL
};

struct BackendOptions {
  int n_threads = 0;              // cpu: 0 = hardware concurrency (env DAY0_THREADS overrides)
  std::optional<SimdLevel> simd;  // cpu: force a SIMD level (default: env DAY0_SIMD, else detected)
  // cpu, BF16 weights in prefill GEMMs that may round (not `exact`) on AVX-512 BF16 CPUs: vdpbf16ps
  // (true) or the weights widened to float32 for the FMA tiles (false). Default: env DAY0_BF16_GEMM
  // (dot | fma), else whichever this CPU runs faster (bf16_dot_outruns_fma).
  std::optional<bool> bf16_dot_gemm;
  bool strict_ops = false;  // open_backend: host fallback is an error instead of a warning
  bool quiet = false;       // open_backend: do not print fallback warnings
};

// Names accepted by make_backend / open_backend: "reference", "cpu", "partial" (the cpu backend with
// some kernels deliberately hidden, to exercise decomposition and host fallback).
std::vector<std::string> backend_names();

// The raw backend; NotFound for an unknown name, InvalidArgument for a SIMD level this CPU lacks.
Result<std::unique_ptr<Backend>> make_backend(std::string_view name, const BackendOptions& options = {});

// The raw backend behind the fallback resolver (see above). The host backend is "cpu" (or
// "reference" when name is "reference").
Result<std::unique_ptr<Backend>> open_backend(std::string_view name, const BackendOptions& options = {});

}  // namespace day0
