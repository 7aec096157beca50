#pragma once
// Overflow-checked size arithmetic for every size that comes from a file or a request.
#include <cstdint>
#include <optional>
#include <span>

namespace day0 {

inline std::optional<uint64_t> checked_add(uint64_t a, uint64_t b) {
  uint64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

inline std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
  uint64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

inline std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

inline std::optional<int64_t> checked_add(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// Product of non-negative dimensions; nullopt on overflow or a negative dimension.
inline std::optional<uint64_t> checked_product(std::span<const int64_t> dims) {
  uint64_t total = 1;
  for (int64_t d : dims) {
    if (d < 0) return std::nullopt;
    auto next = checked_mul(total, static_cast<uint64_t>(d));
    if (!next) return std::nullopt;
    total = *next;
  }
  return total;
}

}  // namespace day0
