#pragma once
// The `cpu` backend: SIMD kernels chosen at run time (options.simd, env DAY0_SIMD, or the detected
// level), its own thread pool, cache-blocked GEMM for prefill, bandwidth-bound GEMV for decode and
// fused dequantisation of BF16/F16/FP8-block/MXFP4 weights. Supports every op and weight format.
// `hidden` names ops whose kernels are deliberately hidden (supports() says no): the `partial`
// backend used to prove decomposition and host fallback.
#include <memory>
#include <set>
#include <string>
#include <tuple>

#include "day0/backends/backend.h"

namespace day0 {

struct HiddenKernel {
  std::string op;
  bool all_formats = true;
  WeightFormat format = WeightFormat::kF32;  // when !all_formats
  bool operator<(const HiddenKernel& o) const {
    return std::tie(op, all_formats, format) < std::tie(o.op, o.all_formats, o.format);
  }
};

Result<std::unique_ptr<Backend>> make_cpu_backend(const BackendOptions& options, std::string name = "cpu",
                                                  std::set<HiddenKernel> hidden = {});

// What the `partial` backend hides: rms_norm, swiglu, swiglu_clamped, moe_experts, mla_attention,
// hc_collapse, hc_expand (decomposable), moe_router and sample (host fallback), matmul and embedding on MXFP4
// weights.
std::set<HiddenKernel> partial_backend_hidden_kernels();

}  // namespace day0
