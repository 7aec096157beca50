#pragma once
// The weights of one model bound to the engine's blocks: WeightViews over the checkpoint's bytes (never
// expanded, kernels dequantise on the fly) plus small float32 vectors (norms, biases, sinks) converted
// once. bind_model_weights() fills it from the family's weight table (model/weight_table.h).
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "day0/core/status.h"
#include "day0/model/model_spec.h"
#include "day0/ops/kernel_args.h"
#include "day0/runtime/tensor_source.h"

namespace day0 {

struct Linear {
  WeightView w;                 // [out, in]
  const float* bias = nullptr;  // [out] or null
  bool present() const { return w.data != nullptr; }
};

struct AttentionWeights {
  // GQA.
  Linear q, k, v, o;
  std::span<const float> q_norm, k_norm;  // [head_dim] (Qwen3, GLM-4.5) or empty
  std::span<const float> sinks;           // [n_heads] (gpt-oss) or empty
  // MLA.
  Linear q_a, q_b, kv_a, kv_b;                 // q_a/q_b absent without q_lora_rank (then q is used)
  std::span<const float> q_a_norm, kv_a_norm;  // [q_lora_rank], [kv_lora_rank]
};

struct DenseMlpWeights {
  Linear gate, up, down;
  bool present() const { return down.present(); }
};

struct MoeWeights {
  Linear router;                           // [E, H] (+ bias for gpt-oss)
  std::span<const float> correction_bias;  // [E] (noaux_tc) or empty
  std::vector<ExpertWeights> experts;      // [E]
  GateUpLayout layout = GateUpLayout::kSeparate;
  DenseMlpWeights shared;  // shared expert(s) as one SwiGLU, or absent
  Linear shared_gate;      // Qwen2-MoE sigmoid gate [1, H], or absent
};

struct LayerWeights {
  std::span<const float> input_norm, post_norm;  // [H]
  AttentionWeights attn;
  DenseMlpWeights mlp;  // dense layers
  MoeWeights moe;       // MoE layers
};

// What the binder kept as INT8 / INT4 (the integer kernels' share of the model), for `run` to print.
struct IntProjections {
  int64_t n = 0;
  uint64_t bytes = 0;  // codes + scales + zero points
  WeightFormat format = WeightFormat::kInt8;
  int64_t group = 0;  // of the last one counted (one quantization config per checkpoint)
  bool asymmetric = false;
  void count(const WeightView& w);
  std::string label() const;  // "int4 g128 x int8 activations (210 projections)", "" when none
};

struct ModelWeights {
  WeightView embedding;  // [V, H]
  Linear lm_head;        // [V, H] (the embedding when tied)
  std::span<const float> final_norm;
  std::vector<LayerWeights> layers;

  // Storage for converted data (norms and biases in float32, transposed expert weights); a deque so
  // that spans handed out stay valid as it grows.
  std::deque<std::vector<float>> f32_store;
  std::deque<std::vector<uint8_t>> byte_store;
  std::deque<std::string> name_store;  // the tensor names WeightView::name points into
  // The source whose bytes the WeightViews point into; kept alive with the weights.
  std::shared_ptr<const TensorSource> source;
  IntProjections int_projections;
};

// Binds Hugging Face names to views, checking shapes against the spec; every error names the tensor.
class WeightBinder {
 public:
  WeightBinder(const ModelSpec& spec, ModelWeights& out) : spec_(spec), out_(out) {}

  bool has(const std::string& name) const { return out_.source->contains(name); }
  // A projection [rows, cols]: BF16/F16/F32, F8_E4M3 with its `<name>_scale_inv` sibling, or INT8 /
  // INT4 when the source keeps it quantized (TensorSource::int_weight).
  Result<Linear> linear(const std::string& name, int64_t rows, int64_t cols, bool with_bias = false);
  // A float32 copy of a vector (norm weight, bias, sinks) of n elements, any float dtype.
  Result<std::span<const float>> vector(const std::string& name, int64_t n);
  // Expert e of a stacked tensor [E, rows, cols] (BF16/F32), as a view.
  Result<WeightView> stacked(const std::string& name, int64_t e, int64_t n_experts, int64_t rows,
                             int64_t cols);
  // Expert e of a stacked tensor stored [E, cols, rows] (x @ W orientation, Llama 4): transposed copy.
  Result<WeightView> stacked_transposed(const std::string& name, int64_t e, int64_t n_experts, int64_t rows,
                                        int64_t cols);
  // gpt-oss MXFP4 expert e: `<prefix>_blocks` [E, rows, cols/32, 16] and `<prefix>_scales` [E, rows,
  // cols/32].
  Result<WeightView> mxfp4(const std::string& prefix, int64_t e, int64_t n_experts, int64_t rows,
                           int64_t cols);
  // Row e of a stacked bias [E, n] as float32.
  Result<const float*> stacked_vector(const std::string& name, int64_t e, int64_t n_experts, int64_t n);

  const ModelSpec& spec() const { return spec_; }
  ModelWeights& out() { return out_; }

 private:
  Result<RawTensor> expect(const std::string& name, std::vector<int64_t> shape);
  // Elements [offset, offset + n) of a float tensor as float32 (a converted copy; over a shape-only
  // source a view of its unreadable bytes).
  Result<std::span<const float>> floats(const RawTensor& t, int64_t offset, int64_t n);
  std::string_view keep_name(const std::string& name);  // a copy that lives as long as the weights
  const ModelSpec& spec_;
  ModelWeights& out_;
};

// Binds every tensor of `spec` from `source`, driven by the family's weight table (the tensor
// manifest): each tensor's slot says where it goes; MTP layers are skipped.
Result<std::shared_ptr<ModelWeights>> bind_model_weights(const ModelSpec& spec,
                                                         std::shared_ptr<const TensorSource> source);

}  // namespace day0
