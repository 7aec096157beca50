#include "day0/runtime/tensor_source.h"

#include "day0/core/checked_math.h"

namespace day0 {

int64_t RawTensor::numel() const {
  const auto n = checked_product(shape);
  return n ? static_cast<int64_t>(*n) : -1;
}

void MemoryTensorSource::put(std::string name, DType dtype, std::vector<int64_t> shape,
                             std::vector<uint8_t> bytes) {
  tensors_[std::move(name)] = Stored{dtype, std::move(shape), std::move(bytes)};
}

Result<std::unique_ptr<MemoryTensorSource>> MemoryTensorSource::copy_of(const TensorSource& other) {
  auto out = std::make_unique<MemoryTensorSource>();
  for (const auto& name : other.names()) {
    D0_ASSIGN_OR_RETURN(RawTensor t, other.get(name));
    out->put(name, t.dtype, t.shape, std::vector<uint8_t>(t.data.begin(), t.data.end()));
  }
  return out;
}

Result<std::span<uint8_t>> MemoryTensorSource::mutable_bytes(const std::string& name) {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return not_found("tensor " + name + " is not in the in-memory source");
  return std::span<uint8_t>(it->second.bytes);
}

Result<RawTensor> MemoryTensorSource::get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return not_found("tensor " + name + " is not in the in-memory source");
  return RawTensor{name, it->second.dtype, it->second.shape, it->second.bytes};
}

std::vector<std::string> MemoryTensorSource::names() const {
  std::vector<std::string> out;
  for (const auto& [name, _] : tensors_) out.push_back(name);
  return out;
}

}  // namespace day0
