#pragma once
// The compressed-tensors `pack-quantized` layout (what llm-compressor writes and vLLM / transformers
// load; some releases ship their routed experts this way), weight-only integer quantization per group:
//
//   <module>.weight_packed      I32 [rows, ceil(cols / f)]   f = 32 / bits values per int32
//   <module>.weight_scale       the model dtype [rows, cols / group]
//   <module>.weight_zero_point  I32 [ceil(rows / f), cols / group]   asymmetric only
//   <module>.weight_shape       I64 [2] = {rows, cols}
//
// Values are signed integers q in [-2^(bits-1), 2^(bits-1) - 1]. Packing adds the offset 2^(bits-1)
// (so a nibble holds q + 8) and puts element j of a row at bits [bits * (j % f), bits * (j % f + 1))
// of int32 j / f, zero-padding the last int32 of a row. Zero points (same integer range) are packed
// the same way along dim 0: element (r, g) sits in int32 (r / f, g) at bits * (r % f).
// Dequantization: W[r, c] = (q[r, c] - zp[r, c / group]) * scale[r, c / group], zp = 0 when symmetric.
//
// Our quantizer (the choice is ours; the layout is what must match):
//   symmetric:  scale = amax / qmax (7 or 127), no value clipped; q = clamp(round(x / scale)).
//   asymmetric: lo = min(min, 0), hi = max(max, 0), scale = (hi - lo) / (2^bits - 1),
//               zp = clamp(round(qmin - lo / scale)), q = clamp(round(x / scale) + zp).
// The scale is rounded to its storage dtype before q is computed, so that dequantizing what is
// written reproduces exactly the values the quantizer meant. Rounding is to nearest even.
#include <cstdint>
#include <span>
#include <vector>

#include "day0/core/dtype.h"

namespace day0 {

struct PackArgs {
  int bits = 4;                      // 4 or 8
  int64_t group_size = 128;          // columns per scale; divides cols
  bool symmetric = true;             // false: per-group zero points
  DType scale_dtype = DType::kBF16;  // F32, BF16 or F16
};

int pack_factor(int bits);  // 32 / bits
int quant_min(int bits);    // -2^(bits-1)
int quant_max(int bits);    // 2^(bits-1) - 1

// [rows, cols] signed values -> [rows, ceil(cols / f)] int32 (dim 1 packed). Values outside the range
// of `bits` are a broken invariant (D0_CHECK).
std::vector<int32_t> pack_rows(std::span<const int8_t> values, int64_t rows, int64_t cols, int bits);
// The inverse: [rows, ceil(cols / f)] int32 -> [rows, cols] signed values.
std::vector<int8_t> unpack_rows(std::span<const int32_t> packed, int64_t rows, int64_t cols, int bits);
// [rows, cols] -> [ceil(rows / f), cols] (dim 0 packed: zero points).
std::vector<int32_t> pack_columns(std::span<const int8_t> values, int64_t rows, int64_t cols, int bits);
std::vector<int8_t> unpack_columns(std::span<const int32_t> packed, int64_t rows, int64_t cols, int bits);

struct GroupQuantized {
  std::vector<int8_t> q;           // [rows, cols]
  std::vector<float> scale;        // [rows, groups], exactly representable in args.scale_dtype
  std::vector<int8_t> zero_point;  // [rows, groups]; empty when symmetric
};

// Quantizes a row-major [rows, cols] matrix per group of args.group_size consecutive columns.
// args.group_size must divide cols (D0_CHECK; callers check and report the tensor).
GroupQuantized quantize_groups(std::span<const float> weight, int64_t rows, int64_t cols,
                               const PackArgs& args);

// W = (q - zp) * scale as float32, [rows, cols]; `zero_point` empty means symmetric. Exact: |q - zp|
// < 2^9 and a BF16/F16 scale has at most 11 significant bits, so the product fits a float32.
void dequantize_groups(std::span<const int8_t> q, int64_t rows, int64_t cols, std::span<const float> scale,
                       std::span<const int8_t> zero_point, int64_t group_size, std::span<float> out);

// A float rounded to `dtype` (F32, BF16 or F16, nearest even) and back.
float round_to_dtype(float value, DType dtype);

}  // namespace day0
