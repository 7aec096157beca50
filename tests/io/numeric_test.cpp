// Exhaustive checks of core/numeric.h scalar conversions and io/quantize.h against independent
// computations (field decoding with ldexp in double, the compiler's _Float16, and brute-force nearest).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "day0/core/numeric.h"
#include "day0/io/quantize.h"

namespace day0 {
namespace {

bool same_float(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return f32_to_bits(a) == f32_to_bits(b);  // distinguishes -0 from +0
}

// Decodes a binary float with `e_bits` exponent bits and `m_bits` mantissa bits, IEEE-style (all-ones
// exponent is inf/NaN), in double.
double decode_ieee(uint32_t code, int e_bits, int m_bits) {
  const uint32_t sign = code >> (e_bits + m_bits) & 1u;
  const uint32_t e = (code >> m_bits) & ((1u << e_bits) - 1);
  const uint32_t m = code & ((1u << m_bits) - 1);
  const int bias = (1 << (e_bits - 1)) - 1;
  double v;
  if (e == (1u << e_bits) - 1) {
    v = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), 1 - bias - m_bits);
  } else {
    v = std::ldexp(static_cast<double>(m + (1u << m_bits)), static_cast<int>(e) - bias - m_bits);
  }
  return sign ? -v : v;
}

TEST(Numeric, Bf16ToF32AllCodes) {
  for (uint32_t code = 0; code < 65536; ++code) {
    const double expected = decode_ieee(code, 8, 7);
    ASSERT_TRUE(same_float(bf16_to_f32(static_cast<uint16_t>(code)), static_cast<float>(expected))) << code;
  }
}

TEST(Numeric, F16ToF32AllCodesMatchFieldDecodingAndCompiler) {
  for (uint32_t code = 0; code < 65536; ++code) {
    const float got = f16_to_f32(static_cast<uint16_t>(code));
    ASSERT_TRUE(same_float(got, static_cast<float>(decode_ieee(code, 5, 10)))) << code;
    _Float16 h;
    const auto bits = static_cast<uint16_t>(code);
    std::memcpy(&h, &bits, 2);
    ASSERT_TRUE(same_float(got, static_cast<float>(h))) << code;
  }
}

// Nearest-even rounding of a float to the representable set of a narrower IEEE format, computed in
// double by comparing the two neighbours: the independent model for f32_to_bf16 and f32_to_f16.
TEST(Numeric, F32ToF16MatchesCompilerAroundEveryCode) {
  for (uint32_t code = 0; code < 0x7c00; ++code) {  // every finite non-negative half
    const float v = f16_to_f32(static_cast<uint16_t>(code));
    const float next = f16_to_f32(static_cast<uint16_t>(code + 1));
    const float mid = static_cast<float>((static_cast<double>(v) + next) / 2);  // exact in f32
    for (float x : {v, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f), -v, -mid}) {
      const _Float16 h = static_cast<_Float16>(x);
      uint16_t want;
      std::memcpy(&want, &h, 2);
      ASSERT_EQ(f32_to_f16(x), want) << x;
    }
  }
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // rounds to inf
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(NAN))));
}

uint16_t bf16_reference(float x) {
  if (std::isnan(x)) return 0x7fc0;
  const uint32_t bits = f32_to_bits(x);
  const auto lo = static_cast<uint16_t>(bits >> 16);
  if ((bits & 0xffffu) == 0) return lo;
  const auto hi = static_cast<uint16_t>(lo + 1);  // next code away from zero
  const double dl = std::fabs(static_cast<double>(x) - bf16_to_f32(lo));
  // Overflow: distance to 2^128 (the next value with an unbounded exponent); rounding there gives inf.
  const double hi_value = (hi & 0x7fffu) == 0x7f80u
                              ? std::copysign(std::ldexp(1.0, 128), static_cast<double>(x))
                              : decode_ieee(hi, 8, 7);
  const double dh = std::fabs(static_cast<double>(x) - hi_value);
  if (dl < dh) return lo;
  if (dh < dl) return hi;
  return (lo & 1u) ? hi : lo;
}

TEST(Numeric, F32ToBf16RoundsToNearestEven) {
  std::mt19937 rng(7);
  for (int i = 0; i < 2'000'000; ++i) {
    const float x = bits_to_f32(static_cast<uint32_t>(rng()));
    if (std::isnan(x)) continue;
    ASSERT_EQ(f32_to_bf16(x), bf16_reference(x)) << f32_to_bits(x);
  }
  for (uint32_t code = 0; code < 0x7f80; ++code) {  // exact ties around every positive finite bf16
    const uint32_t tie = (code << 16) | 0x8000u;
    ASSERT_EQ(f32_to_bf16(bits_to_f32(tie)), bf16_reference(bits_to_f32(tie))) << code;
  }
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x7f7fffffu)), 0x7f80);  // max float rounds to inf
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(Numeric, F8E4M3AllCodes) {
  int nans = 0;
  for (uint32_t code = 0; code < 256; ++code) {
    const float got = f8e4m3_to_f32(static_cast<uint8_t>(code));
    if ((code & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(got)) << code;
      ++nans;
      continue;
    }
    // e4m3fn is IEEE-like with bias 7 except that exponent 15 holds finite values.
    const double magnitude = decode_ieee(code & 0x7f, 4, 3);
    const double expected = (code & 0x80) ? -magnitude : magnitude;
    if ((code & 0x78) == 0x78) {
      const double mag = std::ldexp(8.0 + (code & 7), 15 - 7 - 3);
      ASSERT_TRUE(same_float(got, static_cast<float>((code & 0x80) ? -mag : mag))) << code;
    } else {
      ASSERT_TRUE(same_float(got, static_cast<float>(expected))) << code;
    }
  }
  EXPECT_EQ(nans, 2);
  EXPECT_EQ(f8e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(f8e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(f8e4m3_to_f32(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(f8e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(f8e4m3_to_f32(0xc4), -3.0f);
}

TEST(Numeric, F8E5M2AllCodes) {
  for (uint32_t code = 0; code < 256; ++code) {
    ASSERT_TRUE(
        same_float(f8e5m2_to_f32(static_cast<uint8_t>(code)), static_cast<float>(decode_ieee(code, 5, 2))))
        << code;
  }
  EXPECT_EQ(f8e5m2_to_f32(0x7b), 57344.0f);
  EXPECT_TRUE(std::isinf(f8e5m2_to_f32(0x7c)));
}

TEST(Numeric, E8M0AllCodes) {
  for (int code = 0; code < 255; ++code) {
    ASSERT_EQ(e8m0_to_f32(static_cast<uint8_t>(code)), static_cast<float>(std::pow(2.0, code - 127))) << code;
  }
  EXPECT_TRUE(std::isnan(e8m0_to_f32(255)));
  EXPECT_EQ(e8m0_to_f32(0), std::ldexp(1.0f, -127));  // a subnormal float, still exact
}

TEST(Numeric, Fp4E2M1AllCodes) {
  const float expected[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0f, -0.5, -1, -1.5, -2, -3, -4, -6};
  for (int code = 0; code < 16; ++code) {
    EXPECT_TRUE(same_float(fp4_e2m1_to_f32(static_cast<uint8_t>(code)), expected[code])) << code;
  }
}

// Brute force: the nearest finite e4m3 code by value, ties to the even code.
uint8_t nearest_e4m3(float x) {
  uint8_t best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (int code = 0; code < 128; ++code) {
    if (code == 0x7f) continue;
    const double d = std::fabs(std::fabs(static_cast<double>(x)) - f8e4m3_to_f32(static_cast<uint8_t>(code)));
    if (d < best_d || (d == best_d && code % 2 == 0)) {
      best = static_cast<uint8_t>(code);
      best_d = d;
    }
  }
  return static_cast<uint8_t>(best | (std::signbit(x) ? 0x80 : 0));
}

TEST(Quantize, F32ToF8E4M3RoundTripsEveryCodeAndRoundsMidpointsToEven) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f) continue;
    const float v = f8e4m3_to_f32(static_cast<uint8_t>(code));
    ASSERT_EQ(f32_to_f8e4m3(v), code) << v;
  }
  for (int code = 0; code < 0x7e; ++code) {
    const float v = f8e4m3_to_f32(static_cast<uint8_t>(code));
    const float next = f8e4m3_to_f32(static_cast<uint8_t>(code + 1));
    const float mid = (v + next) / 2;
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f), -mid}) {
      ASSERT_EQ(f32_to_f8e4m3(x), nearest_e4m3(x)) << x;
    }
  }
  EXPECT_EQ(f32_to_f8e4m3(1e6f), 0x7e);  // saturates
  EXPECT_EQ(f32_to_f8e4m3(-500.0f), 0xfe);
  EXPECT_EQ(f32_to_f8e4m3(NAN), 0x7f);
}

TEST(Quantize, F32ToFp4RoundsToNearestEven) {
  EXPECT_EQ(f32_to_fp4_e2m1(0.25f), 0);  // tie 0 / 0.5 -> even code 0
  EXPECT_EQ(f32_to_fp4_e2m1(0.75f), 2);  // tie 0.5 / 1 -> code 2 (1.0)
  EXPECT_EQ(f32_to_fp4_e2m1(1.25f), 2);  // tie 1 / 1.5 -> 1.0
  EXPECT_EQ(f32_to_fp4_e2m1(2.5f), 4);   // tie 2 / 3 -> 2.0
  EXPECT_EQ(f32_to_fp4_e2m1(5.0f), 6);   // tie 4 / 6 -> 4.0
  EXPECT_EQ(f32_to_fp4_e2m1(5.1f), 7);
  EXPECT_EQ(f32_to_fp4_e2m1(100.0f), 7);  // saturates
  EXPECT_EQ(f32_to_fp4_e2m1(-3.1f), 0xd);
  for (int code = 0; code < 16; ++code) {
    const float v = fp4_e2m1_to_f32(static_cast<uint8_t>(code));
    EXPECT_EQ(fp4_e2m1_to_f32(f32_to_fp4_e2m1(v)), v) << code;
  }
}

}  // namespace
}  // namespace day0
