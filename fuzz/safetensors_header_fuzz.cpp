// libFuzzer target: arbitrary bytes as a whole safetensors file. The parser must never crash, and
// what it accepts must satisfy the invariants readers rely on (tensors tile the data inside the file).
#include <cstddef>
#include <cstdint>
#include <span>

#include "day0/core/checked_math.h"
#include "day0/io/safetensors_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  for (const bool allow_truncated : {false, true}) {
    auto header = day0::parse_safetensors_header(bytes, size, allow_truncated);
    if (!header.is_ok()) continue;
    uint64_t cursor = 0;
    for (const auto& t : header->tensors) {
      if (t.begin != cursor || t.end < t.begin) __builtin_trap();
      const auto bits = day0::checked_mul(t.numel(), static_cast<uint64_t>(day0::dtype_bits(t.dtype)));
      if (!bits || *bits / 8 != t.byte_size()) __builtin_trap();
      if (header->find(t.name) != &t) __builtin_trap();
      cursor = t.end;
    }
    if (!header->truncated && header->data_start + cursor != size) __builtin_trap();
    if (header->data_start > size) __builtin_trap();
  }
  return 0;
}
