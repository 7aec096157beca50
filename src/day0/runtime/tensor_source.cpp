#include "day0/runtime/tensor_source.h"

#include <sys/mman.h>

#include <algorithm>

#include <fmt/format.h>

#include "day0/core/checked_math.h"
#include "day0/model/tensor_manifest.h"

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

namespace day0 {
namespace {

// Names, dtypes and shapes from a manifest; every tensor's bytes are the start of one PROT_NONE
// reservation as long as the largest tensor (address space only: nothing is committed or readable).
class ShapeOnlySource final : public TensorSource {
 public:
  ShapeOnlySource(std::map<std::string, std::pair<DType, std::vector<int64_t>>> tensors, void* region,
                  size_t region_bytes)
      : tensors_(std::move(tensors)), region_(region), region_bytes_(region_bytes) {}
  ~ShapeOnlySource() override {
    if (region_ != nullptr) munmap(region_, region_bytes_);
  }
  ShapeOnlySource(const ShapeOnlySource&) = delete;
  ShapeOnlySource& operator=(const ShapeOnlySource&) = delete;

  bool contains(const std::string& name) const override { return tensors_.count(name) != 0; }
  Result<RawTensor> get(const std::string& name) const override {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) return not_found("tensor " + name + " is not in the model's weight table");
    const auto& [dtype, shape] = it->second;
    const uint64_t bytes = tensor_bytes(dtype, shape);
    return RawTensor{
        name, dtype, shape,
        std::span<const uint8_t>(static_cast<const uint8_t*>(region_), static_cast<size_t>(bytes))};
  }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& [name, _] : tensors_) out.push_back(name);
    return out;
  }
  std::string origin() const override { return "weight table (shapes only)"; }
  bool has_values() const override { return false; }

  static uint64_t tensor_bytes(DType dtype, const std::vector<int64_t>& shape) {
    uint64_t n = 1;
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);  // the manifest checked the products
    return (n * static_cast<uint64_t>(dtype_bits(dtype)) + 7) / 8;
  }

 private:
  std::map<std::string, std::pair<DType, std::vector<int64_t>>> tensors_;
  void* region_;
  size_t region_bytes_;
};

}  // namespace

Result<std::shared_ptr<const TensorSource>> make_shape_only_source(const TensorManifest& manifest) {
  std::map<std::string, std::pair<DType, std::vector<int64_t>>> tensors;
  uint64_t largest = 1;
  for (const TensorSpec& t : manifest.tensors) {
    if (t.mtp) continue;
    largest = std::max(largest, ShapeOnlySource::tensor_bytes(t.dtype, t.shape));
    tensors.emplace(t.name, std::make_pair(t.dtype, t.shape));
  }
  const size_t bytes = static_cast<size_t>(largest);
  void* region = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (region == MAP_FAILED) {
    return resource_exhausted(
        fmt::format("shape-only weights: cannot reserve {} bytes of address space", bytes));
  }
  return std::shared_ptr<const TensorSource>(
      std::make_shared<ShapeOnlySource>(std::move(tensors), region, bytes));
}

}  // namespace day0
