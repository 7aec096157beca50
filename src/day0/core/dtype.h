#pragma once
// Element types as safetensors names them. Sub-byte and block formats (MXFP4) are described by
// their storage dtype (U8) plus a quantization scheme elsewhere; F4 counts 4 bits an element.
#include <cstdint>
#include <optional>
#include <string_view>

namespace day0 {

enum class DType : uint8_t {
  kF64,
  kF32,
  kF16,
  kBF16,
  kF8E4M3,
  kF8E5M2,
  kF8E8M0,
  kI64,
  kI32,
  kI16,
  kI8,
  kU64,
  kU32,
  kU16,
  kU8,
  kBool,
  kF4,
};

inline constexpr DType kAllDTypes[] = {
    DType::kF64,    DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kF8E5M2,
    DType::kF8E8M0, DType::kI64, DType::kI32, DType::kI16,  DType::kI8,     DType::kU64,
    DType::kU32,    DType::kU16, DType::kU8,  DType::kBool, DType::kF4};

// The safetensors spelling: "F32", "BF16", "F8_E4M3", ...
std::string_view dtype_name(DType dtype);
std::optional<DType> parse_dtype(std::string_view name);
// Bits per element (4 for F4, 8 for F8 and U8, ...).
int dtype_bits(DType dtype);
bool dtype_is_float(DType dtype);

}  // namespace day0
