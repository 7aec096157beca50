#pragma once
// Loading a compressed-tensors pack-quantized checkpoint by dequantizing at load: a TensorSource over
// the packed one that shows each `<m>.weight_packed` / `weight_scale` / [`weight_zero_point`] /
// `weight_shape` group as the plain `<m>.weight` it encodes, in the scale's dtype (what
// compressed-tensors' decompression gives), and hides the four packed tensors. Every other tensor
// passes through untouched (zero copy). A weight is dequantized on its first get() and kept for the
// source's lifetime, so the engine holds the model at its unquantized size.
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "day0/core/status.h"
#include "day0/model/model_spec.h"
#include "day0/runtime/tensor_source.h"

namespace day0 {

// The dequantized [rows, cols] weight of module `stem` as float32, every size checked against
// `packed` and the tensors' shapes (errors name the tensor, expected vs found). `dtype` receives the
// dtype of the scale (the weight's original dtype).
Result<std::vector<float>> dequantize_packed_weight(const TensorSource& source, const std::string& stem,
                                                    const PackedIntSpec& packed, std::vector<int64_t>& shape,
                                                    DType& dtype);

class PackedIntSource : public TensorSource {
 public:
  PackedIntSource(std::shared_ptr<const TensorSource> packed_source, PackedIntSpec packed);

  bool contains(const std::string& name) const override;
  Result<RawTensor> get(const std::string& name) const override;
  std::vector<std::string> names() const override;
  std::string origin() const override { return inner_->origin(); }

 private:
  std::shared_ptr<const TensorSource> inner_;
  PackedIntSpec packed_;
  std::map<std::string, std::string> weights_;  // "<m>.weight" -> stem "<m>", for every packed group
  mutable std::mutex mutex_;
  struct Dequantized {
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  mutable std::map<std::string, Dequantized> cache_;
};

// `source` wrapped in a PackedIntSource when `spec` is pack-quantized, and the spec the binder and
// engine then see (the projections in the activation dtype); otherwise both unchanged.
std::shared_ptr<const TensorSource> unpacked_source(std::shared_ptr<const TensorSource> source,
                                                    const ModelSpec& spec);
ModelSpec unpacked_spec(const ModelSpec& spec);

}  // namespace day0
