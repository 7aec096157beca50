#pragma once
// INT8 / INT4 projections kept quantized in memory (WeightFormat::kInt8 / kInt4, layout in ops/tensor.h),
// repacked once at load from the integer codes of a pack-quantized, GPTQ or AWQ checkpoint: codes, per-
// group scales and zero points are carried over as they are (never through a float matrix), so the
// kernels' (c - z) * s is the checkpoint's (q - zp) * scale exactly.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "day0/core/status.h"
#include "day0/model/model_spec.h"
#include "day0/ops/tensor.h"

namespace day0 {

struct IntWeight {
  WeightFormat format = WeightFormat::kInt8;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t group = 0;
  std::vector<uint8_t> codes;  // [rows, row bytes] as WeightView::int_row_bytes()
  // [rows, groups] as scale_type: BF16 / F16 bits where every scale is one exactly (the checkpoint
  // stored them so), else float32.
  ScaleType scale_type = ScaleType::kF32;
  std::vector<uint8_t> scales;
  std::vector<float> zeros;  // [rows, groups], empty: the format's default (0 / 8)

  WeightView view() const;
  uint64_t bytes() const { return codes.size() + scales.size() + 4 * zeros.size(); }
};

// The integer codes of one [rows, cols] weight in the checkpoint's own value domain, with per-group
// scale and zero point and the group of each column (g_idx; GPTQ act-order may permute them).
struct IntCodes {
  int bits = 4;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t groups = 1;
  bool is_signed = true;          // compressed-tensors: q in [-2^(b-1), 2^(b-1)); GPTQ / AWQ: [0, 2^b)
  std::vector<int16_t> q;         // [rows, cols]
  std::vector<float> scale;       // [rows, groups]
  std::vector<float> zero;        // [rows, groups] (0 when symmetric compressed-tensors)
  std::vector<int32_t> group_of;  // [cols]
};

// Repacks `codes` into the in-memory format. Unsupported (with the reason) when the layout cannot be
// kept: columns whose groups are not consecutive blocks (GPTQ act-order), or a group size that is not
// a multiple of 32 columns (and not the whole row).
Result<IntWeight> repack_int_weight(const IntCodes& codes);

}  // namespace day0
