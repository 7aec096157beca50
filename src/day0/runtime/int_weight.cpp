#include "day0/runtime/int_weight.h"

#include <fmt/format.h>

namespace day0 {

WeightView IntWeight::view() const {
  WeightView v;
  v.format = format;
  v.rows = rows;
  v.cols = cols;
  v.group = group;
  v.data = codes.data();
  v.scales = scales.data();
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
  w.scales = c.scale;
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
