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
  // Whether matmuls must be float32-exact (F32 precision) or may round activations (BF16).
  bool exact() const { return !bf16(); }
};

// Rounds every element to bfloat16 (round to nearest even) when the context runs in BF16.
void round_activations(const Context& c, Matrix m);

// RMSNorm as the family computes it (Llama-style casts before the weight in BF16, gpt-oss after).
void rms_norm(const Context& c, ConstMatrix x, std::span<const float> weight, float eps, Matrix y);
// y = x W^T (+ bias), float32, not rounded; exact in F32 precision (MatmulArgs::exact), the backend's
// fast path (BF16-rounded activations allowed) in BF16 precision.
void matmul(const Context& c, ConstMatrix x, const Linear& w, Matrix y);
// y = x W^T (+ bias), rounded.
void linear(const Context& c, ConstMatrix x, const Linear& w, Matrix y);

// RoPE frequencies for sequence s (recomputed for dynamic NTK scaling when it grows past M).
RopeFrequencies rope_for_sequence(const Context& c, int64_t s, int64_t rotary_dim);

void gqa_attention(const Context& c, int64_t layer, const AttentionWeights& w, ConstMatrix h, Matrix out);
void mla_attention(const Context& c, int64_t layer, const AttentionWeights& w, ConstMatrix h, Matrix out);
void dense_mlp(const Context& c, const DenseMlpWeights& w, ConstMatrix h, Matrix out);
void moe(const Context& c, const MoeWeights& w, ConstMatrix h, Matrix out);

}  // namespace day0::blocks
