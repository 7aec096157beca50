// Dequantisation against blocks worked out by hand from the format description (io/gguf_dequant.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "day0/io/gguf.h"

namespace day0::gguf {
namespace {

void put_f16(std::vector<uint8_t>& b, size_t at, uint16_t h) {
  std::memcpy(b.data() + at, &h, 2);
}

std::vector<float> run(GgmlType type, const std::vector<uint8_t>& block, size_t n) {
  std::vector<float> out(n, -999.0f);
  Status st = dequantize(static_cast<uint32_t>(type), block, out);
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  return out;
}

constexpr uint16_t kHalf = 0x3800;      // 0.5
constexpr uint16_t kOne = 0x3C00;       // 1.0
constexpr uint16_t kQuarter = 0x3400;   // 0.25
constexpr uint16_t kMinusOne = 0xBC00;  // -1.0

TEST(GgufDequant, PlainFloats) {
  const std::vector<uint8_t> f16 = {0x00, 0x3C, 0x00, 0xC0, 0x01, 0x00};  // 1, -2, 2^-24
  auto y = run(GgmlType::kF16, f16, 3);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -2.0f);
  EXPECT_EQ(y[2], std::ldexp(1.0f, -24));
  const std::vector<uint8_t> bf16 = {0x80, 0x3F, 0x40, 0xC0};  // 1, -3
  y = run(GgmlType::kBF16, bf16, 2);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -3.0f);
  const float v[2] = {1.5f, -0.25f};
  std::vector<uint8_t> f32(8);
  std::memcpy(f32.data(), v, 8);
  y = run(GgmlType::kF32, f32, 2);
  EXPECT_EQ(y[0], 1.5f);
  EXPECT_EQ(y[1], -0.25f);
}

TEST(GgufDequant, Q4_0) {
  std::vector<uint8_t> b(18, 0x88);  // every nibble 8 -> 0
  put_f16(b, 0, kHalf);
  b[2] = 0x19;  // element 0: low nibble 9 -> (9-8)*0.5; element 16: high nibble 1 -> (1-8)*0.5
  auto y = run(GgmlType::kQ4_0, b, 32);
  EXPECT_EQ(y[0], 0.5f);
  EXPECT_EQ(y[16], -3.5f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[31], 0.0f);
}

TEST(GgufDequant, Q4_1) {
  std::vector<uint8_t> b(20, 0x00);
  put_f16(b, 0, kHalf);
  put_f16(b, 2, kMinusOne);
  b[4 + 3] = 0xF2;  // element 3: 2*0.5-1 = 0; element 19: 15*0.5-1 = 6.5
  auto y = run(GgmlType::kQ4_1, b, 32);
  EXPECT_EQ(y[3], 0.0f);
  EXPECT_EQ(y[19], 6.5f);
  EXPECT_EQ(y[0], -1.0f);
}

TEST(GgufDequant, Q5_0) {
  std::vector<uint8_t> b(22, 0x00);
  put_f16(b, 0, kOne);
  const uint32_t qh = 0x00020001;  // fifth bit of elements 0 and 17
  std::memcpy(b.data() + 2, &qh, 4);
  b[6] = 0x30;  // element 0: 0|16 -> 0; element 16: 3 -> 3-16 = -13
  b[7] = 0x0F;  // element 1: 15 -> -1; element 17: 0|16 -> 0
  auto y = run(GgmlType::kQ5_0, b, 32);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[16], -13.0f);
  EXPECT_EQ(y[1], -1.0f);
  EXPECT_EQ(y[17], 0.0f);
  EXPECT_EQ(y[2], -16.0f);
}

TEST(GgufDequant, Q5_1) {
  std::vector<uint8_t> b(24, 0x00);
  put_f16(b, 0, kQuarter);
  put_f16(b, 2, kOne);
  const uint32_t qh = 0x80000000u;  // fifth bit of element 31
  std::memcpy(b.data() + 4, &qh, 4);
  b[8 + 15] = 0xA5;  // element 15: 5*0.25+1 = 2.25; element 31: (10|16)*0.25+1 = 7.5
  auto y = run(GgmlType::kQ5_1, b, 32);
  EXPECT_EQ(y[15], 2.25f);
  EXPECT_EQ(y[31], 7.5f);
  EXPECT_EQ(y[0], 1.0f);
}

TEST(GgufDequant, Q8_0) {
  std::vector<uint8_t> b(34, 0x00);
  put_f16(b, 0, kQuarter);
  b[2] = 0x80;      // -128 * 0.25
  b[2 + 31] = 127;  // 127 * 0.25
  b[2 + 5] = 3;
  auto y = run(GgmlType::kQ8_0, b, 32);
  EXPECT_EQ(y[0], -32.0f);
  EXPECT_EQ(y[31], 31.75f);
  EXPECT_EQ(y[5], 0.75f);
  EXPECT_EQ(y[6], 0.0f);
}

TEST(GgufDequant, Q4_K) {
  std::vector<uint8_t> b(144, 0x00);
  put_f16(b, 0, kOne);   // d
  put_f16(b, 2, kHalf);  // dmin
  uint8_t* sc = b.data() + 4;
  sc[0] = 2;     // sub-block 0 scale
  sc[4] = 3;     // sub-block 0 min
  sc[9] = 0x21;  // sub-block 5: scale low bits 1, min low bits 2
  sc[1] = 0x40;  // sub-block 5 scale top bits 01 (sub-block 1 keeps scale 0)
  sc[5] = 0xC0;  // sub-block 5 min top bits 11 (sub-block 1 keeps min 0)
  uint8_t* qs = b.data() + 16;
  qs[0] = 0x07;       // element 0 (sub-block 0): 1*2*7 - 0.5*3 = 12.5
  qs[64 + 4] = 0x90;  // element 164 (sub-block 5, high nibble 9): 17*9 - 0.5*50 = 128
  auto y = run(GgmlType::kQ4_K, b, 256);
  EXPECT_EQ(y[0], 12.5f);
  EXPECT_EQ(y[1], -1.5f);  // q = 0 in sub-block 0
  EXPECT_EQ(y[164], 128.0f);
  EXPECT_EQ(y[160], -25.0f);  // q = 0 in sub-block 5
  EXPECT_EQ(y[132], 0.0f);    // sub-block 4: scale and min 0
}

TEST(GgufDequant, Q5_K) {
  std::vector<uint8_t> b(176, 0x00);
  put_f16(b, 0, kOne);
  put_f16(b, 2, kOne);
  uint8_t* sc = b.data() + 4;
  sc[0] = 1;  // sub-block 0: scale 1, min 0
  sc[3] = 4;  // sub-block 3: scale 4
  sc[7] = 2;  //              min 2
  uint8_t* qh = b.data() + 16;
  uint8_t* qs = b.data() + 48;
  qh[2] = 0x09;       // fifth bits of element 2 in sub-blocks 0 and 3
  qs[2] = 0x05;       // element 2: (5|16)*1 - 0 = 21
  qs[32 + 2] = 0x70;  // element 98 (sub-block 3, high nibble): (7|16)*4 - 2 = 90
  auto y = run(GgmlType::kQ5_K, b, 256);
  EXPECT_EQ(y[2], 21.0f);
  EXPECT_EQ(y[98], 90.0f);
  EXPECT_EQ(y[96], -2.0f);
  EXPECT_EQ(y[66], 0.0f);
  EXPECT_EQ(y[0], 0.0f);
}

TEST(GgufDequant, Q6_K) {
  std::vector<uint8_t> b(210, 0x00);
  uint8_t* ql = b.data();
  uint8_t* qh = b.data() + 128;
  auto* sc = reinterpret_cast<int8_t*>(b.data() + 192);
  put_f16(b, 208, kHalf);
  sc[0] = 2;
  sc[7] = -3;
  sc[8 + 4] = 1;
  ql[0] = 0x0A;  // element 0: low 10, high bits 2 -> 42 - 32 = 10 -> 0.5*2*10
  qh[0] = 0x02;
  ql[52] = 0x30;  // element 116 (l 20, quarter 3): 3 | 1<<4 = 19 -> -13 -> 0.5*-3*-13
  qh[20] = 0x40;
  ql[64 + 5] = 0xF0;  // element 197 (second half, l 5, quarter 2): 15 | 3<<4 = 63 -> 31 -> 0.5*1*31
  qh[32 + 5] = 0x30;
  auto y = run(GgmlType::kQ6_K, b, 256);
  EXPECT_EQ(y[0], 10.0f);
  EXPECT_EQ(y[1], -32.0f);  // q = 0 -> -32, scale 2
  EXPECT_EQ(y[116], 19.5f);
  EXPECT_EQ(y[197], 15.5f);
  EXPECT_EQ(y[52], 0.0f);  // scale 0
}

TEST(GgufDequant, SizeAndTypeErrors) {
  std::vector<float> out(32);
  std::vector<uint8_t> short_block(17);
  EXPECT_EQ(dequantize(2, short_block, out).code(), StatusCode::kOutOfRange);
  std::vector<float> partial(31);
  std::vector<uint8_t> block(18);
  EXPECT_EQ(dequantize(2, block, partial).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(dequantize(10, block, out).code(), StatusCode::kUnsupported);  // Q2_K: known, not dequantised
  EXPECT_EQ(dequantize(99, block, out).code(), StatusCode::kUnsupported);
}

}  // namespace
}  // namespace day0::gguf
