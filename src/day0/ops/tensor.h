#pragma once
// Views the kernels read and write. Nothing here owns memory: the caller keeps the storage alive for
// the duration of a kernel call (and, on an asynchronous backend, until Backend::synchronize()).
//
// Activations are float32, row-major, one token per row: a Matrix [rows, cols] with a row stride in
// elements (stride >= cols), so a head slice or one half of a fused projection is a view, not a copy.
// Weights keep the dtype the checkpoint stores (WeightView) and are never expanded in memory: kernels
// dequantise on the fly.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>

#include "day0/core/numeric.h"
#include "day0/model/model_spec.h"  // WeightFormat: F32, BF16, F16, FP8 block, MXFP4

namespace day0 {

// Where a buffer lives. Both backends of today are kHost; a CUDA backend would add kDevice buffers
// and its kernels would accept only views into its own memory space. Every view carries it: code that
// touches elements itself (the blocks' host loops) checks for kHost, kernels check their own space.
enum class MemorySpace { kHost, kDevice };

// A float32 row-major matrix view [rows, cols] with row stride `stride` (elements).
template <typename T>
struct MatrixView {
  T* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;  // elements between the starts of consecutive rows; >= cols
  MemorySpace space = MemorySpace::kHost;

  MatrixView() = default;
  MatrixView(T* d, int64_t r, int64_t c) : data(d), rows(r), cols(c), stride(c) {}
  MatrixView(T* d, int64_t r, int64_t c, int64_t s) : data(d), rows(r), cols(c), stride(s) {}
  // Mutable -> const conversion.
  template <typename U>
  MatrixView(const MatrixView<U>& other)  // NOLINT(google-explicit-constructor)
      requires std::is_convertible_v<U*, T*>
      : data(other.data), rows(other.rows), cols(other.cols), stride(other.stride), space(other.space) {}

  T* row(int64_t r) const { return data + r * stride; }
  std::span<T> row_span(int64_t r) const { return {row(r), static_cast<size_t>(cols)}; }
  bool contiguous() const { return stride == cols; }
  // Columns [col0, col0 + n) of every row: still a view with the same stride.
  MatrixView col_slice(int64_t col0, int64_t n) const { return in_space({data + col0, rows, n, stride}); }
  // Rows [row0, row0 + n).
  MatrixView row_slice(int64_t row0, int64_t n) const {
    return in_space({data + row0 * stride, n, cols, stride});
  }
  bool on_host() const { return space == MemorySpace::kHost; }

 private:
  MatrixView in_space(MatrixView v) const {
    v.space = space;
    return v;
  }
};

using Matrix = MatrixView<float>;
using ConstMatrix = MatrixView<const float>;

// A read-only weight matrix W [rows = out_features, cols = in_features] in the checkpoint's format,
// row-major and contiguous, exactly as safetensors stores it (y = x W^T).
//   kF32 / kBF16 / kF16: `data` holds rows*cols elements of that type (BF16/F16 as uint16_t bits).
//   kFp8Block: `data` holds rows*cols F8_E4M3 bytes; `scales` is float32
//              [ceil(rows/block_rows), ceil(cols/block_cols)] multipliers (weight_scale_inv);
//              W[i,j] = fp8(data[i,j]) * scales[i/block_rows, j/block_cols].
//   kMxfp4:    E2M1 values with E8M0 scales per `group` columns along the row: 32 (MXFP4, gpt-oss and
//              DeepSeek-V4's routed experts; group 0 reads as 32) or 16 (DeepSeek-V4.1's). `data` holds
//              rows * cols/2 bytes: element 2j of a row in the low nibble of its byte j, 2j+1 in the high
//              nibble (gpt-oss's [cols/32, 16] blocks are the same bytes); `scales` is uint8 E8M0
//              [rows, cols/group]; W[i, j] = fp4(nibble) * 2^(scales[i, j/group] - 127), 0xFF NaN.
//              cols must be a multiple of 32.
//              NVFP4 (fp4_scale_code kE4M3, group 16): the same nibbles; `scales` holds FP8 E4M3 bytes
//              [rows, cols/16] (no Inf; 0x7F / 0xFF NaN) and the tensor has one float32 multiplier g
//              (fp4_global_scale): W[i, j] = fp4(nibble) * (e4m3(scales[i, j/16]) * g), the scale product
//              rounded to float32 first, as every kernel computes it.
//   kInt8 / kInt4: integer codes per group of `group` columns, W[i, j] = (c[i, j] - z[i, g]) * s[i, g]
//              with g = j / group. Rows are padded to a multiple of kIntBlock (32) columns with zero
//              codes (row_bytes() apart), so SIMD loops read whole 32-column blocks:
//                kInt8: int8 codes c in [-128, 127], one byte each; z = zeros[i, g] or 0.
//                kInt4: unsigned nibbles c in [0, 15]; in each 32-column block b, byte t holds column
//                       32b + t in its low nibble and 32b + 16 + t in its high one; z = zeros[i, g] or 8.
//              `scales` [rows, ceil(cols / group)] are float32, or BF16 / F16 bits (int_scale_type);
//              `zeros` (null: the default above) are float32 of the same shape and hold small integers
//              (the zero point in the code's domain). group is a multiple of 32 or >= cols (one group
//              per row).
inline constexpr int64_t kIntBlock = 32;
// How INT8 / INT4 scales are held: float32, or the BF16 / F16 a checkpoint stores them in, kept as they
// are where they convert exactly, so that every kernel multiplies by the same float32 values and a
// decode streams half the scale bytes (a 32-column INT4 block: 18 bytes instead of 20).
enum class ScaleType : uint8_t { kF32, kBF16, kF16 };
inline int scale_type_bytes(ScaleType t) {
  return t == ScaleType::kF32 ? 4 : 2;
}
// Scale i of `scales` held as `t`, as float32 (exact).
inline float scale_value(const void* scales, ScaleType t, int64_t i) {
  switch (t) {
    case ScaleType::kBF16:
      return bf16_to_f32(static_cast<const uint16_t*>(scales)[i]);
    case ScaleType::kF16:
      return f16_to_f32(static_cast<const uint16_t*>(scales)[i]);
    case ScaleType::kF32:
      break;
  }
  return static_cast<const float*>(scales)[i];
}
// How a kMxfp4 scale byte decodes: an E8M0 exponent (MXFP4, DeepSeek's FP4) or an FP8 E4M3 value times
// the tensor's global scale (NVFP4).
enum class Fp4ScaleCode : uint8_t { kE8M0, kE4M3 };
struct WeightView {
  WeightFormat format = WeightFormat::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;
  const void* scales = nullptr;  // FP8: const float*; INT8 / INT4: int_scale_type; MXFP4: uint8_t*
  int64_t block_rows = 128;      // FP8 block shape
  int64_t block_cols = 128;
  const float* zeros = nullptr;                       // INT8 / INT4: zero points [rows, groups], or null
  int64_t group = 0;                                  // INT8 / INT4 / FP4 (kMxfp4): columns per scale
  Fp4ScaleCode fp4_scale_code = Fp4ScaleCode::kE8M0;  // kMxfp4 scale bytes
  float fp4_global_scale = 1.0f;                      // kMxfp4 with kE4M3 scales: the per-tensor g
  ScaleType int_scale_type = ScaleType::kF32;         // INT8 / INT4 `scales`
  // The checkpoint tensor it views ("model.layers.3.self_attn.q_proj.weight"), for messages and the
  // recorded operator list; storage owned by whoever bound it (ModelWeights). May be empty.
  std::string_view name;
  MemorySpace space = MemorySpace::kHost;

  // Bytes of `data` (what a GEMV must stream) and of `scales` (+ `zeros`).
  uint64_t data_bytes() const;
  uint64_t scale_bytes() const;
  // Element (i, j) dequantised to float32: the scalar definition every kernel must match.
  float at(int64_t i, int64_t j) const;
  // True when the pointers are set and the shape is consistent with the format.
  bool valid() const;
  // INT8 / INT4: groups per row, bytes between rows (padded), codes of row i.
  int64_t int_groups() const { return group >= cols || group <= 0 ? 1 : (cols + group - 1) / group; }
  int64_t int_row_bytes() const;
  // INT8 / INT4: scale i of `scales` ([rows, int_groups()] flattened) as float32.
  float int_scale(int64_t i) const { return scale_value(scales, int_scale_type, i); }
  bool is_int() const { return format == WeightFormat::kInt8 || format == WeightFormat::kInt4; }
  // kMxfp4: columns per E8M0 scale (16 or 32) and scales per row.
  int64_t fp4_group() const { return group > 0 ? group : 32; }
  int64_t fp4_row_scales() const { return cols / fp4_group(); }
  bool nvfp4() const { return format == WeightFormat::kMxfp4 && fp4_scale_code == Fp4ScaleCode::kE4M3; }
};

// "F32", "BF16", "F16", "FP8-block", "MXFP4", "INT8", "INT4"
const char* weight_format_name(WeightFormat format);
inline constexpr WeightFormat kAllWeightFormats[] = {
    WeightFormat::kF32,   WeightFormat::kBF16, WeightFormat::kF16, WeightFormat::kFp8Block,
    WeightFormat::kMxfp4, WeightFormat::kInt8, WeightFormat::kInt4};

}  // namespace day0
