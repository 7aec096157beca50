#include "day0/core/dtype.h"

namespace day0 {

namespace {
struct DTypeInfo {
  DType dtype;
  std::string_view name;
  int bits;
  bool is_float;
};
constexpr DTypeInfo kInfo[] = {
    {DType::kF64, "F64", 64, true},       {DType::kF32, "F32", 32, true},
    {DType::kF16, "F16", 16, true},       {DType::kBF16, "BF16", 16, true},
    {DType::kF8E4M3, "F8_E4M3", 8, true}, {DType::kF8E5M2, "F8_E5M2", 8, true},
    {DType::kF8E8M0, "F8_E8M0", 8, true}, {DType::kI64, "I64", 64, false},
    {DType::kI32, "I32", 32, false},      {DType::kI16, "I16", 16, false},
    {DType::kI8, "I8", 8, false},         {DType::kU64, "U64", 64, false},
    {DType::kU32, "U32", 32, false},      {DType::kU16, "U16", 16, false},
    {DType::kU8, "U8", 8, false},         {DType::kBool, "BOOL", 8, false},
    {DType::kF4, "F4", 4, true},
};
const DTypeInfo& info(DType dtype) {
  return kInfo[static_cast<int>(dtype)];
}
}  // namespace

std::string_view dtype_name(DType dtype) {
  return info(dtype).name;
}
int dtype_bits(DType dtype) {
  return info(dtype).bits;
}
bool dtype_is_float(DType dtype) {
  return info(dtype).is_float;
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& entry : kInfo) {
    if (entry.name == name) return entry.dtype;
  }
  return std::nullopt;
}

}  // namespace day0
