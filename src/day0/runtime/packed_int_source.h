#pragma once
// Loading an integer-packed checkpoint by dequantizing at load: a TensorSource over the packed one
// that shows each packed group as the plain `<m>.weight` [out, in] it encodes and hides the packed
// tensors:
//  - compressed-tensors: `weight_packed` / `weight_scale` / [`weight_zero_point`] / `weight_shape`, in
//    the scale's dtype (what compressed-tensors' decompression gives);
//  - GPTQ: `qweight` [in/f, out] / `qzeros` [groups, out/f] / `scales` [groups, out] / `g_idx` [in], and
//    AWQ GEMM: `qweight` [in, out/f] / `qzeros` / `scales` (nibble order 0 2 4 6 1 3 5 7), both as
//    exact float32 (W[o, i] = (q - z) * s; GPTQ v1 zero points are stored minus one).
// Every other tensor passes through untouched (zero copy). A weight is dequantized on its first get() and
// kept for the source's lifetime, so the engine holds the model at its unquantized size.
// With keep_int, int_weight() instead hands out each projection repacked as INT8 / INT4
// (runtime/int_weight.h) for the integer kernels, straight from its codes; a projection whose layout
// cannot be kept (GPTQ act-order, a group size that is not a multiple of 32) stays dequantized.
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "day0/core/status.h"
#include "day0/model/model_spec.h"
#include "day0/runtime/int_weight.h"
#include "day0/runtime/tensor_source.h"

namespace day0 {

// The dequantized [rows, cols] weight of module `stem` as float32, every size checked against
// `packed` and the tensors' shapes (errors name the tensor, expected vs found). `dtype` receives the
// dtype of the scale (the weight's original dtype).
Result<std::vector<float>> dequantize_packed_weight(const TensorSource& source, const std::string& stem,
                                                    const PackedIntSpec& packed, std::vector<int64_t>& shape,
                                                    DType& dtype);

// The integer codes of module `stem` (both layouts), every size checked as above; `scale_dtype`
// receives the dtype of the scale (F32 for GPTQ / AWQ).
Result<IntCodes> packed_int_codes(const TensorSource& source, const std::string& stem,
                                  const PackedIntSpec& packed, DType& scale_dtype);

class PackedIntSource : public TensorSource {
 public:
  // exact_f32: the dequantized projections as float32 (q - zp) * scale, exactly; otherwise rounded to
  // the scale's dtype (half the memory; what a BF16 run computes with anyway). keep_int: see above.
  PackedIntSource(std::shared_ptr<const TensorSource> packed_source, PackedIntSpec packed,
                  bool exact_f32 = false, bool keep_int = false);

  bool contains(const std::string& name) const override;
  Result<RawTensor> get(const std::string& name) const override;
  std::vector<std::string> names() const override;
  std::string origin() const override { return inner_->origin(); }
  Result<const IntWeight*> int_weight(const std::string& name) const override;

 private:
  std::shared_ptr<const TensorSource> inner_;
  PackedIntSpec packed_;
  bool exact_f32_ = false;
  bool keep_int_ = false;
  mutable std::map<std::string, std::unique_ptr<IntWeight>> int_cache_;  // null: layout not kept
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
                                                    const ModelSpec& spec, bool exact_f32 = false,
                                                    bool keep_int = false);
ModelSpec unpacked_spec(const ModelSpec& spec);

}  // namespace day0
