#pragma once
// Shared blocks of the decoder: norm, GQA attention (causal / sliding / chunked / sinks, NoPE and
// temperature tuning), MLA (naive and weight-absorbed), dense SwiGLU, MoE. Each takes the activations
// of all rows of a step and the per-sequence layout, and calls backend kernels only.
#include <cstdint>
#include <span>
#include <vector>

#include "day0/backends/backend.h"
#include "day0/model/model_spec.h"
#include "day0/ops/rope_table.h"
#include "day0/runtime/engine.h"
#include "day0/runtime/model_weights.h"

namespace day0::blocks {

// A float32 buffer and its matrix view.
struct Buffer {
  std::vector<float> data;
  Matrix m;
  Buffer() = default;
  Buffer(int64_t rows, int64_t cols) : data(static_cast<size_t>(rows * cols)), m(data.data(), rows, cols) {}
};

// The layout of one step: sequence s owns rows [row0[s], row0[s] + rows[s]) at positions
// pos0[s] ... (its cache length before the step).
struct StepLayout {
  std::vector<KvCache*> caches;
  std::vector<int64_t> row0, rows, pos0;
  int64_t total_rows = 0;
};

struct Context {
  Backend& be;
  const ModelSpec& spec;
  const EngineOptions& options;
  const StepLayout& layout;
  const RopeFrequencies& rope;  // fixed frequencies (non-dynamic rope)
  bool bf16() const { return options.precision == ActivationPrecision::kBF16; }
};

// Rounds every element to bfloat16 (round to nearest even) when the context runs in BF16.
void round_activations(const Context& c, Matrix m);

// RMSNorm as the family computes it (Llama-style casts before the weight in BF16, gpt-oss after).
void rms_norm(const Context& c, ConstMatrix x, std::span<const float> weight, float eps, Matrix y);
// y = x W^T (+ bias), float32 (exact in F32 precision, see kExactRows), not rounded.
void matmul(const Context& c, ConstMatrix x, const Linear& w, Matrix y);
// y = x W^T (+ bias), rounded.
void linear(const Context& c, ConstMatrix x, const Linear& w, Matrix y);

// The cpu backend runs BF16 weights through a vdpbf16ps GEMM that rounds activations to BF16 when a
// call has more than 4 rows (ops: kGemvMaxRows); up to 4 rows it multiplies exact float32. In F32
// precision the engine therefore feeds BF16-weight matmuls (and MoE experts, which call matmul per
// expert) at most kExactRows rows at a time; BF16 precision takes the fast path, whose rounding is
// what a bf16 reference run does anyway.
inline constexpr int64_t kExactRows = 4;
bool exact_rows_needed(const Context& c, WeightFormat format);

// RoPE frequencies for sequence s (recomputed for dynamic NTK scaling when it grows past M).
RopeFrequencies rope_for_sequence(const Context& c, int64_t s, int64_t rotary_dim);

void gqa_attention(const Context& c, int64_t layer, const AttentionWeights& w, ConstMatrix h, Matrix out);
void mla_attention(const Context& c, int64_t layer, const AttentionWeights& w, ConstMatrix h, Matrix out);
void dense_mlp(const Context& c, const DenseMlpWeights& w, ConstMatrix h, Matrix out);
void moe(const Context& c, const MoeWeights& w, ConstMatrix h, Matrix out);

}  // namespace day0::blocks
