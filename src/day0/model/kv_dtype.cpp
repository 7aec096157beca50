#include "day0/model/kv_dtype.h"

namespace day0 {

const char* kv_dtype_name(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kF32:
      return "f32";
    case KvDtype::kBF16:
      return "bf16";
    case KvDtype::kFp8E4M3:
      return "fp8";
  }
  return "?";
}

std::optional<KvDtype> parse_kv_dtype(std::string_view name) {
  if (name == "f32" || name == "float32") return KvDtype::kF32;
  if (name == "bf16" || name == "bfloat16") return KvDtype::kBF16;
  if (name == "fp8" || name == "fp8-e4m3" || name == "float8_e4m3fn") return KvDtype::kFp8E4M3;
  return std::nullopt;
}

int kv_dtype_bytes(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kF32:
      return 4;
    case KvDtype::kBF16:
      return 2;
    case KvDtype::kFp8E4M3:
      return 1;
  }
  return 4;
}

}  // namespace day0
