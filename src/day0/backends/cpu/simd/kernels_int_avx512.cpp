// INT8 / INT4 weights against int8 activations at the avx512 level (SimdKernels::dot_rows_int): the
// VNNI row dots, four INT4 blocks or two INT8 blocks per 512-bit step, and the vpmaddubsw pair where the
// CPU has AVX-512 without VNNI. Compiled with the AVX-512 flags (src/day0/CMakeLists.txt); GCC 12's
// AVX-512 headers trip -Wuninitialized at call sites (see kernels_avx512.cpp).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "day0/backends/cpu/simd/int_dot.h"
#include "day0/backends/cpu/simd/row_prefetch.h"
#include "day0/backends/cpu/simd/simd_kernels.h"

namespace day0::cpu {

namespace {

// ---- INT8 / INT4 x int8 activations with AVX-512 VNNI: two 32-column blocks per 512-bit step -------
struct Vnni256Dot {
  static __m256i dot(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
};

// INT8 rows [n, n + R): y[r] = sum over blocks of scale_w * xs[b] * (codes . xq) (see SimdKernels).
template <int R, ScaleType S>
void int8_rows_512(const WeightView& w, int64_t n, const int8_t* xq, const float* xs, float* y) {
  const auto [blocks, row_bytes, groups, per_group, rows, scales] = int_rows_at(w, n);
  const __mmask16 second = 0xff00;  // int32 lanes of block b + 1 after the dot
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    const __m512i x = _mm512_loadu_si512(xq + b * kIntBlock);
    const __m512 sx = _mm512_mask_blend_ps(second, _mm512_set1_ps(xs[b]), _mm512_set1_ps(xs[b + 1]));
    const int64_t g0 = b / per_group, g1 = (b + 1) / per_group;
    for (int r = 0; r < R; ++r) {
      prefetch_ahead(rows + r * row_bytes + b * 32);
      const __m512i c = _mm512_loadu_si512(rows + r * row_bytes + b * 32);
      // x negated where c < 0 (x is never -128), against |c| (|-128| = 128 as u8).
      const __m512i sxc = _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(c), _mm512_setzero_si512(), x);
      const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(c), sxc);
      const float s0 = int_scale_at<S>(scales, r * groups + g0);
      const __m512 sw = g0 == g1
                            ? _mm512_set1_ps(s0)
                            : _mm512_mask_blend_ps(second, _mm512_set1_ps(s0),
                                                   _mm512_set1_ps(int_scale_at<S>(scales, r * groups + g1)));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(sx, sw), acc[r]);
    }
  }
  float tail[R] = {};
  if (b < blocks) {  // an odd last block: the 256-bit step on its own
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * kIntBlock));
    for (int r = 0; r < R; ++r) {
      const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows + r * row_bytes + b * 32));
      const __m256i p = Vnni256Dot::dot(_mm256_sign_epi8(c, c), _mm256_sign_epi8(x, c));
      tail[r] = int_hsum(
          _mm256_mul_ps(_mm256_cvtepi32_ps(p),
                        _mm256_set1_ps(xs[b] * int_scale_at<S>(scales, r * groups + b / per_group))));
    }
  }
  for (int r = 0; r < R; ++r) y[r] = _mm512_reduce_add_ps(acc[r]) + tail[r];
}

// INT4 rows [n, n + R), four blocks (64 bytes of each row, one cache line) a step. The low nibbles of
// the 64 bytes are columns 0..15 of the four blocks and the high ones columns 16..31, so x is taken in
// that order (x_low / x_high, once a step for all R rows) and two vpdpbusd leave block b + j's sum in
// int32 lanes 4j..4j+3: half the instructions per byte of a block-pair step, which decode needs to keep
// up with the read bandwidth. kFold: symmetric INT4, the zero point 8 subtracted from the integer sums.
// Up to four scales of a row from p (the lanes of span_mask), as float32.
template <ScaleType S>
inline __m128 int_scales4(__mmask8 span_mask, const void* p) {
  if constexpr (S == ScaleType::kF32) {
    return _mm_maskz_loadu_ps(span_mask, p);
  } else if constexpr (S == ScaleType::kBF16) {
    return _mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(_mm_maskz_loadu_epi16(span_mask, p)), 16));
  } else {
    return _mm_cvtph_ps(_mm_maskz_loadu_epi16(span_mask, p));
  }
}

template <bool kFold, int R, ScaleType S>
void int4_rows_512(const WeightView& w, int64_t n, const int8_t* xq, const float* xs, float* y) {
  const auto [blocks, row_bytes, groups, per_group, rows, scales] = int_rows_at(w, n);
  // 64-bit pieces of x's blocks b, b + 1 (0..7) and b + 2, b + 3 (8..15): columns 0..15 of each block
  // are its pieces 0, 1; columns 16..31 pieces 2, 3.
  const __m512i low_pieces = _mm512_set_epi64(13, 12, 9, 8, 5, 4, 1, 0);
  const __m512i high_pieces = _mm512_set_epi64(15, 14, 11, 10, 7, 6, 3, 2);
  const __m512i lane_block = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
  const __m512i nibble = _mm512_set1_epi8(0x0f);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 4 <= blocks; b += 4) {
    const __m512i x01 = _mm512_loadu_si512(xq + b * kIntBlock);
    const __m512i x23 = _mm512_loadu_si512(xq + (b + 2) * kIntBlock);
    const __m512i x_low = _mm512_permutex2var_epi64(x01, low_pieces, x23);
    const __m512i x_high = _mm512_permutex2var_epi64(x01, high_pieces, x23);
    __m512i zero_term = _mm512_setzero_si512();
    if constexpr (kFold) {
      const __m512i eights = _mm512_set1_epi8(8);
      zero_term = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero_term, eights, x_low), eights, x_high);
    }
    const __m512 sx = _mm512_permutexvar_ps(lane_block, _mm512_castps128_ps512(_mm_loadu_ps(xs + b)));
    // The groups of blocks b..b + 3 relative to the first (the same for every row).
    const int64_t g0 = b / per_group;
    const int64_t span = (b + 3) / per_group - g0 + 1;  // 1..4 scales a row
    const __m512i lane_group = _mm512_set_epi32(
        static_cast<int>((b + 3) / per_group - g0), static_cast<int>((b + 3) / per_group - g0),
        static_cast<int>((b + 3) / per_group - g0), static_cast<int>((b + 3) / per_group - g0),
        static_cast<int>((b + 2) / per_group - g0), static_cast<int>((b + 2) / per_group - g0),
        static_cast<int>((b + 2) / per_group - g0), static_cast<int>((b + 2) / per_group - g0),
        static_cast<int>((b + 1) / per_group - g0), static_cast<int>((b + 1) / per_group - g0),
        static_cast<int>((b + 1) / per_group - g0), static_cast<int>((b + 1) / per_group - g0), 0, 0, 0, 0);
    const auto span_mask = static_cast<__mmask8>((1u << span) - 1u);
    for (int r = 0; r < R; ++r) {
      const uint8_t* line = rows + r * row_bytes + b * 16;
      prefetch_ahead_busy(line);
      const __m512i raw = _mm512_loadu_si512(line);
      const __m512i low = _mm512_and_si512(raw, nibble);
      const __m512i high = _mm512_and_si512(_mm512_srli_epi16(raw, 4), nibble);
      __m512i p = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), low, x_low), high, x_high);
      if constexpr (kFold) p = _mm512_sub_epi32(p, zero_term);
      const __m128 s4 = int_scales4<S>(
          span_mask, static_cast<const uint8_t*>(scales) + (r * groups + g0) * scale_type_bytes(S));
      const __m512 sw = _mm512_permutexvar_ps(lane_group, _mm512_castps128_ps512(s4));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(sx, sw), acc[r]);
    }
  }
  float tail[R] = {};
  for (; b < blocks; ++b) {  // the last blocks past a multiple of four, one 256-bit step each
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * kIntBlock));
    __m256i zero_term = _mm256_setzero_si256();
    if constexpr (kFold) zero_term = Vnni256Dot::dot(_mm256_set1_epi8(8), x);
    for (int r = 0; r < R; ++r) {
      const __m256i p =
          _mm256_sub_epi32(Vnni256Dot::dot(int4_block(rows + r * row_bytes + b * 16), x), zero_term);
      tail[r] += int_hsum(
          _mm256_mul_ps(_mm256_cvtepi32_ps(p),
                        _mm256_set1_ps(xs[b] * int_scale_at<S>(scales, r * groups + b / per_group))));
    }
  }
  for (int r = 0; r < R; ++r) y[r] = _mm512_reduce_add_ps(acc[r]) + tail[r];
}

}  // namespace

void dot_rows_int_avx512_vnni(const WeightView& w, int64_t n0, int64_t n1, const int8_t* xq, const float* xs,
                              float* y) {
  with_scale_type(w.int_scale_type, [&](auto scale_type) {
    constexpr ScaleType S = decltype(scale_type)::value;
    int64_t n = n0;
    if (w.format == WeightFormat::kInt4 && w.zeros == nullptr) {
      for (; n + 4 <= n1; n += 4) int4_rows_512<true, 4, S>(w, n, xq, xs, y + (n - n0));
      for (; n < n1; ++n) int4_rows_512<true, 1, S>(w, n, xq, xs, y + (n - n0));
    } else if (w.format == WeightFormat::kInt4) {
      for (; n + 4 <= n1; n += 4) int4_rows_512<false, 4, S>(w, n, xq, xs, y + (n - n0));
      for (; n < n1; ++n) int4_rows_512<false, 1, S>(w, n, xq, xs, y + (n - n0));
    } else {
      for (; n + 4 <= n1; n += 4) int8_rows_512<4, S>(w, n, xq, xs, y + (n - n0));
      for (; n < n1; ++n) int8_rows_512<1, S>(w, n, xq, xs, y + (n - n0));
    }
  });
}

// quantize_activation_row's arithmetic on a block of 32 floats at a time: the same amax, the same
// float32 product x * (127 / amax) rounded half to even (vcvtps2dq under the default rounding mode, as
// nearbyint), so every code, scale and sum is equal to it. Lanes past n load as zeros, which leave amax
// and the sum unchanged and make the padding codes 0.
void quantize_int8_row_avx512(const float* x, int64_t n, int8_t* q, float* scale, int32_t* sum) {
  const int64_t blocks = (n + kIntBlock - 1) / kIntBlock;
  const __m512i abs_bits = _mm512_set1_epi32(0x7fffffff);
  const __m512i infinity_bits = _mm512_set1_epi32(0x7f800000);
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  const auto lanes = [](int64_t left) -> __mmask16 {
    return left >= 16  ? __mmask16(0xffff)
           : left <= 0 ? __mmask16(0)
                       : static_cast<__mmask16>((1u << left) - 1u);
  };
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t k0 = b * kIntBlock;
    const __m512 v0 = _mm512_maskz_loadu_ps(lanes(n - k0), x + k0);
    const __m512 v1 = _mm512_maskz_loadu_ps(lanes(n - k0 - 16), x + k0 + 16);
    const __m512i a0 = _mm512_and_si512(_mm512_castps_si512(v0), abs_bits);  // |x| as bits
    const __m512i a1 = _mm512_and_si512(_mm512_castps_si512(v1), abs_bits);
    int8_t* qb = q + k0;
    // An infinity or a NaN (exponent all ones) anywhere in the block: a NaN scale, zero codes.
    if ((_mm512_cmpge_epu32_mask(a0, infinity_bits) | _mm512_cmpge_epu32_mask(a1, infinity_bits)) != 0) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb), _mm256_setzero_si256());
      scale[b] = NAN;
      sum[b] = 0;
      continue;
    }
    // Finite magnitudes order as their bits do.
    const float amax = _mm512_reduce_max_ps(_mm512_castsi512_ps(_mm512_max_epu32(a0, a1)));
    if (amax == 0.0f) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb), _mm256_setzero_si256());
      scale[b] = 0.0f;
      sum[b] = 0;
      continue;
    }
    scale[b] = amax / 127.0f;
    const __m512 inv = _mm512_set1_ps(127.0f / amax);
    const __m512i c0 = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v0, inv)), lo), hi);
    const __m512i c1 = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v1, inv)), lo), hi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qb), _mm512_cvtepi32_epi8(c0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + 16), _mm512_cvtepi32_epi8(c1));
    sum[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(c0, c1));
  }
}

// AVX-512 without VNNI (Skylake-X): the AVX2 instruction pair.
void dot_rows_int_avx512_maddubs(const WeightView& w, int64_t n0, int64_t n1, const int8_t* xq,
                                 const float* xs, float* y) {
  int_dot_rows<MaddubsDot>(w, n0, n1, xq, xs, y);
}

}  // namespace day0::cpu
