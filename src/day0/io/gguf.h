#pragma once
// A GGUF file (llama.cpp's single-file checkpoint, versions 2 and 3), read in place from a memory map.
//
// Layout: "GGUF", u32 version, u64 tensor count, u64 metadata count; the metadata (key string, u32 value
// type, value; arrays are u32 element type + u64 count + elements; strings are u64 length + bytes); the
// tensor infos (name, u32 n_dims, u64 dims[n_dims] fastest-varying first, u32 ggml type, u64 offset into
// the data section); then the data section, aligned to general.alignment (default 32).
//
// Everything read from the file is checked before use: counts against the bytes left, string and array
// lengths, dimensions (positive, at most 4, products without overflow, rows whole blocks), tensor offsets
// (aligned, inside the file) and overlaps. Errors name the file and the field. Values and tensor data are
// views into the map: valid while the GgufFile lives. Read-only and thread-safe after open.
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "day0/core/status.h"
#include "day0/io/mapped_file.h"

namespace day0::gguf {

enum class ValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
const char* value_type_name(ValueType t);

// One metadata value. Scalars are held decoded; arrays keep their element type, count and (for scalar
// elements) the raw little-endian bytes, (for strings) views of each string. Nested arrays are
// validated and counted but their elements are not kept.
struct Value {
  ValueType type = ValueType::kU8;
  uint64_t u64 = 0;  // unsigned integers and bool
  int64_t i64 = 0;   // signed integers
  double f64 = 0;    // floats
  std::string_view str;
  ValueType elem_type = ValueType::kU8;  // arrays
  uint64_t count = 0;
  std::span<const uint8_t> raw;           // scalar-element arrays: count * element size bytes
  std::vector<std::string_view> strings;  // string arrays

  bool is_integer() const;
  bool is_float() const { return type == ValueType::kF32 || type == ValueType::kF64; }
  // Integer element i of a scalar integer array (D0_CHECK on the type and index).
  int64_t int_at(uint64_t i) const;
  double float_at(uint64_t i) const;
};

// ggml tensor types by their number in the file. Only those we can dequantise are named here; others
// are still recognised by name in messages.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
};

struct GgmlTypeInfo {
  const char* name = "";
  int64_t block_elems = 0;  // elements per block (1 for plain floats)
  int64_t block_bytes = 0;  // bytes per block
  bool dequantizable = false;
};
// Known types (including those we cannot dequantise); nullopt for numbers ggml never assigned.
std::optional<GgmlTypeInfo> ggml_type_info(uint32_t type);

struct TensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // ggml order: dims[0] varies fastest (the Hugging Face shape reversed)
  uint32_t type = 0;
  uint64_t offset = 0;  // absolute file offset of the first byte
  uint64_t bytes = 0;
  uint64_t n_elements = 0;
  std::span<const uint8_t> data;  // view into the map
  // [dims[n-1], ..., dims[0]]: the row-major shape a Hugging Face checkpoint gives the same tensor.
  std::vector<int64_t> hf_shape() const;
};

class GgufFile {
 public:
  // Maps and parses `path`.
  static Result<GgufFile> open(const std::string& path);
  // Parses bytes held by the caller (they must outlive the result); `name` appears in errors. Used by
  // the fuzz target and tests.
  static Result<GgufFile> parse(std::span<const uint8_t> bytes, const std::string& name);

  GgufFile() = default;
  GgufFile(GgufFile&&) noexcept = default;
  GgufFile& operator=(GgufFile&&) noexcept = default;

  const std::string& name() const { return name_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  const std::map<std::string, Value, std::less<>>& metadata() const { return metadata_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }

  const Value* find(std::string_view key) const;
  const TensorInfo* find_tensor(std::string_view name) const;
  // Typed lookups: kNotFound when absent (for the required forms), kInvalidArgument on a wrong type.
  Result<std::string> get_string(std::string_view key) const;
  Result<int64_t> get_int(std::string_view key) const;
  Result<double> get_float(std::string_view key) const;  // integers accepted too
  std::optional<int64_t> optional_int(std::string_view key) const;
  std::optional<double> optional_float(std::string_view key) const;
  std::optional<bool> optional_bool(std::string_view key) const;

 private:
  std::string name_;
  MappedFile map_;  // empty when parsed from caller-held bytes
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::map<std::string, Value, std::less<>> metadata_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Dequantises `n` elements (a multiple of the type's block size) from `src` into `out`.
// kUnsupported for a type we cannot dequantise; kOutOfRange when the sizes do not match.
Status dequantize(uint32_t type, std::span<const uint8_t> src, std::span<float> out);
// The whole tensor as F32, in ggml element order (= the Hugging Face row-major order).
Result<std::vector<float>> dequantize_tensor(const TensorInfo& t);

}  // namespace day0::gguf
