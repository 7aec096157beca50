#include "day0/io/quantize.h"

#include <algorithm>
#include <cmath>

#include "day0/core/error.h"
#include "day0/core/numeric.h"

namespace day0 {

uint8_t f32_to_f8e4m3(float value) {
  if (std::isnan(value)) return 0x7f;
  const uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  const float a = std::fabs(value);
  if (a >= 448.0f) return sign | 0x7e;
  int e = 0;
  std::frexp(a, &e);           // a = f * 2^e with f in [0.5, 1)
  const int exponent = e - 1;  // a in [2^exponent, 2^(exponent+1))
  if (a == 0.0f || exponent < -6) {
    // Subnormal range: units of 2^-9; a result of 8 is the smallest normal, which is code 8 too.
    const auto q = static_cast<uint8_t>(std::nearbyint(std::ldexp(a, 9)));
    return sign | q;
  }
  int m = static_cast<int>(std::nearbyint((std::ldexp(a, -exponent) - 1.0f) * 8.0f));
  int biased = exponent + 7;
  if (m == 8) {
    m = 0;
    ++biased;
  }
  return static_cast<uint8_t>(sign | (biased << 3) | m);
}

uint8_t f32_to_fp4_e2m1(float value) {
  static constexpr float kMagnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  if (std::isnan(value)) return 0;
  const uint8_t sign = std::signbit(value) ? 0x8 : 0x0;
  const float a = std::fabs(value);
  uint8_t best = 0;
  for (uint8_t code = 1; code < 8; ++code) {
    const float d_code = std::fabs(kMagnitudes[code] - a);
    const float d_best = std::fabs(kMagnitudes[best] - a);
    if (d_code < d_best || (d_code == d_best && code % 2 == 0)) best = code;
  }
  return sign | best;
}

Fp8BlockQuantized quantize_fp8_block(std::span<const float> weight, int64_t rows, int64_t cols,
                                     int64_t block_rows, int64_t block_cols, bool pow2_scales) {
  D0_CHECK(rows >= 0 && cols >= 0 && block_rows > 0 && block_cols > 0);
  D0_CHECK(static_cast<int64_t>(weight.size()) == rows * cols);
  const int64_t s_rows = (rows + block_rows - 1) / block_rows;
  const int64_t s_cols = (cols + block_cols - 1) / block_cols;
  Fp8BlockQuantized q;
  q.values.resize(weight.size());
  q.scale_inv.resize(static_cast<size_t>(s_rows * s_cols));
  for (int64_t bi = 0; bi < s_rows; ++bi) {
    for (int64_t bj = 0; bj < s_cols; ++bj) {
      const int64_t r0 = bi * block_rows, r1 = std::min(rows, r0 + block_rows);
      const int64_t c0 = bj * block_cols, c1 = std::min(cols, c0 + block_cols);
      float amax = 0.0f;
      for (int64_t i = r0; i < r1; ++i) {
        for (int64_t j = c0; j < c1; ++j) amax = std::max(amax, std::fabs(weight[i * cols + j]));
      }
      float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
      if (pow2_scales) scale = std::exp2(std::ceil(std::log2(scale)));
      q.scale_inv[bi * s_cols + bj] = scale;
      for (int64_t i = r0; i < r1; ++i) {
        for (int64_t j = c0; j < c1; ++j)
          q.values[i * cols + j] = f32_to_f8e4m3(weight[i * cols + j] / scale);
      }
    }
  }
  return q;
}

Mxfp4Quantized quantize_mxfp4(std::span<const float> values, int64_t group) {
  D0_CHECK((group == 16 || group == 32) && values.size() % 32 == 0);
  const auto g_size = static_cast<size_t>(group);
  const size_t groups = values.size() / g_size;
  Mxfp4Quantized q;
  q.blocks.resize(values.size() / 2);
  q.scales.resize(groups);
  for (size_t g = 0; g < groups; ++g) {
    const float* v = values.data() + g * g_size;
    float amax = 0.0f;
    for (size_t i = 0; i < g_size; ++i) amax = std::max(amax, std::fabs(v[i]));
    int exponent = amax > 0.0f ? static_cast<int>(std::ceil(std::log2(amax / 6.0f))) : 0;
    exponent = std::clamp(exponent, -127, 127);
    q.scales[g] = static_cast<uint8_t>(exponent + 127);
    for (size_t j = 0; j < g_size / 2; ++j) {
      const uint8_t lo = f32_to_fp4_e2m1(std::ldexp(v[2 * j], -exponent));
      const uint8_t hi = f32_to_fp4_e2m1(std::ldexp(v[2 * j + 1], -exponent));
      q.blocks[g * g_size / 2 + j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
  return q;
}

Nvfp4Quantized quantize_nvfp4(std::span<const float> values) {
  D0_CHECK(values.size() % 16 == 0);
  Nvfp4Quantized q;
  q.packed.resize(values.size() / 2);
  q.scales.resize(values.size() / 16);
  float amax = 0.0f;
  for (float v : values) amax = std::max(amax, std::fabs(v));
  q.global_multiplier = amax > 0.0f ? amax / (6.0f * 448.0f) : 1.0f;
  for (size_t g = 0; g < q.scales.size(); ++g) {
    const float* v = values.data() + g * 16;
    float group_amax = 0.0f;
    for (size_t i = 0; i < 16; ++i) group_amax = std::max(group_amax, std::fabs(v[i]));
    q.scales[g] = f32_to_f8e4m3(group_amax / 6.0f / q.global_multiplier);
    const float scale = f8e4m3_to_f32(q.scales[g]) * q.global_multiplier;  // what the decode multiplies by
    for (size_t j = 0; j < 8; ++j) {
      const uint8_t lo = scale > 0.0f ? f32_to_fp4_e2m1(v[2 * j] / scale) : 0;
      const uint8_t hi = scale > 0.0f ? f32_to_fp4_e2m1(v[2 * j + 1] / scale) : 0;
      q.packed[g * 8 + j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
  return q;
}

}  // namespace day0
