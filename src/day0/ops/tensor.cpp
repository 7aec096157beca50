#include "day0/ops/tensor.h"

#include "day0/core/error.h"
#include "day0/core/numeric.h"

namespace day0 {

const char* weight_format_name(WeightFormat format) {
  switch (format) {
    case WeightFormat::kF32:
      return "F32";
    case WeightFormat::kBF16:
      return "BF16";
    case WeightFormat::kF16:
      return "F16";
    case WeightFormat::kFp8Block:
      return "FP8-block";
    case WeightFormat::kMxfp4:
      return "MXFP4";
    case WeightFormat::kInt8:
      return "INT8";
    case WeightFormat::kInt4:
      return "INT4";
  }
  return "?";
}

uint64_t WeightView::data_bytes() const {
  const auto n = static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols);
  switch (format) {
    case WeightFormat::kF32:
      return n * 4;
    case WeightFormat::kBF16:
    case WeightFormat::kF16:
      return n * 2;
    case WeightFormat::kFp8Block:
      return n;
    case WeightFormat::kMxfp4:
      return n / 2;
    case WeightFormat::kInt8:
    case WeightFormat::kInt4:
      return static_cast<uint64_t>(rows) * static_cast<uint64_t>(int_row_bytes());
  }
  return 0;
}

int64_t WeightView::int_row_bytes() const {
  const int64_t padded = (cols + kIntBlock - 1) / kIntBlock * kIntBlock;
  return format == WeightFormat::kInt4 ? padded / 2 : padded;
}

uint64_t WeightView::scale_bytes() const {
  switch (format) {
    case WeightFormat::kFp8Block: {
      if (block_rows <= 0 || block_cols <= 0) return 0;
      const auto br = static_cast<uint64_t>((rows + block_rows - 1) / block_rows);
      const auto bc = static_cast<uint64_t>((cols + block_cols - 1) / block_cols);
      return br * bc * 4;
    }
    case WeightFormat::kMxfp4:
      return static_cast<uint64_t>(rows) * static_cast<uint64_t>(fp4_row_scales());
    case WeightFormat::kInt8:
    case WeightFormat::kInt4:
      return static_cast<uint64_t>(rows) * static_cast<uint64_t>(int_groups()) *
             static_cast<uint64_t>(scale_type_bytes(int_scale_type) + (zeros != nullptr ? 4 : 0));
    default:
      return 0;
  }
}

bool WeightView::valid() const {
  if (rows < 0 || cols < 0) return false;
  if (rows > 0 && cols > 0 && data == nullptr) return false;
  switch (format) {
    case WeightFormat::kFp8Block:
      return block_rows > 0 && block_cols > 0 && (rows == 0 || cols == 0 || scales != nullptr);
    case WeightFormat::kMxfp4:
      return cols % 32 == 0 && (fp4_group() == 16 || fp4_group() == 32) && (!nvfp4() || fp4_group() == 16) &&
             (rows == 0 || cols == 0 || scales != nullptr);
    case WeightFormat::kInt8:
    case WeightFormat::kInt4:
      return group > 0 && (group % kIntBlock == 0 || group >= cols) &&
             (rows == 0 || cols == 0 || scales != nullptr);
    default:
      return true;
  }
}

float WeightView::at(int64_t i, int64_t j) const {
  D0_CHECK(i >= 0 && i < rows && j >= 0 && j < cols);
  const int64_t idx = i * cols + j;
  switch (format) {
    case WeightFormat::kF32:
      return static_cast<const float*>(data)[idx];
    case WeightFormat::kBF16:
      return bf16_to_f32(static_cast<const uint16_t*>(data)[idx]);
    case WeightFormat::kF16:
      return f16_to_f32(static_cast<const uint16_t*>(data)[idx]);
    case WeightFormat::kFp8Block: {
      const int64_t scale_cols = (cols + block_cols - 1) / block_cols;
      const float s = static_cast<const float*>(scales)[(i / block_rows) * scale_cols + j / block_cols];
      return f8e4m3_to_f32(static_cast<const uint8_t*>(data)[idx]) * s;
    }
    case WeightFormat::kMxfp4: {
      const auto* bytes = static_cast<const uint8_t*>(data);
      const uint8_t byte = bytes[i * (cols / 2) + j / 2];
      const uint8_t nibble = (j % 2 == 0) ? (byte & 0x0f) : (byte >> 4);
      const uint8_t s = static_cast<const uint8_t*>(scales)[i * fp4_row_scales() + j / fp4_group()];
      if (nvfp4()) return fp4_e2m1_to_f32(nibble) * (f8e4m3_to_f32(s) * fp4_global_scale);
      return fp4_e2m1_to_f32(nibble) * e8m0_to_f32(s);
    }
    case WeightFormat::kInt8:
    case WeightFormat::kInt4: {
      const auto* row = static_cast<const uint8_t*>(data) + i * int_row_bytes();
      const int64_t g = group >= cols ? 0 : j / group;
      const size_t gi = static_cast<size_t>(i * int_groups() + g);
      float code = 0.0f;
      float zero = 0.0f;
      if (format == WeightFormat::kInt8) {
        code = static_cast<float>(static_cast<int8_t>(row[j]));
      } else {
        const uint8_t byte = row[(j / kIntBlock) * 16 + j % 16];
        code = static_cast<float>(j % kIntBlock < 16 ? (byte & 0x0f) : (byte >> 4));
        zero = 8.0f;
      }
      if (zeros != nullptr) zero = zeros[gi];
      return (code - zero) * int_scale(static_cast<int64_t>(gi));
    }
  }
  return 0.0f;
}

}  // namespace day0
