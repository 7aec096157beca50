#pragma once
// Drivers of the cpu backend: blocking, threading and the choice between GEMV and GEMM; the inner
// loops come from the SIMD table of the backend's level.
#include "day0/backends/backend.h"
#include "day0/backends/cpu/simd/simd_kernels.h"

namespace day0::cpu {

struct Context {
  const SimdKernels& k;
  ThreadPool& pool;
};

// Decode-sized batches (T <= kGemvMaxRows) stream each weight row once per call through fused
// dequant dot products (bandwidth bound); larger batches run the packed, cache-blocked GEMM. With
// BF16 weights on AVX-512 BF16 CPUs and a call that is not `exact`, the GEMM rounds activations to
// BF16 and uses vdpbf16ps (the precision a BF16 checkpoint is run at by its reference
// implementation); everything else accumulates float32 products of exactly dequantised weights.
inline constexpr int64_t kGemvMaxRows = 4;
void matmul(const Context& c, const MatmulArgs& a);
void embedding(const Context& c, const EmbeddingArgs& a);
void attention(const Context& c, const AttentionArgs& a);
// Absorbed form only; the naive form is run by its decomposition on the cpu kernels.
void mla_absorbed(const Context& c, const MlaArgs& a);
void moe_experts(const Context& c, const MoeExpertsArgs& a);

}  // namespace day0::cpu
