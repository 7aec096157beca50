#pragma once
// A contiguous per-sequence KV cache (float32). GQA layers keep K [len, n_kv * head_dim] and
// V [len, n_kv * v_dim] after RoPE; MLA layers keep only the latent c_kv [len, kv_lora_rank] (after
// kv_a_layernorm) and the shared rope key k_pe [len, d_rope] (after RoPE), what the weight-absorbed
// form needs. Rows grow by appending; views taken from it are valid until the next append.
#include <cstdint>
#include <vector>

#include "day0/model/model_spec.h"
#include "day0/ops/tensor.h"

namespace day0 {

class KvCache {
 public:
  explicit KvCache(const ModelSpec& spec);

  int64_t length() const { return length_; }  // tokens cached (after commit())
  int64_t n_layers() const { return static_cast<int64_t>(layers_.size()); }
  // Appends `rows` rows to layer `layer`'s two tensors (GQA: k, v; MLA: c_kv, k_pe). Rows become
  // visible to `view_*` immediately; length() grows when commit() is called after the last layer.
  void append(int64_t layer, ConstMatrix first, ConstMatrix second);
  // The cached rows of a layer, including rows appended in the current step.
  ConstMatrix first(int64_t layer) const;
  ConstMatrix second(int64_t layer) const;
  void commit(int64_t new_tokens);
  // Bytes held (float32), for reports.
  uint64_t bytes() const;
  // Width of the two tensors of a layer.
  int64_t first_width() const { return first_width_; }
  int64_t second_width() const { return second_width_; }

 private:
  struct Layer {
    std::vector<float> first, second;
    int64_t rows = 0;
  };
  std::vector<Layer> layers_;
  int64_t first_width_ = 0, second_width_ = 0;
  int64_t length_ = 0;
};

}  // namespace day0
