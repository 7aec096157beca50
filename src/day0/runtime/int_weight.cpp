#include "day0/runtime/int_weight.h"

#include <cstring>

#include <fmt/format.h>

#include "day0/core/numeric.h"

namespace day0 {

namespace {

// Whether every scale is a value of type t exactly (NaN included: its bits must survive the trip).
bool all_exact(const std::vector<float>& scale, ScaleType t) {
  for (const float s : scale) {
    const float back = t == ScaleType::kBF16 ? bf16_to_f32(f32_to_bf16(s)) : f16_to_f32(f32_to_f16(s));
    if (f32_to_bits(back) != f32_to_bits(s)) return false;
  }
  return true;
}

// INT4 scales in the narrowest type that holds each exactly: BF16 (a shift to widen), F16, or float32.
// Checkpoint scales come as BF16 / F16 tensors (read into float32 by the loaders), so the kernels then
// multiply by the checkpoint's values while a decode streams 18 bytes per 32 weights instead of 20.
// INT8 keeps float32: its AVX2 row dots are bound by their instructions, not by memory, and widening a
// 16-bit scale per block cost SmolLM2's INT8 decode about a tenth (Zen 3) where it would save 2 bytes of 36.
void pack_scales(const std::vector<float>& scale, IntWeight& w) {
  const bool narrow = w.format == WeightFormat::kInt4;
  w.scale_type = narrow && all_exact(scale, ScaleType::kBF16)  ? ScaleType::kBF16
                 : narrow && all_exact(scale, ScaleType::kF16) ? ScaleType::kF16
                                                               : ScaleType::kF32;
  w.scales.resize(scale.size() * static_cast<size_t>(scale_type_bytes(w.scale_type)));
  if (w.scale_type == ScaleType::kF32) {
    std::memcpy(w.scales.data(), scale.data(), w.scales.size());
    return;
  }
  for (size_t i = 0; i < scale.size(); ++i) {
    const uint16_t bits = w.scale_type == ScaleType::kBF16 ? f32_to_bf16(scale[i]) : f32_to_f16(scale[i]);
    std::memcpy(w.scales.data() + 2 * i, &bits, 2);
  }
}

}  // namespace

WeightView IntWeight::view() const {
  WeightView v;
  v.format = format;
  v.rows = rows;
  v.cols = cols;
  v.group = group;
  v.data = codes.data();
  v.scales = scales.data();
  v.int_scale_type = scale_type;
  v.zeros = zeros.empty() ? nullptr : zeros.data();
  return v;
}

Result<IntWeight> repack_int_weight(const IntCodes& c) {
  if (c.bits != 4 && c.bits != 8) return unsupported(fmt::format("{}-bit integer weights", c.bits));
  const int64_t group = c.groups <= 1 ? c.cols : c.cols / c.groups;
  if (c.groups > 1 && (c.cols % c.groups != 0 || group % kIntBlock != 0)) {
    return unsupported(fmt::format("group size {} is not a multiple of {} columns", group, kIntBlock));
  }
  for (int64_t k = 0; k < c.cols; ++k) {
    if (c.group_of[static_cast<size_t>(k)] != (c.groups <= 1 ? 0 : k / group)) {
      return unsupported(fmt::format("column {} is in group {}, not {} (act-order g_idx)", k,
                                     c.group_of[static_cast<size_t>(k)], k / group));
    }
  }
  IntWeight w;
  w.format = c.bits == 8 ? WeightFormat::kInt8 : WeightFormat::kInt4;
  w.rows = c.rows;
  w.cols = c.cols;
  w.group = group;
  const int64_t row_bytes = w.view().int_row_bytes();
  w.codes.assign(static_cast<size_t>(c.rows * row_bytes), 0);
  // INT8 codes are signed and INT4 codes unsigned nibbles: shift the checkpoint's domain to ours and
  // its zero points with it, so that c - z is unchanged.
  const int shift = c.bits == 8 ? (c.is_signed ? 0 : -128) : (c.is_signed ? 8 : 0);
  const float default_zero = c.bits == 8 ? 0.0f : 8.0f;
  for (int64_t r = 0; r < c.rows; ++r) {
    uint8_t* row = w.codes.data() + r * row_bytes;
    const int16_t* q = c.q.data() + r * c.cols;
    for (int64_t k = 0; k < c.cols; ++k) {
      const int v = q[k] + shift;
      if (c.bits == 8) {
        row[k] = static_cast<uint8_t>(static_cast<int8_t>(v));
      } else {
        uint8_t& byte = row[(k / kIntBlock) * 16 + k % 16];
        byte |= static_cast<uint8_t>(k % kIntBlock < 16 ? (v & 0x0f) : ((v & 0x0f) << 4));
      }
    }
  }
  pack_scales(c.scale, w);
  bool default_zeros = true;
  std::vector<float> zeros(c.zero.size());
  for (size_t i = 0; i < zeros.size(); ++i) {
    zeros[i] = c.zero[i] + static_cast<float>(shift);
    default_zeros = default_zeros && zeros[i] == default_zero;
  }
  if (!default_zeros) w.zeros = std::move(zeros);
  return w;
}

}  // namespace day0
