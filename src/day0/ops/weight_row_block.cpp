#include "day0/ops/weight_row_block.h"

#include <fmt/format.h>

#include "day0/core/error.h"

namespace day0 {

WeightView weight_row_block(const WeightView& w, int64_t row0, int64_t rows) {
  D0_CHECK_MSG(row0 >= 0 && rows >= 0 && row0 + rows <= w.rows,
               fmt::format("weight rows [{}, {}) of {}", row0, row0 + rows, w.rows));
  WeightView out = w;
  out.rows = rows;
  const auto* bytes = static_cast<const uint8_t*>(w.data);
  switch (w.format) {
    case WeightFormat::kF32:
      out.data = bytes + row0 * w.cols * 4;
      break;
    case WeightFormat::kBF16:
    case WeightFormat::kF16:
      out.data = bytes + row0 * w.cols * 2;
      break;
    case WeightFormat::kFp8Block: {
      D0_CHECK_MSG(
          row0 % w.block_rows == 0 && (rows % w.block_rows == 0 || row0 + rows == w.rows),
          fmt::format("FP8 weight rows [{}, {}) cut blocks of {} rows", row0, row0 + rows, w.block_rows));
      const int64_t scale_cols = (w.cols + w.block_cols - 1) / w.block_cols;
      out.data = bytes + row0 * w.cols;
      out.scales = static_cast<const float*>(w.scales) + (row0 / w.block_rows) * scale_cols;
      break;
    }
    case WeightFormat::kInt8:
    case WeightFormat::kInt4:
      out.data = bytes + row0 * w.int_row_bytes();
      out.scales =
          static_cast<const uint8_t*>(w.scales) + row0 * w.int_groups() * scale_type_bytes(w.int_scale_type);
      if (w.zeros != nullptr) out.zeros = w.zeros + row0 * w.int_groups();
      break;
    case WeightFormat::kMxfp4: {
      // Scales per row from the view itself (their group is the format's business).
      const uint64_t row_scales = w.rows > 0 ? w.scale_bytes() / static_cast<uint64_t>(w.rows) : 0;
      out.data = bytes + row0 * (w.cols / 2);
      out.scales = static_cast<const uint8_t*>(w.scales) + static_cast<uint64_t>(row0) * row_scales;
      break;
    }
  }
  return out;
}

}  // namespace day0
