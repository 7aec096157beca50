#pragma once
// Scalar element conversions, exact and branch-light. The reference for every SIMD conversion.
// Formats: docs/models.md, "Element encodings" (BF16, F16, F8_E4M3, E8M0, FP4 E2M1).
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace day0 {

inline float bits_to_f32(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline uint32_t f32_to_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

inline float bf16_to_f32(uint16_t v) {
  return bits_to_f32(static_cast<uint32_t>(v) << 16);
}

// Round to nearest even, as torch does; NaN stays a (quiet) NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits = f32_to_bits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

// f as a bfloat16 tensor holds it: rounded to the nearest BF16 (ties to even), back in float32.
inline float round_to_bf16(float f) {
  return bf16_to_f32(f32_to_bf16(f));
}

// IEEE binary16 -> binary32, exact (subnormals, inf, NaN).
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return bits_to_f32(sign | 0x7f800000u | (mantissa << 13));
  return bits_to_f32(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// binary32 -> binary16, round to nearest even, overflow to inf.
inline uint16_t f32_to_f16(float f) {
  const uint32_t bits = f32_to_bits(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (abs < 0x38800000u) {                                               // subnormal or zero in f16
    const float magnitude = bits_to_f32(abs);
    const float scaled = magnitude * 16777216.0f;  // 2^24: units of the smallest subnormal
    const auto rounded = static_cast<uint32_t>(std::nearbyint(scaled));
    return static_cast<uint16_t>(sign | rounded);
  }
  const uint32_t rounding = 0xfffu + ((abs >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((abs - 0x38000000u + rounding) >> 13));
}

// float8 e4m3fn (torch.float8_e4m3fn): no infinities, S.1111.111 is NaN, max 448.
inline float f8e4m3_to_f32(uint8_t b) {
  const bool negative = (b & 0x80u) != 0;
  const int exponent = (b >> 3) & 0xf;
  const int mantissa = b & 0x7;
  float magnitude;
  if (exponent == 15 && mantissa == 7) {
    magnitude = NAN;
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa) / 8.0f, -6);
  } else {
    magnitude = std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
  }
  return negative ? -magnitude : magnitude;
}

// float8 e5m2: IEEE-like with infinities.
inline float f8e5m2_to_f32(uint8_t b) {
  return f16_to_f32(static_cast<uint16_t>(b) << 8);
}

// All 256 E4M3 codes decoded (the values of f8e4m3_to_f32), built at compile time so that kernels looking
// a scale byte up per group (NVFP4's group scales) pay no initialisation guard in their loops.
inline constexpr auto kF8e4m3Values = [] {
  std::array<float, 256> t{};
  for (uint32_t b = 0; b < 256; ++b) {
    const uint32_t sign = (b & 0x80u) << 24, exponent = (b >> 3) & 0xfu, mantissa = b & 0x7u;
    if (exponent == 15 && mantissa == 7) {
      t[b] = std::bit_cast<float>(sign | 0x7fc00000u);  // NaN
    } else if (exponent == 0) {
      t[b] = std::bit_cast<float>(sign | std::bit_cast<uint32_t>(static_cast<float>(mantissa) / 512.0f));
    } else {  // rebias 7 -> 127, the three mantissa bits on top of float32's 23
      t[b] = std::bit_cast<float>(sign | ((exponent + 120) << 23) | (mantissa << 20));
    }
  }
  return t;
}();
inline const float* f8e4m3_table() {
  return kF8e4m3Values.data();
}

// E8M0 (MX scale): 2^(u - 127). 255 is NaN in the OCP MX spec.
inline float e8m0_to_f32(uint8_t u) {
  if (u == 255) return NAN;
  return std::ldexp(1.0f, static_cast<int>(u) - 127);
}

// FP4 E2M1 nibble (bit 3 is the sign).
inline float fp4_e2m1_to_f32(uint8_t nibble) {
  static constexpr float kMagnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = kMagnitudes[nibble & 0x7u];
  return (nibble & 0x8u) ? -m : m;
}

}  // namespace day0
