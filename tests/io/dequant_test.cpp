// FP8 block-scaled, MXFP4 and NVFP4 dequantization against hand-worked values, plus quantize -> dequantize.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "day0/core/numeric.h"
#include "day0/io/dequant.h"
#include "day0/io/quantize.h"

namespace day0 {
namespace {

TensorView view(std::string_view name, DType dtype, const std::vector<int64_t>& shape, const void* data,
                size_t bytes) {
  return TensorView{name, dtype, shape, {static_cast<const uint8_t*>(data), bytes}};
}

TEST(DequantFp8Block, HandWorkedPartialEdgeBlocks) {
  // 3 x 5 weight with 2 x 2 blocks -> scale grid 2 x 3; the last block row and column are partial.
  const std::vector<uint8_t> w = {0x38, 0x40, 0xc4, 0x30, 0x01,   // 1, 2, -3, 0.5, 2^-9
                                  0x40, 0x38, 0x30, 0xc4, 0x38,   // 2, 1, 0.5, -3, 1
                                  0xc4, 0x30, 0x38, 0x40, 0x7e};  // -3, 0.5, 1, 2, 448
  const std::vector<float> s = {1, 2, 4, 0.5f, 0.25f, 8};
  const std::vector<int64_t> ws{3, 5}, ss{2, 3};
  auto out = dequant_fp8_block(view("w", DType::kF8E4M3, ws, w.data(), w.size()),
                               view("w_scale_inv", DType::kF32, ss, s.data(), s.size() * 4), 2, 2);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  const std::vector<float> expected = {1,     2,     -6,    1,    std::ldexp(1.0f, -7),  //
                                       2,     1,     1,     -6,   4,                     //
                                       -1.5f, 0.25f, 0.25f, 0.5f, 3584};
  EXPECT_EQ(*out, expected);
}

TEST(DequantFp8Block, DeepSeekShapesNeedCeilScaleGrids) {
  // kv_a_proj_with_mqa [576, 7168] has scale [5, 56]: 576 = 4.5 blocks of 128.
  std::vector<uint8_t> w(576 * 7168, 0x38);  // all 1.0
  std::vector<float> s(5 * 56);
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<float>(i + 1);
  const std::vector<int64_t> ws{576, 7168}, ss{5, 56}, bad{4, 56};
  auto out = dequant_fp8_block(view("w", DType::kF8E4M3, ws, w.data(), w.size()),
                               view("s", DType::kF32, ss, s.data(), s.size() * 4));
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ((*out)[0], 1.0f);
  EXPECT_EQ((*out)[575 * 7168 + 7167], 5.0f * 56);  // row 575 is in block row 4, the half block
  EXPECT_EQ((*out)[512 * 7168 + 130], 4.0f * 56 + 2);
  auto wrong = dequant_fp8_block(view("w", DType::kF8E4M3, ws, w.data(), w.size()),
                                 view("s", DType::kF32, bad, s.data(), 4 * 56 * 4));
  ASSERT_FALSE(wrong.is_ok());
  EXPECT_NE(wrong.status().message().find("[5, 56]"), std::string::npos) << wrong.status().to_string();
}

TEST(DequantFp8Block, QuantizeThenDequantizeStaysWithinHalfAnUlp) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  const int64_t rows = 300, cols = 260;
  std::vector<float> w(rows * cols);
  for (auto& v : w) v = normal(rng);
  w[5] = 0.5f;  // one outlier sets its block's scale
  const auto q = quantize_fp8_block(w, rows, cols, 128, 128);
  ASSERT_EQ(q.scale_inv.size(), 3u * 3u);
  EXPECT_FLOAT_EQ(q.scale_inv[0], 0.5f / 448.0f);
  std::vector<float> back(w.size());
  dequant_fp8_block(q.values, rows, cols, q.scale_inv, 128, 128, back);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      const float scale = q.scale_inv[(i / 128) * 3 + j / 128];
      // e4m3 keeps 3 mantissa bits: error <= 2^-4 relative, or half the subnormal step.
      const float tol = std::max(std::fabs(w[i * cols + j]) / 16.0f, scale * std::ldexp(1.0f, -10));
      ASSERT_LE(std::fabs(back[i * cols + j] - w[i * cols + j]), tol * 1.0001f) << i << "," << j;
    }
  }
  EXPECT_EQ(back[5], 0.5f);  // the block maximum maps to 448 exactly
  const auto pow2 = quantize_fp8_block(w, rows, cols, 128, 128, /*pow2_scales=*/true);
  for (float s : pow2.scale_inv) EXPECT_EQ(std::exp2(std::round(std::log2(s))), s);
}

TEST(DequantMxfp4, HandWorkedBlocksLowNibbleFirst) {
  std::vector<uint8_t> blocks(32, 0);
  blocks[0] = 0x21;                                // elem 0 low nibble 1 = 0.5, elem 1 high nibble 2 = 1.0
  blocks[1] = 0xf7;                                // elem 2 = 6, elem 3 = -6
  blocks[16] = 0x9a;                               // group 1: elem 32 = -1 * 4, elem 33 = -0.5 * 4
  blocks[31] = 0x05;                               // elem 62 = 3 * 4, elem 63 = 0
  const std::vector<uint8_t> scales = {127, 129};  // x1, x4
  const std::vector<int64_t> bs{1, 2, 16}, ss{1, 2};
  auto out = dequant_mxfp4(view("b", DType::kU8, bs, blocks.data(), blocks.size()),
                           view("s", DType::kU8, ss, scales.data(), scales.size()));
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  ASSERT_EQ(out->size(), 64u);
  std::vector<float> expected(64, 0.0f);
  expected[0] = 0.5f;
  expected[1] = 1.0f;
  expected[2] = 6.0f;
  expected[3] = -6.0f;
  expected[32] = -4.0f;
  expected[33] = -2.0f;
  expected[62] = 12.0f;
  EXPECT_EQ(*out, expected);
  EXPECT_EQ(mxfp4_dequant_shape(bs), (std::vector<int64_t>{1, 64}));
}

TEST(DequantMxfp4, ExtremeScalesAndShapeErrors) {
  std::vector<uint8_t> blocks(16, 0x77);  // 6.0 everywhere
  std::vector<float> out(32);
  dequant_mxfp4(blocks, std::vector<uint8_t>{0}, out);
  EXPECT_EQ(out[0], std::ldexp(6.0f, -127));
  dequant_mxfp4(blocks, std::vector<uint8_t>{255}, out);
  EXPECT_TRUE(std::isnan(out[0]));
  dequant_mxfp4(blocks, std::vector<uint8_t>{254}, out);
  EXPECT_TRUE(std::isinf(out[0]));  // 6 * 2^127 exceeds F32

  const std::vector<int64_t> bs{2, 16}, ss{3};
  auto bad = dequant_mxfp4(view("b", DType::kU8, bs, blocks.data(), 32),
                           view("s", DType::kU8, ss, blocks.data(), 3));
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

TEST(DequantMxfp4, QuantizeThenDequantizeIsExactOnRepresentableValues) {
  std::vector<float> values(64);
  const float grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (size_t i = 0; i < values.size(); ++i) {
    const float sign = (i % 3 == 0) ? -1.0f : 1.0f;
    values[i] = sign * grid[i % 8] * (i < 32 ? 0.125f : 64.0f);
  }
  const auto q = quantize_mxfp4(values);
  EXPECT_EQ(q.scales[0], 127 - 3);
  EXPECT_EQ(q.scales[1], 127 + 6);
  std::vector<float> back(values.size());
  dequant_mxfp4(q.blocks, q.scales, back);
  EXPECT_EQ(back, values);
}

// NVFP4: the even column in the low nibble, bit 3 the sign, the E4M3 group scale times the global
// multiplier. Byte 0x9A: low 0xA = -1.0, high 0x9 = -0.5; byte 0x7F: low 0xF = -6, high 0x7 = +6.
TEST(DequantNvfp4, HandWorkedGroupsAndGlobalScale) {
  std::vector<uint8_t> packed(16, 0x00);  // [1 row, 32 columns / 2]: two groups of 16
  packed[0] = 0x9A;
  packed[8] = 0x7F;
  const std::vector<uint8_t> scales = {0x38, 0x7E};  // E4M3 1.0, 448
  const std::vector<int64_t> ps{1, 16}, ss{1, 2};
  auto out = dequant_nvfp4(view("w", DType::kU8, ps, packed.data(), packed.size()),
                           view("w_scale", DType::kF8E4M3, ss, scales.data(), scales.size()), 2.0f);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ((*out)[0], -2.0f);
  EXPECT_EQ((*out)[1], -1.0f);
  EXPECT_EQ((*out)[2], 0.0f);
  EXPECT_EQ((*out)[16], -6.0f * 448.0f * 2.0f);
  EXPECT_EQ((*out)[17], 6.0f * 448.0f * 2.0f);
  // ModelOpt's weight_scale_2 multiplies; compressed-tensors' weight_global_scale divides.
  EXPECT_EQ(nvfp4_global_multiplier(0.25f, Nvfp4GlobalScale::kMultiplier), 0.25f);
  EXPECT_EQ(nvfp4_global_multiplier(4.0f, Nvfp4GlobalScale::kDivisor), 0.25f);
  // A NaN scale code (0x7F, 0xFF) makes its group NaN; a zero global scale zeroes the finite ones.
  const std::vector<uint8_t> nan_scales = {0xFF, 0x38};
  std::vector<float> raw(32);
  dequant_nvfp4(packed, nan_scales, 0.0f, raw);
  EXPECT_TRUE(std::isnan(raw[0]) && std::isnan(raw[15]));
  EXPECT_EQ(raw[16], 0.0f);
  // Shape or dtype off: refused naming both tensors.
  auto bad = dequant_nvfp4(view("w", DType::kU8, ps, packed.data(), packed.size()),
                           view("w_scale", DType::kF8E8M0, ss, scales.data(), scales.size()), 1.0f);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("w_scale"), std::string::npos);
  EXPECT_NE(bad.status().message().find("F8_E4M3"), std::string::npos);
}

// quantize_nvfp4 -> dequant_nvfp4: the tensor's largest magnitude round-trips (its group scale is 448
// exactly), zeros stay zero, and the whole draw stays within e2m1's relative step.
TEST(DequantNvfp4, QuantizeThenDequantizeKeepsTheLargestValue) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> values(64 * 32);
  for (auto& v : values) v = normal(rng);
  values[100] = 0.5f;                                                   // the amax
  for (int i = 32; i < 48; ++i) values[static_cast<size_t>(i)] = 0.0f;  // one all-zero group
  const Nvfp4Quantized q = quantize_nvfp4(values);
  EXPECT_EQ(q.global_multiplier, 0.5f / (6.0f * 448.0f));
  std::vector<float> out(values.size());
  dequant_nvfp4(q.packed, q.scales, q.global_multiplier, out);
  EXPECT_NEAR(out[100], 0.5f, 1e-6f);
  for (int i = 32; i < 48; ++i) EXPECT_EQ(out[static_cast<size_t>(i)], 0.0f);
  double err2 = 0, ref2 = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    err2 += std::pow(out[i] - values[i], 2);
    ref2 += std::pow(values[i], 2);
  }
  EXPECT_LT(err2 / ref2, 0.02);
}

TEST(Conversions, TensorToF32CoversIntegerAndFloatTypes) {
  const uint16_t h[2] = {0x3c00, 0xc000};  // 1, -2 in F16
  const std::vector<int64_t> s2{2};
  EXPECT_EQ(*tensor_to_f32(view("h", DType::kF16, s2, h, 4)), (std::vector<float>{1.0f, -2.0f}));
  const int32_t i[2] = {-7, 9};
  EXPECT_EQ(*tensor_to_f32(view("i", DType::kI32, s2, i, 8)), (std::vector<float>{-7.0f, 9.0f}));
  const double d[2] = {0.1, 1e300};
  auto fd = *tensor_to_f32(view("d", DType::kF64, s2, d, 16));
  EXPECT_EQ(fd[0], 0.1f);
  EXPECT_TRUE(std::isinf(fd[1]));
  const uint8_t e5[2] = {0x3c, 0x7c};  // 1.0, inf
  auto f5 = *tensor_to_f32(view("e", DType::kF8E5M2, s2, e5, 2));
  EXPECT_EQ(f5[0], 1.0f);
  EXPECT_TRUE(std::isinf(f5[1]));
  auto bf = *tensor_to_bf16(view("h", DType::kF16, s2, h, 4));
  EXPECT_EQ(bf, (std::vector<uint16_t>{0x3f80, 0xc000}));
}

}  // namespace
}  // namespace day0
