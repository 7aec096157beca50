#pragma once
// Scalar row helpers shared by every ISA file (for tails and the scalar level). They have internal
// linkage on purpose: each ISA file gets its own copy compiled with its own flags, so the linker can
// never substitute an AVX-512 copy into the scalar path.
#include <algorithm>
#include <cstdint>

#include "day0/core/numeric.h"
#include "day0/ops/tensor.h"

namespace day0::cpu {
namespace {  // NOLINT(cert-dcl59-cpp, google-build-namespaces): see above

// E8M0 scale without ldexp: the byte is the float32 exponent field (0 and 255 are the edge cases).
[[maybe_unused]] inline float e8m0_fast(uint8_t u) {
  if (u == 0) return 0x1p-127f;
  if (u == 255) return NAN;
  return bits_to_f32(static_cast<uint32_t>(u) << 23);
}

// The multiplier a kMxfp4 scale byte stands for: E8M0, or NVFP4's E4M3 times the global scale (the
// product rounded once, as WeightView::at defines it).
[[maybe_unused]] inline float fp4_scale_value(const WeightView& w, uint8_t code) {
  if (w.fp4_scale_code == Fp4ScaleCode::kE4M3) return f8e4m3_table()[code] * w.fp4_global_scale;
  return e8m0_fast(code);
}

[[maybe_unused]] inline int64_t fp8_scale_cols(const WeightView& w) {
  return (w.cols + w.block_cols - 1) / w.block_cols;
}

[[maybe_unused]] inline float fp8_block_scale(const WeightView& w, int64_t n, int64_t k) {
  return static_cast<const float*>(w.scales)[(n / w.block_rows) * fp8_scale_cols(w) + k / w.block_cols];
}

// Element k of row n, scalar (F32/BF16/F16/FP8; MXFP4 handled by the callers below).
[[maybe_unused]] inline float plain_element(const WeightView& w, const void* row, int64_t k) {
  switch (w.format) {
    case WeightFormat::kF32:
      return static_cast<const float*>(row)[k];
    case WeightFormat::kBF16:
      return bf16_to_f32(static_cast<const uint16_t*>(row)[k]);
    case WeightFormat::kF16:
      return f16_to_f32(static_cast<const uint16_t*>(row)[k]);
    default:
      return f8e4m3_to_f32(static_cast<const uint8_t*>(row)[k]);
  }
}

[[maybe_unused]] inline const void* row_ptr(const WeightView& w, int64_t n) {
  const auto* base = static_cast<const uint8_t*>(w.data);
  switch (w.format) {
    case WeightFormat::kF32:
      return base + n * w.cols * 4;
    case WeightFormat::kBF16:
    case WeightFormat::kF16:
      return base + n * w.cols * 2;
    case WeightFormat::kFp8Block:
      return base + n * w.cols;
    case WeightFormat::kMxfp4:
      return base + n * (w.cols / 2);
    case WeightFormat::kInt8:
    case WeightFormat::kInt4:
      return base + n * w.int_row_bytes();
  }
  return base;
}

// INT8 / INT4 code of column k of a row (see WeightView), and the (scale, zero) of group g of row n.
[[maybe_unused]] inline float int_code(const WeightView& w, const uint8_t* row, int64_t k) {
  if (w.format == WeightFormat::kInt8) return static_cast<float>(static_cast<int8_t>(row[k]));
  const uint8_t byte = row[(k / kIntBlock) * 16 + k % 16];
  return static_cast<float>(k % kIntBlock < 16 ? (byte & 0x0f) : (byte >> 4));
}
[[maybe_unused]] inline int64_t int_group_of(const WeightView& w, int64_t k) {
  return w.group >= w.cols ? 0 : k / w.group;
}
[[maybe_unused]] inline float int_scale(const WeightView& w, int64_t n, int64_t g) {
  return w.int_scale(n * w.int_groups() + g);
}
[[maybe_unused]] inline float int_zero(const WeightView& w, int64_t n, int64_t g) {
  if (w.zeros != nullptr) return w.zeros[n * w.int_groups() + g];
  return w.format == WeightFormat::kInt4 ? 8.0f : 0.0f;
}

// sum over columns [k0, k1) of row n times x (x in mxfp4 order for MXFP4; k0, k1 block aligned there).
[[maybe_unused]] inline float scalar_row_dot_range(const WeightView& w, int64_t n, const float* x, int64_t k0,
                                                   int64_t k1) {
  const void* row = row_ptr(w, n);
  if (w.is_int()) {  // float32 activations against exactly dequantised codes, one group at a time
    const auto* codes = static_cast<const uint8_t*>(row);
    float total = 0.0f;
    for (int64_t kb = k0; kb < k1;) {
      const int64_t g = int_group_of(w, kb);
      const int64_t end = w.group >= w.cols ? k1 : std::min(k1, (g + 1) * w.group);
      const float zero = int_zero(w, n, g);
      float s = 0.0f;
      for (int64_t k = kb; k < end; ++k) s += (int_code(w, codes, k) - zero) * x[k];
      total += s * int_scale(w, n, g);
      kb = end;
    }
    return total;
  }
  if (w.format == WeightFormat::kMxfp4) {
    const auto* bytes = static_cast<const uint8_t*>(row);
    const auto* scales = static_cast<const uint8_t*>(w.scales) + n * w.fp4_row_scales();
    const int64_t groups_per_block = 32 / w.fp4_group();  // 1 or 2 scales per 16-byte block
    const int64_t group_bytes = 16 / groups_per_block;
    float total = 0.0f;
    for (int64_t b = k0 / 32; b < k1 / 32; ++b) {
      for (int64_t q = 0; q < groups_per_block; ++q) {
        float s = 0.0f;
        for (int64_t j = q * group_bytes; j < (q + 1) * group_bytes; ++j) {
          const uint8_t byte = bytes[b * 16 + j];
          s += fp4_e2m1_to_f32(byte & 0x0f) * x[b * 32 + j] + fp4_e2m1_to_f32(byte >> 4) * x[b * 32 + 16 + j];
        }
        total += s * fp4_scale_value(w, scales[b * groups_per_block + q]);
      }
    }
    return total;
  }
  if (w.format == WeightFormat::kFp8Block) {
    float total = 0.0f;
    for (int64_t kb = k0; kb < k1;) {
      const int64_t end = std::min(k1, (kb / w.block_cols + 1) * w.block_cols);
      float s = 0.0f;
      for (int64_t k = kb; k < end; ++k) s += plain_element(w, row, k) * x[k];
      total += s * fp8_block_scale(w, n, kb);
      kb = end;
    }
    return total;
  }
  float s = 0.0f;
  for (int64_t k = k0; k < k1; ++k) s += plain_element(w, row, k) * x[k];
  return s;
}

[[maybe_unused]] inline float scalar_row_dot(const WeightView& w, int64_t n, const float* x) {
  return scalar_row_dot_range(w, n, x, 0, w.cols);
}

// Columns [k0, k0 + len) of row n, dequantised.
[[maybe_unused]] inline void scalar_dequant_row(const WeightView& w, int64_t n, int64_t k0, int64_t len,
                                                float* out) {
  const void* row = row_ptr(w, n);
  if (w.is_int()) {
    for (int64_t j = 0; j < len; ++j) {
      const int64_t g = int_group_of(w, k0 + j);
      out[j] =
          (int_code(w, static_cast<const uint8_t*>(row), k0 + j) - int_zero(w, n, g)) * int_scale(w, n, g);
    }
    return;
  }
  if (w.format == WeightFormat::kMxfp4) {
    const auto* bytes = static_cast<const uint8_t*>(row);
    const auto* scales = static_cast<const uint8_t*>(w.scales) + n * w.fp4_row_scales();
    for (int64_t j = 0; j < len; ++j) {
      const int64_t k = k0 + j;
      const uint8_t byte = bytes[k / 2];
      out[j] = fp4_e2m1_to_f32(k % 2 == 0 ? (byte & 0x0f) : (byte >> 4)) *
               fp4_scale_value(w, scales[k / w.fp4_group()]);
    }
    return;
  }
  for (int64_t j = 0; j < len; ++j) {
    float v = plain_element(w, row, k0 + j);
    if (w.format == WeightFormat::kFp8Block) v *= fp8_block_scale(w, n, k0 + j);
    out[j] = v;
  }
}

}  // namespace
}  // namespace day0::cpu
