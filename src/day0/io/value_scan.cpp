#include "day0/io/value_scan.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "day0/core/numeric.h"

namespace day0 {
namespace {

size_t element_bytes(DType d) {
  switch (d) {
    case DType::kF64:
      return 8;
    case DType::kF32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kF8E4M3:
    case DType::kF8E5M2:
    case DType::kF8E8M0:
      return 1;
    default:
      return 0;
  }
}

// Magnitude bits and "non-finite" thresholds of each format: |x| grows with the bits below the sign,
// so the scan compares integers and converts only the maximum.
template <typename Bits>
struct Format {
  Bits magnitude_mask;
  Bits non_finite;  // magnitude bits >= this: Inf or NaN
  Bits inf;         // exactly this: Inf (E4M3 has none: set above every pattern)
};

template <typename Bits>
void scan_bits(const uint8_t* p, size_t n, Format<Bits> f, TensorValueStats& s, uint32_t& max_bits) {
  Bits local_max = static_cast<Bits>(max_bits);
  for (size_t i = 0; i < n; ++i) {
    Bits b;
    std::memcpy(&b, p + i * sizeof(Bits), sizeof(Bits));
    const Bits m = static_cast<Bits>(b & f.magnitude_mask);
    if (m >= f.non_finite) {
      if (m == f.inf) {
        ++s.n_inf;
      } else {
        ++s.n_nan;
      }
      if (s.first_bad == UINT64_MAX) s.first_bad = s.n_values + i;
    } else if (m > local_max) {
      local_max = m;
    }
  }
  max_bits = local_max;
  s.n_values += n;
}

double magnitude_of(DType d, uint32_t bits) {
  switch (d) {
    case DType::kF32: {
      float v;
      std::memcpy(&v, &bits, 4);
      return v;
    }
    case DType::kF16:
      return f16_to_f32(static_cast<uint16_t>(bits));
    case DType::kBF16:
      return bf16_to_f32(static_cast<uint16_t>(bits));
    case DType::kF8E4M3:
      return f8e4m3_to_f32(static_cast<uint8_t>(bits));
    case DType::kF8E5M2:
      return f8e5m2_to_f32(static_cast<uint8_t>(bits));
    case DType::kF8E8M0:
      return e8m0_to_f32(static_cast<uint8_t>(bits));
    default:
      return 0;
  }
}

}  // namespace

bool value_scan_supports(DType dtype) {
  return element_bytes(dtype) > 0;
}

ShardValueScanner::ShardValueScanner(const SafetensorsHeader& header) {
  for (const auto& e : header.tensors) {
    if (!value_scan_supports(e.dtype) || e.byte_size() == 0) continue;
    Tracked t;
    t.stats.name = e.name;
    t.stats.dtype = e.dtype;
    t.file_begin = header.data_start + e.begin;
    t.file_end = header.data_start + e.end;
    tensors_.push_back(std::move(t));
  }
  std::sort(tensors_.begin(), tensors_.end(),
            [](const Tracked& a, const Tracked& b) { return a.file_begin < b.file_begin; });
}

void ShardValueScanner::consume(uint64_t offset, std::span<const uint8_t> bytes) {
  uint64_t pos = offset;
  const uint8_t* p = bytes.data();
  const uint64_t end = offset + bytes.size();
  while (pos < end && current_ < tensors_.size()) {
    Tracked& t = tensors_[current_];
    if (pos >= t.file_end) {
      ++current_;
      carry_n_ = 0;
      continue;
    }
    if (pos < t.file_begin) {
      const uint64_t skip = std::min(end, t.file_begin) - pos;
      p += skip;
      pos += skip;
      continue;
    }
    const uint64_t take = std::min(end, t.file_end) - pos;
    feed(t, p, static_cast<size_t>(take));
    p += take;
    pos += take;
  }
}

void ShardValueScanner::feed(Tracked& t, const uint8_t* p, size_t n) {
  const size_t es = element_bytes(t.stats.dtype);
  if (carry_n_ > 0) {  // an element split across two chunks
    const size_t need = std::min(es - carry_n_, n);
    std::memcpy(carry_ + carry_n_, p, need);
    carry_n_ += need;
    p += need;
    n -= need;
    if (carry_n_ < es) return;
    decode(t, carry_, 1);
    carry_n_ = 0;
  }
  const size_t whole = n / es;
  decode(t, p, whole);
  carry_n_ = n - whole * es;
  std::memcpy(carry_, p + whole * es, carry_n_);
}

void ShardValueScanner::decode(Tracked& t, const uint8_t* p, size_t n_elements) {
  TensorValueStats& s = t.stats;
  switch (s.dtype) {
    case DType::kF32:
      scan_bits<uint32_t>(p, n_elements, {0x7fffffffu, 0x7f800000u, 0x7f800000u}, s, t.max_bits);
      return;
    case DType::kF16:
      scan_bits<uint16_t>(p, n_elements, {0x7fff, 0x7c00, 0x7c00}, s, t.max_bits);
      return;
    case DType::kBF16:
      scan_bits<uint16_t>(p, n_elements, {0x7fff, 0x7f80, 0x7f80}, s, t.max_bits);
      return;
    case DType::kF8E4M3:  // no Inf; S.1111.111 is NaN
      scan_bits<uint8_t>(p, n_elements, {0x7f, 0x7f, 0xff}, s, t.max_bits);
      return;
    case DType::kF8E5M2:
      scan_bits<uint8_t>(p, n_elements, {0x7f, 0x7c, 0x7c}, s, t.max_bits);
      return;
    case DType::kF8E8M0:  // scale exponents (ue8m0): no sign, no Inf (0xfe is never reached); 0xff is NaN
      scan_bits<uint8_t>(p, n_elements, {0xff, 0xff, 0xfe}, s, t.max_bits);
      return;
    case DType::kF64:
      for (size_t i = 0; i < n_elements; ++i) {
        double v;
        std::memcpy(&v, p + 8 * i, 8);
        if (std::isnan(v) || std::isinf(v)) {
          ++(std::isnan(v) ? s.n_nan : s.n_inf);
          if (s.first_bad == UINT64_MAX) s.first_bad = s.n_values + i;
        } else {
          s.max_abs = std::max(s.max_abs, std::fabs(v));
        }
      }
      s.n_values += n_elements;
      return;
    default:
      return;
  }
}

std::vector<TensorValueStats> ShardValueScanner::stats() const {
  std::vector<TensorValueStats> out;
  out.reserve(tensors_.size());
  for (const Tracked& t : tensors_) {
    TensorValueStats s = t.stats;
    if (s.dtype != DType::kF64) s.max_abs = std::fabs(magnitude_of(s.dtype, t.max_bits));
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace day0
