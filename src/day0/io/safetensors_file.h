#pragma once
// One memory-mapped safetensors file with a validated header and zero-copy tensor views.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "day0/core/dtype.h"
#include "day0/core/status.h"
#include "day0/io/mapped_file.h"
#include "day0/io/safetensors_header.h"

namespace day0 {

// A tensor's bytes inside a mapping, as stored (row-major, little-endian). Valid while the file that
// handed it out lives. No alignment is promised beyond what the file gives.
struct TensorView {
  std::string_view name;
  DType dtype = DType::kU8;
  std::span<const int64_t> shape;
  std::span<const uint8_t> data;
  uint64_t numel() const;
};

class SafetensorsFile {
 public:
  // Maps and validates `path`; every error names the file.
  static Result<SafetensorsFile> open(const std::string& path);

  const std::string& path() const { return map_.path(); }
  uint64_t file_size() const { return map_.size(); }
  const SafetensorsHeader& header() const { return header_; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  bool contains(const std::string& name) const { return header_.find(name) != nullptr; }
  // kNotFound naming the file when absent.
  Result<TensorView> tensor(const std::string& name) const;
  // Every tensor in file order.
  std::vector<TensorView> tensors() const;
  const MappedFile& mapping() const { return map_; }

 private:
  TensorView view(const SafetensorsEntry& entry) const;
  MappedFile map_;
  SafetensorsHeader header_;
};

}  // namespace day0
