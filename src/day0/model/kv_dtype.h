#pragma once
// The element type a KV cache stores keys and values in. BF16 is the default (what the planner and
// `inspect` assume); F32 keeps the engine's float32 values exactly; FP8 E4M3 (no scale, saturating at
// +-448) halves BF16 again.
#include <optional>
#include <string_view>

namespace day0 {

enum class KvDtype { kF32, kBF16, kFp8E4M3 };

const char* kv_dtype_name(KvDtype dtype);                      // "f32", "bf16", "fp8"
std::optional<KvDtype> parse_kv_dtype(std::string_view name);  // also "fp8-e4m3", "float8_e4m3fn"
int kv_dtype_bytes(KvDtype dtype);                             // 4, 2, 1

}  // namespace day0
