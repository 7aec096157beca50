// AVX2 + FMA + F16C inner loops (compiled with -mavx2 -mfma -mf16c, see src/day0/CMakeLists.txt).
// Remainders that do not fill a vector fall back to the scalar row helpers.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "day0/backends/cpu/simd/attention_lanes.h"
#include "day0/backends/cpu/simd/int_dot.h"
#include "day0/backends/cpu/simd/row_prefetch.h"
#include "day0/backends/cpu/simd/simd_kernels.h"
#include "day0/backends/cpu/simd/weight_rows.h"
#include "day0/core/error.h"

namespace day0::cpu {

namespace {

inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

inline __m256 load_bf16(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline __m256 load_f16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
// E4M3 -> F16 pattern of value * 2^-8 -> F32 (see kernels_avx512.cpp); callers multiply by 2^8.
inline constexpr float kFp8Unscale = 256.0f;
inline __m256 load_fp8(const uint8_t* p) {
  const __m128i bytes = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m128i t = _mm_slli_epi16(bytes, 8);
  const __m128i sign = _mm_and_si128(t, _mm_set1_epi16(static_cast<short>(0x8000)));
  const __m128i rest = _mm_and_si128(_mm_srli_epi16(t, 1), _mm_set1_epi16(0x3fff));
  // S.1111.111 is NaN in E4M3 (the shift alone would make it 480): all-ones lanes are an F16 NaN.
  const __m128i nan = _mm_cmpeq_epi16(_mm_and_si128(bytes, _mm_set1_epi16(0x7f)), _mm_set1_epi16(0x7f));
  return _mm256_cvtph_ps(_mm_or_si128(_mm_or_si128(sign, rest), nan));
}

// load_fp8's F16 patterns for 16 bytes at once, in 16-bit lanes of one register (sign to bit 15 by adding
// bit 14 to itself; the same bits), for FP8 rows walked 16 columns a step.
inline __m256i fp8_to_f16x16(const uint8_t* p) {
  const __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i u = _mm256_slli_epi16(b, 7);
  const __m256i h = _mm256_add_epi16(u, _mm256_and_si256(u, _mm256_set1_epi16(0x4000)));
  const __m256i nan =
      _mm256_cmpeq_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x7f)), _mm256_set1_epi16(0x7f));
  return _mm256_or_si256(h, nan);
}

// Eight weights of a plain row from column k, for a format known at compile time (the hot loops are
// instantiated per format: a switch per load kept GCC from unswitching them).
template <WeightFormat F>
inline __m256 load_weights_as(const void* row, int64_t k) {
  if constexpr (F == WeightFormat::kF32) {
    return _mm256_loadu_ps(static_cast<const float*>(row) + k);
  } else if constexpr (F == WeightFormat::kBF16) {
    return load_bf16(static_cast<const uint16_t*>(row) + k);
  } else if constexpr (F == WeightFormat::kF16) {
    return load_f16(static_cast<const uint16_t*>(row) + k);
  } else {
    return load_fp8(static_cast<const uint8_t*>(row) + k);
  }
}

inline __m256 load_weights(const WeightView& w, const void* row, int64_t k) {
  switch (w.format) {
    case WeightFormat::kF32:
      return load_weights_as<WeightFormat::kF32>(row, k);
    case WeightFormat::kBF16:
      return load_weights_as<WeightFormat::kBF16>(row, k);
    case WeightFormat::kF16:
      return load_weights_as<WeightFormat::kF16>(row, k);
    default:
      return load_weights_as<WeightFormat::kFp8Block>(row, k);
  }
}

// Columns [k0, k1) of a plain row (F32 / BF16 / F16) against x.
inline float plain_dot(const WeightView& w, const void* row, const float* x, int64_t k0, int64_t k1) {
  __m256 acc0 = _mm256_setzero_ps();
  __m256 acc1 = _mm256_setzero_ps();
  int64_t k = k0;
  for (; k + 16 <= k1; k += 16) {
    acc0 = _mm256_fmadd_ps(load_weights(w, row, k), _mm256_loadu_ps(x + k), acc0);
    acc1 = _mm256_fmadd_ps(load_weights(w, row, k + 8), _mm256_loadu_ps(x + k + 8), acc1);
  }
  for (; k + 8 <= k1; k += 8) acc0 = _mm256_fmadd_ps(load_weights(w, row, k), _mm256_loadu_ps(x + k), acc0);
  float s = hsum(_mm256_add_ps(acc0, acc1));
  for (; k < k1; ++k) s += plain_element(w, row, k) * x[k];
  return s;
}

// MXFP4 rows, 32 columns (16 bytes) a step, the E2M1 values made float32 without a widening conversion:
// the 16 bytes, in both halves of a register, shifted right by 0 (low half) or 4 (high half) and masked
// give each column's code in a byte (low half the even columns, high half the odd ones); two vpshufb map
// the codes to the two high bytes of their value as float32 (every E2M1 value is a BF16), one unpack
// pairs them into 16-bit BF16 lanes, and a shift left by 16 (the lower BF16 of each dword) or a mask
// (the upper) makes them float32. That is four shuffles and four shifts or masks for 32 values, against
// eight shuffles and four two-uop vcvtph2ps through F16 (Zen 3, L1-resident row: 7.6 against 5.5 GB/s
// on one core). Vector t of a step holds the columns of kFp4Bf16Order[8t .. 8t + 7], in which order x is
// laid out once per call (order_x_avx2). Columns 0-15 of a step are vectors 0-1 and 16-31 vectors 2-3,
// so a scale per 16 columns (group 16) takes the first pair and the second as a scale per 32 takes both.
// R rows n .. n + R - 1 are walked side by side, each with its own two accumulators in the same order as
// one row alone, so a row's bits do not depend on R. Decode streams rows of 2 KiB (4096 columns) from
// memory: one row at a time keeps too few lines in flight (Zen 3 reached a third of its read bandwidth),
// four side by side, each prefetching the row R below at the same column, keep up with it.
constexpr int kFp4Bf16Order[32] = {0,  4,  8,  12, 1,  5,  9,  13, 2,  6,  10, 14, 3,  7,  11, 15,
                                   16, 20, 24, 28, 17, 21, 25, 29, 18, 22, 26, 30, 19, 23, 27, 31};

// x in mxfp4 order (prepare_mxfp4_x: per 32 columns the evens, then the odds) to mxfp4_rows' order.
void fp4_bf16_order_x(const float* x, int64_t cols, float* out) {
  for (int64_t c = 0; c < cols; c += 32) {
    for (int p = 0; p < 32; ++p) {
      const int col = kFp4Bf16Order[p];
      out[c + p] = x[c + (col % 2 == 0 ? col / 2 : 16 + col / 2)];
    }
  }
}

// A row dot's prefetch at byte k of a row: `ahead` bytes on (the row R below at the same column) where
// the caller gives a distance, else kBusyPrefetchBytes on in the same row.
inline void prefetch_row_step(const uint8_t* row, int64_t k, int64_t ahead) {
  if (ahead != 0) {
    _mm_prefetch(reinterpret_cast<const char*>(row) + ahead + k, _MM_HINT_T0);
  } else {
    prefetch_ahead_busy(row + k);
  }
}

template <int R>
void mxfp4_rows(const WeightView& w, int64_t n, const float* xo, float* y, int64_t ahead) {
  const uint8_t* bytes[R];
  const uint8_t* scales[R];
  for (int r = 0; r < R; ++r) {
    bytes[r] = static_cast<const uint8_t*>(row_ptr(w, n + r));
    scales[r] = static_cast<const uint8_t*>(w.scales) + (n + r) * w.fp4_row_scales();
  }
  // Bits 24-31 and 16-23 of the float32 of E2M1 codes 0-15: +-0, 0.5, 1, 1.5, 2, 3, 4, 6.
  const __m256i high_byte = _mm256_broadcastsi128_si256(_mm_setr_epi8(
      0x00, 0x3f, 0x3f, 0x3f, 0x40, 0x40, 0x40, 0x40, static_cast<char>(0x80), static_cast<char>(0xbf),
      static_cast<char>(0xbf), static_cast<char>(0xbf), static_cast<char>(0xc0), static_cast<char>(0xc0),
      static_cast<char>(0xc0), static_cast<char>(0xc0)));
  const __m256i next_byte = _mm256_broadcastsi128_si256(
      _mm_setr_epi8(0x00, 0x00, static_cast<char>(0x80), static_cast<char>(0xc0), 0x00, 0x40,
                    static_cast<char>(0x80), static_cast<char>(0xc0), 0x00, 0x00, static_cast<char>(0x80),
                    static_cast<char>(0xc0), 0x00, 0x40, static_cast<char>(0x80), static_cast<char>(0xc0)));
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i nibble_shift = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);
  const __m256i upper_half = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  const bool group16 = w.fp4_group() == 16;
  __m256 acc0[R], acc1[R];
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < w.cols / 32; ++b) {
    const float* xb = xo + b * 32;
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      if (b % 4 == 0) prefetch_row_step(bytes[r], b * 16, ahead);
      const __m256i raw =
          _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes[r] + b * 16)));
      const __m256i code = _mm256_and_si256(_mm256_srlv_epi32(raw, nibble_shift), low4);
      const __m256i hi = _mm256_shuffle_epi8(high_byte, code);
      const __m256i lo = _mm256_shuffle_epi8(next_byte, code);
      const __m256i bf16_first = _mm256_unpacklo_epi8(lo, hi);  // columns 0-15 of the step
      const __m256i bf16_last = _mm256_unpackhi_epi8(lo, hi);   // columns 16-31
      const __m256 v0 = _mm256_castsi256_ps(_mm256_slli_epi32(bf16_first, 16));
      const __m256 v1 = _mm256_castsi256_ps(_mm256_and_si256(bf16_first, upper_half));
      const __m256 v2 = _mm256_castsi256_ps(_mm256_slli_epi32(bf16_last, 16));
      const __m256 v3 = _mm256_castsi256_ps(_mm256_and_si256(bf16_last, upper_half));
      __m256 p = _mm256_mul_ps(v0, _mm256_loadu_ps(xb));
      p = _mm256_fmadd_ps(v1, _mm256_loadu_ps(xb + 8), p);
      __m256 q = _mm256_mul_ps(v2, _mm256_loadu_ps(xb + 16));
      q = _mm256_fmadd_ps(v3, _mm256_loadu_ps(xb + 24), q);
      const float s0 = fp4_scale_value(w, scales[r][group16 ? 2 * b : b]);
      const float s1 = group16 ? fp4_scale_value(w, scales[r][2 * b + 1]) : s0;
      acc0[r] = _mm256_fmadd_ps(p, _mm256_set1_ps(s0), acc0[r]);
      acc1[r] = _mm256_fmadd_ps(q, _mm256_set1_ps(s1), acc1[r]);
    }
  }
  for (int r = 0; r < R; ++r) y[r] = hsum(_mm256_add_ps(acc0[r], acc1[r]));
}

// Rows n .. n + R - 1 of an FP8 weight and the start of each one's row of block scales.
template <int R>
void fp8_rows_at(const WeightView& w, int64_t n, const uint8_t* rows[R], const float* scales[R]) {
  for (int r = 0; r < R; ++r) {
    rows[r] = static_cast<const uint8_t*>(row_ptr(w, n + r));
    scales[r] = static_cast<const float*>(w.scales) + ((n + r) / w.block_rows) * fp8_scale_cols(w);
  }
}

// The NaN rule of fp8_rows: where the rows' byte maximum says a NaN code was read, rows holding one
// give NaN.
template <int R>
void fp8_nan_rows(const WeightView& w, const uint8_t* const* rows, __m256i nan_max, float* y) {
  const __m256i all_ones = _mm256_set1_epi8(-1);
  if (_mm256_testz_si256(_mm256_cmpeq_epi8(nan_max, all_ones), all_ones)) return;
  for (int r = 0; r < R; ++r) {
    const bool nan_code =
        std::any_of(rows[r], rows[r] + w.cols, [](uint8_t v) { return (v & 0x7f) == 0x7f; });
    if (nan_code) y[r] = std::numeric_limits<float>::quiet_NaN();
  }
}

// FP8 rows: per scale block a vector partial sum, folded into the total by one FMA with the block scale;
// one horizontal sum per row, not per block. Blocks are walked 32 columns a step: the bytes unpacked into
// the high bytes of 16-bit lanes (columns 0-7 and 16-23 in one register, 8-15 and 24-31 in the other, so
// the halves come out in column order), an arithmetic shift right by one and a mask give load_fp8's F16
// patterns (two operations where the logical shift needs three), and vcvtph2ps widens each half. NaN
// codes (S.1111.111, which the shift makes 480) are not told apart per element there: the signed maximum
// of the bytes with bit 7 set is -1 exactly where a code is NaN; where the R rows read one, each row is
// scanned and a row holding one gives NaN, as its products would (so a row's result never depends on the
// rows beside it). Steps of 16 and 8 columns (blocks narrower than 32 or their tails) check per element;
// columns past the last whole 8 of a block (rows narrower than their blocks) are added with their true
// values. One accumulator per row keeps the R = 4 rows, their totals and the constants in registers.
// R rows side by side as in mxfp4_rows (each row's accumulators and order those of one row alone); a row
// of 4096 columns is one 4 KiB page, and four in flight are what reach the read bandwidth on Zen 3.
template <int R>
void fp8_rows(const WeightView& w, int64_t n, const float* x, float* y, int64_t ahead) {
  const uint8_t* rows[R];
  const float* scales[R];
  fp8_rows_at<R>(w, n, rows, scales);
  const __m256i zero = _mm256_setzero_si256();
  const __m256i clear_bit14 = _mm256_set1_epi16(static_cast<short>(0xbfff));
  const __m256i bit7 = _mm256_set1_epi8(static_cast<char>(0x80));
  __m256i nan_max = bit7;  // over the R rows' whole 32-column steps
  __m256 total[R];
  float tail[R];
  for (int r = 0; r < R; ++r) {
    total[r] = _mm256_setzero_ps();
    tail[r] = 0.0f;
  }
  for (int64_t k0 = 0, b = 0; k0 < w.cols; k0 += w.block_cols, ++b) {
    const int64_t k1 = std::min(w.cols, k0 + w.block_cols);
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    int64_t k = k0;
    for (; k + 32 <= k1; k += 32) {
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        if (k % 64 == 0) prefetch_row_step(rows[r], k, ahead);
        const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[r] + k));
        nan_max = _mm256_max_epi8(nan_max, _mm256_or_si256(raw, bit7));
        const __m256i a =
            _mm256_and_si256(_mm256_srai_epi16(_mm256_unpacklo_epi8(zero, raw), 1), clear_bit14);
        const __m256i c =
            _mm256_and_si256(_mm256_srai_epi16(_mm256_unpackhi_epi8(zero, raw), 1), clear_bit14);
        acc[r] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(a)), _mm256_loadu_ps(x + k), acc[r]);
        acc[r] =
            _mm256_fmadd_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(c)), _mm256_loadu_ps(x + k + 8), acc[r]);
        acc[r] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(a, 1)), _mm256_loadu_ps(x + k + 16),
                                 acc[r]);
        acc[r] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(c, 1)), _mm256_loadu_ps(x + k + 24),
                                 acc[r]);
      }
    }
    for (; k + 16 <= k1; k += 16) {
      for (int r = 0; r < R; ++r) {
        const __m256i h = fp8_to_f16x16(rows[r] + k);
        acc[r] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), _mm256_loadu_ps(x + k), acc[r]);
        acc[r] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), _mm256_loadu_ps(x + k + 8),
                                 acc[r]);
      }
    }
    for (; k + 8 <= k1; k += 8) {
      for (int r = 0; r < R; ++r)
        acc[r] = _mm256_fmadd_ps(load_fp8(rows[r] + k), _mm256_loadu_ps(x + k), acc[r]);
    }
    for (int r = 0; r < R; ++r) {
      total[r] = _mm256_fmadd_ps(acc[r], _mm256_set1_ps(scales[r][b] * kFp8Unscale), total[r]);
      if (k < k1) {
        float s = 0.0f;
        for (int64_t j = k; j < k1; ++j) s += f8e4m3_to_f32(rows[r][j]) * x[j];
        tail[r] += s * scales[r][b];
      }
    }
  }
  for (int r = 0; r < R; ++r) y[r] = hsum(total[r]) + tail[r];
  fp8_nan_rows<R>(w, rows, nan_max, y);
}

// FP8 rows against x laid out by fp8_bf16_order_x, for rows whose width and scale blocks are whole
// 32-column steps. vcvtph2ps costs two uops per 8 values on Zen 3, so the steps skip F16 and make
// float32 patterns with shifts and masks alone: a byte at the top of a 16-bit lane, shifted right
// arithmetically by 4, holds the BF16 pattern of its value times 2^-120 in that lane's top bits (sign
// to bit 15, the four exponent bits at the low end of BF16's eight, the mantissa below; E4M3's
// subnormals land on BF16's with the same factor). Bytes 1 and 3 of each dword are there already,
// bytes 0 and 2 after a 16-bit shift left by 8; a 32-bit shift left by 16 moves the lower lane up, and
// the mask 0x87f00000 clears the sign copies and whatever the other byte left below. Per 32 columns:
// five shifts and four masks, where fp8_rows takes two unpacks, two shifts, two masks, two extracts
// and four two-uop conversions (one Zen 3 core, a row in L1: about 4.7 cycles a step against 7.4).
// Vector t of a step holds columns t, t + 4, ... (kFp8Bf16Order[8t .. 8t + 7]); fp8_bf16_order_x lays
// x out in that order and multiplies it by 2^kFp8XExp, so that the products of weights carried at
// 2^-120 stay normal floats, and the row's sum is multiplied back by 2^(120 - kFp8XExp). Both factors
// are powers of two: every product and sum is that of the true values scaled, so the bits are those of
// the unscaled float32 computation in this order unless |x| reaches 2^(128 - kFp8XExp) (overflow) or a
// true product is below 2^-(6 + kFp8XExp) in magnitude (a subnormal here where the unscaled product
// was a normal float): 2^68 against 2^-66, the symmetric choice. NaN codes are found as in fp8_rows.
// Two accumulators per row (columns 4j, 4j + 2 and 4j + 1, 4j + 3) per scale block, folded into the
// row's total by one FMA with the block's scale: one chain of four FMAs per step left the core waiting
// on their latency.
constexpr int kFp8Bf16Order[32] = {0, 4, 8,  12, 16, 20, 24, 28, 1, 5, 9,  13, 17, 21, 25, 29,
                                   2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31};
constexpr int kFp8XExp = 60;
constexpr float kFp8XScale = 0x1p60f;          // 2^kFp8XExp
constexpr float kFp8OrderedUnscale = 0x1p60f;  // 2^(120 - kFp8XExp)

bool fp8_orderable(const WeightView& w) {
  return w.format == WeightFormat::kFp8Block && w.cols % 32 == 0 && w.block_cols % 32 == 0;
}

void fp8_bf16_order_x(const float* x, int64_t cols, float* out) {
  for (int64_t c = 0; c < cols; c += 32) {
    for (int p = 0; p < 32; ++p) out[c + p] = x[c + kFp8Bf16Order[p]] * kFp8XScale;
  }
}

// One 32-column step of fp8_rows_ordered: the float32 patterns of raw's bytes (times 2^-120) against
// the step's x, columns 4j and 4j + 2 into acc, 4j + 1 and 4j + 3 into acc_odd.
inline void fp8_step_fma(__m256i raw, const float* xk, __m256& acc, __m256& acc_odd) {
  const __m256i bf16_mask = _mm256_set1_epi32(static_cast<int>(0x87f00000u));
  const auto f32 = [&](__m256i v) { return _mm256_castsi256_ps(_mm256_and_si256(v, bf16_mask)); };
  // Bytes 1 and 3 of each dword at the top of their 16-bit lanes as they are, bytes 0 and 2 moved there.
  const __m256i odd = _mm256_srai_epi16(raw, 4);
  const __m256i even = _mm256_srai_epi16(_mm256_slli_epi16(raw, 8), 4);
  acc = _mm256_fmadd_ps(f32(_mm256_slli_epi32(even, 16)), _mm256_loadu_ps(xk), acc);
  acc_odd = _mm256_fmadd_ps(f32(_mm256_slli_epi32(odd, 16)), _mm256_loadu_ps(xk + 8), acc_odd);
  acc = _mm256_fmadd_ps(f32(even), _mm256_loadu_ps(xk + 16), acc);
  acc_odd = _mm256_fmadd_ps(f32(odd), _mm256_loadu_ps(xk + 24), acc_odd);
}

template <int R>
void fp8_rows_ordered(const WeightView& w, int64_t n, const float* xo, float* y, int64_t ahead) {
  const uint8_t* rows[R];
  const float* scales[R];
  fp8_rows_at<R>(w, n, rows, scales);
  const __m256i bit7 = _mm256_set1_epi8(static_cast<char>(0x80));
  __m256i nan_max = bit7;
  __m256 total[R];
  for (int r = 0; r < R; ++r) total[r] = _mm256_setzero_ps();
  for (int64_t k0 = 0, b = 0; k0 < w.cols; k0 += w.block_cols, ++b) {
    const int64_t k1 = std::min(w.cols, k0 + w.block_cols);
    __m256 acc[R], acc_odd[R];
    for (int r = 0; r < R; ++r) acc[r] = acc_odd[r] = _mm256_setzero_ps();
    for (int64_t k = k0; k < k1; k += 32) {
      const float* xk = xo + k;
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        if (k % 64 == 0) prefetch_row_step(rows[r], k, ahead);
        const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[r] + k));
        nan_max = _mm256_max_epi8(nan_max, _mm256_or_si256(raw, bit7));
        fp8_step_fma(raw, xk, acc[r], acc_odd[r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      total[r] = _mm256_fmadd_ps(_mm256_add_ps(acc[r], acc_odd[r]), _mm256_set1_ps(scales[r][b]), total[r]);
    }
  }
  for (int r = 0; r < R; ++r) y[r] = hsum(total[r]) * kFp8OrderedUnscale;
  fp8_nan_rows<R>(w, rows, nan_max, y);
}

// fp8_rows_ordered for blocks of 32 columns (DeepSeek-V4's 32x32 blocks): a fold per block and row would
// cost an add, an FMA and a broadcast per step, so the block's scale multiplies the step's x instead,
// once for all R rows where they share a block row, and each row's two accumulators run the whole row.
// A row's sum is then over w * (x * s), the same formula whether its scale was shared or its own, so
// its bits do not depend on the rows beside it.
template <int R>
void fp8_rows_ordered_b32(const WeightView& w, int64_t n, const float* xo, float* y, int64_t ahead) {
  const uint8_t* rows[R];
  const float* scales[R];
  fp8_rows_at<R>(w, n, rows, scales);
  const bool shared = scales[0] == scales[R - 1];
  const __m256i bit7 = _mm256_set1_epi8(static_cast<char>(0x80));
  __m256i nan_max = bit7;
  __m256 acc[R], acc_odd[R];
  for (int r = 0; r < R; ++r) acc[r] = acc_odd[r] = _mm256_setzero_ps();
  alignas(32) float xs[32];  // the step's x times the block scale
  for (int64_t k = 0, b = 0; k < w.cols; k += 32, ++b) {
    const auto scale_x = [&](float s) {
      const __m256 sv = _mm256_set1_ps(s);
      for (int j = 0; j < 32; j += 8) _mm256_store_ps(xs + j, _mm256_mul_ps(_mm256_loadu_ps(xo + k + j), sv));
    };
    if (shared) scale_x(scales[0][b]);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      if (k % 64 == 0) prefetch_row_step(rows[r], k, ahead);
      if (!shared) scale_x(scales[r][b]);
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[r] + k));
      nan_max = _mm256_max_epi8(nan_max, _mm256_or_si256(raw, bit7));
      fp8_step_fma(raw, xs, acc[r], acc_odd[r]);
    }
  }
  for (int r = 0; r < R; ++r) y[r] = hsum(_mm256_add_ps(acc[r], acc_odd[r])) * kFp8OrderedUnscale;
  fp8_nan_rows<R>(w, rows, nan_max, y);
}

// One MXFP4 row against x in mxfp4 order (laid out for mxfp4_rows here: not hot, the row loops lay x out
// once per call).
float mxfp4_dot(const WeightView& w, int64_t n, const float* x) {
  std::vector<float> xo(static_cast<size_t>(w.cols));
  fp4_bf16_order_x(x, w.cols, xo.data());
  float y = 0.0f;
  mxfp4_rows<1>(w, n, xo.data(), &y, 0);
  return y;
}

float fp8_dot(const WeightView& w, int64_t n, const float* x) {
  float y = 0.0f;
  fp8_rows<1>(w, n, x, &y, 0);
  return y;
}

float row_dot(const WeightView& w, int64_t n, const float* x) {
  if (w.is_int()) return scalar_row_dot(w, n, x);  // exact float path of integer weights: not hot
  if (w.format == WeightFormat::kMxfp4) return mxfp4_dot(w, n, x);
  if (w.format == WeightFormat::kFp8Block) return fp8_dot(w, n, x);
  return plain_dot(w, row_ptr(w, n), x, 0, w.cols);
}

// Element j of a plain row of format F, as plain_element gives it.
template <WeightFormat F>
inline float element_as(const void* row, int64_t j) {
  if constexpr (F == WeightFormat::kF32) {
    return static_cast<const float*>(row)[j];
  } else if constexpr (F == WeightFormat::kBF16) {
    return bf16_to_f32(static_cast<const uint16_t*>(row)[j]);
  } else {
    return f16_to_f32(static_cast<const uint16_t*>(row)[j]);
  }
}

// R plain rows of `cols` elements against NT x at once: y[t * ldy + r] = row r . x t. Each weight vector
// is loaded and widened once for all NT, and the R * NT * 2 accumulators (eight in every use) cover the
// FMA latency. Per (row, x) the accumulators, their order and the tail are those of dot_avx2 and of
// row_dot's plain_dot, so every result has the bits of dot_rows (and, for float rows, of dot). Each row
// `ahead` bytes on is prefetched at the same column (0: none).
template <WeightFormat F, int R, int NT>
void dot_block(const void* const* rows, int64_t cols, const float* const* xs, float* y, int64_t ldy,
               int64_t ahead) {
  constexpr int64_t elem = F == WeightFormat::kF32 ? 4 : 2;
  __m256 a[R][NT], b[R][NT];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) a[r][t] = b[r][t] = _mm256_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 16 <= cols; k += 16) {
    if (ahead != 0 && (k * elem) % 64 == 0) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
        _mm_prefetch(static_cast<const char*>(rows[r]) + ahead + k * elem, _MM_HINT_T0);
    }
    __m256 w0[R], w1[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      w0[r] = load_weights_as<F>(rows[r], k);
      w1[r] = load_weights_as<F>(rows[r], k + 8);
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      const __m256 x0 = _mm256_loadu_ps(xs[t] + k);
      const __m256 x1 = _mm256_loadu_ps(xs[t] + k + 8);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        a[r][t] = _mm256_fmadd_ps(w0[r], x0, a[r][t]);
        b[r][t] = _mm256_fmadd_ps(w1[r], x1, b[r][t]);
      }
    }
  }
  for (; k + 8 <= cols; k += 8) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 w0 = load_weights_as<F>(rows[r], k);
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) a[r][t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xs[t] + k), a[r][t]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      float s = hsum(_mm256_add_ps(a[r][t], b[r][t]));
      for (int64_t j = k; j < cols; ++j) s += element_as<F>(rows[r], j) * xs[t][j];
      y[t * ldy + r] = s;
    }
  }
}

// Rows n .. n + R of w against NT x (dot_block).
template <WeightFormat F, int R, int NT>
void plain_dot_multi(const WeightView& w, int64_t n, const float* const* xs, float* y, int64_t ldy,
                     int64_t ahead) {
  const void* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = row_ptr(w, n + r);
  dot_block<F, R, NT>(rows, w.cols, xs, y, ldy, ahead);
}

void dot_rows_avx2(const WeightView& w, int64_t n0, int64_t n1, const float* x, float* y);

// x in groups of four (one row at a time), then three (one row), two (two rows at a time) or one
// (dot_rows).
template <WeightFormat F>
void dot_rows_multi_as(const WeightView& w, int64_t n0, int64_t n1, const float* const* xs, int64_t nx,
                       float* y, int64_t ldy) {
  const int64_t row_bytes = w.cols * (F == WeightFormat::kF32 ? 4 : 2);
  const auto ahead = [&](int64_t n, int64_t t) { return t == 0 && n + 8 <= w.rows ? 4 * row_bytes : 0; };
  for (int64_t t = 0; t < nx;) {
    const int64_t nt = std::min<int64_t>(4, nx - t);
    float* yt = y + t * ldy;
    if (nt == 1) {
      dot_rows_avx2(w, n0, n1, xs[t], yt);
    } else if (nt == 2) {
      int64_t n = n0;
      for (; n + 2 <= n1; n += 2) plain_dot_multi<F, 2, 2>(w, n, xs + t, yt + (n - n0), ldy, ahead(n, t));
      if (n < n1) plain_dot_multi<F, 1, 2>(w, n, xs + t, yt + (n - n0), ldy, ahead(n, t));
    } else {
      for (int64_t n = n0; n < n1; ++n) {
        if (nt == 4) {
          plain_dot_multi<F, 1, 4>(w, n, xs + t, yt + (n - n0), ldy, ahead(n, t));
        } else {
          plain_dot_multi<F, 1, 3>(w, n, xs + t, yt + (n - n0), ldy, ahead(n, t));
        }
      }
    }
    t += nt;
  }
}

void dot_rows_multi_avx2(const WeightView& w, int64_t n0, int64_t n1, const float* const* xs, int64_t nx,
                         float* y, int64_t ldy) {
  switch (w.format) {
    case WeightFormat::kF32:
      return dot_rows_multi_as<WeightFormat::kF32>(w, n0, n1, xs, nx, y, ldy);
    case WeightFormat::kBF16:
      return dot_rows_multi_as<WeightFormat::kBF16>(w, n0, n1, xs, nx, y, ldy);
    case WeightFormat::kF16:
      return dot_rows_multi_as<WeightFormat::kF16>(w, n0, n1, xs, nx, y, ldy);
    default:
      for (int64_t t = 0; t < nx; ++t) dot_rows_avx2(w, n0, n1, xs[t], y + t * ldy);
  }
}

// Rows n0..n1 against x as order_x_avx2 laid it out (MXFP4, FP8 of whole 32-column steps; other formats
// take x as it is).
void dot_rows_ordered_avx2(const WeightView& w, int64_t n0, int64_t n1, const float* x, float* y) {
  int64_t n = n0;
  const bool plain =
      w.format == WeightFormat::kF32 || w.format == WeightFormat::kBF16 || w.format == WeightFormat::kF16;
  // Rows shorter than a page are read one after the other, as one sequential stream (Zen 3 streams
  // them faster than four short rows side by side); a page or more per row, four rows at a time keep
  // four pages in flight, which Zen 3 with 4 KiB pages needs to reach its bandwidth.
  const int64_t row_bytes = w.cols * (w.format == WeightFormat::kF32 ? 4 : 2);
  if (plain && row_bytes < 4096) {
    const auto one = w.format == WeightFormat::kF32    ? plain_dot_multi<WeightFormat::kF32, 1, 1>
                     : w.format == WeightFormat::kBF16 ? plain_dot_multi<WeightFormat::kBF16, 1, 1>
                                                       : plain_dot_multi<WeightFormat::kF16, 1, 1>;
    for (; n < n1; ++n) one(w, n, &x, y + (n - n0), 0, n + 8 <= w.rows ? 4 * row_bytes : 0);
    return;
  }
  // Four rows at a time prefetch the next four at the same column: a row of 2048 BF16 is one 4 KiB
  // page, and the hardware prefetchers stop at page boundaries, so without this every row would start cold.
  if (plain) {
    const auto dot4 = w.format == WeightFormat::kF32    ? plain_dot_multi<WeightFormat::kF32, 4, 1>
                      : w.format == WeightFormat::kBF16 ? plain_dot_multi<WeightFormat::kBF16, 4, 1>
                                                        : plain_dot_multi<WeightFormat::kF16, 4, 1>;
    for (; n + 4 <= n1; n += 4) dot4(w, n, &x, y + (n - n0), 0, n + 8 <= w.rows ? 4 * row_bytes : 0);
  }
  // FP8 and MXFP4 rows four at a time, each prefetching the row four below at the same column (none past
  // the matrix's end).
  if (w.format == WeightFormat::kFp8Block || w.format == WeightFormat::kMxfp4) {
    const auto rows4 = w.format == WeightFormat::kMxfp4 ? mxfp4_rows<4>
                       : !fp8_orderable(w)              ? fp8_rows<4>
                       : w.block_cols == 32             ? fp8_rows_ordered_b32<4>
                                                        : fp8_rows_ordered<4>;
    const int64_t packed_row_bytes =
        static_cast<const uint8_t*>(row_ptr(w, 1)) - static_cast<const uint8_t*>(row_ptr(w, 0));
    for (; n + 4 <= n1; n += 4) rows4(w, n, x, y + (n - n0), n + 8 <= w.rows ? 4 * packed_row_bytes : 0);
  }
  if (w.format == WeightFormat::kMxfp4) {
    for (; n < n1; ++n) mxfp4_rows<1>(w, n, x, y + (n - n0), 0);
  }
  if (fp8_orderable(w)) {
    const auto one = w.block_cols == 32 ? fp8_rows_ordered_b32<1> : fp8_rows_ordered<1>;
    for (; n < n1; ++n) one(w, n, x, y + (n - n0), 0);
  }
  for (; n < n1; ++n) y[n - n0] = row_dot(w, n, x);
}

// SimdKernels::order_x: MXFP4 rows take x in kFp4Bf16Order within each 32 columns, FP8 rows of whole
// 32-column steps in kFp8Bf16Order, scaled by 2^kFp8XExp.
bool order_x_avx2(const WeightView& w, const float* x, float* out) {
  if (w.format == WeightFormat::kMxfp4) {
    fp4_bf16_order_x(x, w.cols, out);
    return true;
  }
  if (fp8_orderable(w)) {
    fp8_bf16_order_x(x, w.cols, out);
    return true;
  }
  return false;
}

void dot_rows_avx2(const WeightView& w, int64_t n0, int64_t n1, const float* x, float* y) {
  if (w.format != WeightFormat::kMxfp4 && !fp8_orderable(w)) return dot_rows_ordered_avx2(w, n0, n1, x, y);
  thread_local std::vector<float> xo;  // x laid out for the rows, once per call
  if (xo.size() < static_cast<size_t>(w.cols)) xo.resize(static_cast<size_t>(w.cols));
  order_x_avx2(w, x, xo.data());
  dot_rows_ordered_avx2(w, n0, n1, xo.data(), y);
}

void dequant_row_avx2(const WeightView& w, int64_t n, int64_t k0, int64_t len, float* out) {
  const void* row = row_ptr(w, n);
  const bool vector_ok = w.format != WeightFormat::kMxfp4 && !w.is_int() &&
                         (w.format != WeightFormat::kFp8Block || w.block_cols % 8 == 0);
  int64_t j = 0;
  if (vector_ok) {
    for (; j + 8 <= len; j += 8) {
      __m256 v = load_weights(w, row, k0 + j);
      if (w.format == WeightFormat::kFp8Block) {
        v = _mm256_mul_ps(v, _mm256_set1_ps(fp8_block_scale(w, n, k0 + j) * kFp8Unscale));
      }
      _mm256_storeu_ps(out + j, v);
    }
  }
  if (j < len) scalar_dequant_row(w, n, k0 + j, len - j, out + j);
}

// 6 x 16 half of a 6 x 32 tile: twelve accumulators, two B vectors and one broadcast fill 15 of the
// 16 ymm registers. The accumulators are named variables, not an array: GCC kept an array's
// elements in registers but also stored every one of them to the stack on each k step (twelve
// stores per twelve FMAs, which made the loop store-bound at half the FMA rate). Rows past mr of the
// packed tile are zeros and are not stored, so one loop serves every tile height.
void gemm_half(int64_t mr, int64_t nr, int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
               bool accumulate) {
  __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps(), c10 = _mm256_setzero_ps();
  __m256 c11 = _mm256_setzero_ps(), c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
  __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps(), c40 = _mm256_setzero_ps();
  __m256 c41 = _mm256_setzero_ps(), c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
  if (accumulate) {
    for (int64_t i = 0; i < mr; ++i) {
      _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + 15), _MM_HINT_T0);
    }
  }
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(b + k * kNr);
    const __m256 b1 = _mm256_loadu_ps(b + k * kNr + 8);
    __m256 av = _mm256_broadcast_ss(a + k * kMr + 0);
    c00 = _mm256_fmadd_ps(av, b0, c00);
    c01 = _mm256_fmadd_ps(av, b1, c01);
    av = _mm256_broadcast_ss(a + k * kMr + 1);
    c10 = _mm256_fmadd_ps(av, b0, c10);
    c11 = _mm256_fmadd_ps(av, b1, c11);
    av = _mm256_broadcast_ss(a + k * kMr + 2);
    c20 = _mm256_fmadd_ps(av, b0, c20);
    c21 = _mm256_fmadd_ps(av, b1, c21);
    av = _mm256_broadcast_ss(a + k * kMr + 3);
    c30 = _mm256_fmadd_ps(av, b0, c30);
    c31 = _mm256_fmadd_ps(av, b1, c31);
    av = _mm256_broadcast_ss(a + k * kMr + 4);
    c40 = _mm256_fmadd_ps(av, b0, c40);
    c41 = _mm256_fmadd_ps(av, b1, c41);
    av = _mm256_broadcast_ss(a + k * kMr + 5);
    c50 = _mm256_fmadd_ps(av, b0, c50);
    c51 = _mm256_fmadd_ps(av, b1, c51);
  }
  const auto put = [&](int64_t i, __m256 lo, __m256 hi) {
    if (i >= mr) return;
    float* ci = c + i * ldc;
    if (nr == 16) {
      if (accumulate) {
        lo = _mm256_add_ps(_mm256_loadu_ps(ci), lo);
        hi = _mm256_add_ps(_mm256_loadu_ps(ci + 8), hi);
      }
      _mm256_storeu_ps(ci, lo);
      _mm256_storeu_ps(ci + 8, hi);
      return;
    }
    alignas(32) float tmp[16];
    _mm256_store_ps(tmp, lo);
    _mm256_store_ps(tmp + 8, hi);
    for (int64_t j = 0; j < nr; ++j) ci[j] = accumulate ? ci[j] + tmp[j] : tmp[j];
  };
  put(0, c00, c01);
  put(1, c10, c11);
  put(2, c20, c21);
  put(3, c30, c31);
  put(4, c40, c41);
  put(5, c50, c51);
}

// r[i] <- column i of the 8 x 8 dword matrix whose rows are r[0..7].
inline void transpose_8x8(__m256 r[8]) {
  __m256 t[8], s[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h) {
    s[4 * h + 0] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
    s[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xee);
    s[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
    s[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xee);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x31);
  }
}

// packed[k][j] = W[n0 + j][k0 + k] (see SimdKernels::pack_f32_panel), 8 rows at a time transposed in
// registers. BF16 rows go 16 columns per transpose: each dword is a pair of columns, split afterwards
// (half the shuffles of transposing floats). Columns past the last whole vector are copied one by one.
void pack_f32_panel_avx2(const WeightView& w, int64_t n0, int64_t rows, int64_t k0, int64_t kc,
                         float* packed) {
  const bool bf16 = w.format == WeightFormat::kBF16;
  const bool direct = bf16 || w.format == WeightFormat::kF32 || w.format == WeightFormat::kF16;
  alignas(32) float dequantised[kNr * 256];  // [rows][kc], formats that are not read in place
  if (!direct) {
    for (int64_t j = 0; j < rows; ++j) dequant_row_avx2(w, n0 + j, k0, kc, dequantised + j * kc);
  }
  const auto element = [&](int64_t j, int64_t k) {
    return direct ? plain_element(w, row_ptr(w, n0 + j), k0 + k) : dequantised[j * kc + k];
  };
  const int64_t step = bf16 ? 16 : 8;
  const int64_t whole = kc / step * step;
  for (int64_t j0 = 0; j0 < kNr; j0 += 8) {
    const int64_t valid = std::clamp<int64_t>(rows - j0, 0, 8);
    for (int64_t c0 = 0; c0 < whole; c0 += step) {
      __m256 r[8];
      for (int64_t i = 0; i < 8; ++i) {
        if (i >= valid) {
          r[i] = _mm256_setzero_ps();
        } else if (bf16) {
          const auto* row = static_cast<const uint16_t*>(row_ptr(w, n0 + j0 + i)) + k0 + c0;
          r[i] = _mm256_loadu_ps(reinterpret_cast<const float*>(row));
        } else if (direct) {
          r[i] = load_weights(w, row_ptr(w, n0 + j0 + i), k0 + c0);
        } else {
          r[i] = _mm256_loadu_ps(dequantised + (j0 + i) * kc + c0);
        }
      }
      transpose_8x8(r);
      if (bf16) {
        const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
        for (int64_t p = 0; p < 8; ++p) {
          const __m256i v = _mm256_castps_si256(r[p]);
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(packed + (c0 + 2 * p) * kNr + j0),
                              _mm256_slli_epi32(v, 16));
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(packed + (c0 + 2 * p + 1) * kNr + j0),
                              _mm256_and_si256(v, high));
        }
      } else {
        for (int64_t k = 0; k < 8; ++k) _mm256_storeu_ps(packed + (c0 + k) * kNr + j0, r[k]);
      }
    }
    for (int64_t k = whole; k < kc; ++k) {
      for (int64_t i = 0; i < 8; ++i) packed[k * kNr + j0 + i] = i < valid ? element(j0 + i, k) : 0.0f;
    }
  }
}

void gemm_tile_avx2(int64_t mr, int64_t nr, int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                    bool accumulate) {
  gemm_half(mr, std::min<int64_t>(nr, 16), kc, a, b, c, ldc, accumulate);
  if (nr > 16) gemm_half(mr, nr - 16, kc, a, b + 16, c + 16, ldc, accumulate);
}

float dot_avx2(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps();
  __m256 acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  float s = hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Four rows per pass (dot_block: the bits of dot_avx2 for each), sharing the loads of a.
void dot_many_avx2(const float* a, const float* b, int64_t ldb, int64_t rows, int64_t n, float* out) {
  int64_t j = 0;
  for (; j + 4 <= rows; j += 4) {
    const void* group[4] = {b + j * ldb, b + (j + 1) * ldb, b + (j + 2) * ldb, b + (j + 3) * ldb};
    dot_block<WeightFormat::kF32, 4, 1>(group, n, &a, out + j, 0, 0);
  }
  for (; j < rows; ++j) out[j] = dot_avx2(a, b + j * ldb, n);
}

void axpy_avx2(float alpha, const float* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += alpha * x[i];
}

// 32 columns of y at a time in four registers while every row is added; the tail as axpy_avx2 does it.
void axpy_rows_avx2(const float* alpha, const float* x, int64_t ldx, int64_t rows, float* y, int64_t n) {
  int64_t i0 = 0;
  for (; i0 + 32 <= n; i0 += 32) {
    __m256 acc[4];
    for (int v = 0; v < 4; ++v) acc[v] = _mm256_loadu_ps(y + i0 + 8 * v);
    for (int64_t j = 0; j < rows; ++j) {
      const __m256 a = _mm256_set1_ps(alpha[j]);
      const float* xj = x + j * ldx + i0;
      for (int v = 0; v < 4; ++v) acc[v] = _mm256_fmadd_ps(a, _mm256_loadu_ps(xj + 8 * v), acc[v]);
    }
    for (int v = 0; v < 4; ++v) _mm256_storeu_ps(y + i0 + 8 * v, acc[v]);
  }
  if (i0 < n) {
    for (int64_t j = 0; j < rows; ++j) axpy_avx2(alpha[j], x + j * ldx + i0, y + i0, n - i0);
  }
}

void scale_avx2(float alpha, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(va, _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] *= alpha;
}

// exp(x) for x <= 0 (softmax after subtracting the max): 2^(x log2 e) = 2^i * p(f), degree-6 polynomial,
// relative error ~2e-7; inputs below -87 flush to 0.
inline __m256 exp_neg(__m256 x) {
  x = _mm256_max_ps(_mm256_set1_ps(-87.0f), x);  // max returns its second operand for NaN: keep it
  const __m256 t = _mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f));
  const __m256 i = _mm256_floor_ps(t);
  const __m256 f = _mm256_sub_ps(t, i);
  __m256 p = _mm256_set1_ps(1.5353362e-4f);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.3398874e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.6180355e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.5503378e-2f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.4022652e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.9314718e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(i), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// Lanes of columns [c0, c0 + 8) below `cols` (maskload / maskstore touch no other element).
inline __m256i column_mask(int64_t left) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(std::clamp<int64_t>(left, 0, 8))), idx);
}

// G lanes' accumulators of 32 columns (4 registers each) over the span's keys: each key's values loaded
// once for the G lanes, p broadcast per lane (the products and their order of axpy_rows).
template <int G>
void attend_values_lanes_avx2(const float* p, int64_t ldq, int64_t n, const float* v, int64_t ldv, int64_t dv,
                              float* states, int64_t stride) {
  for (int64_t c0 = 0; c0 < dv; c0 += 32) {
    __m256i m[4];
    __m256 acc[G][4];
#pragma GCC unroll 4
    for (int u = 0; u < 4; ++u) m[u] = column_mask(dv - c0 - 8 * u);
#pragma GCC unroll 2
    for (int g = 0; g < G; ++g) {
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) acc[g][u] = _mm256_maskload_ps(states + g * stride + c0 + 8 * u, m[u]);
    }
    for (int64_t j = 0; j < n; ++j) {
      __m256 vj[4];
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) vj[u] = _mm256_maskload_ps(v + j * ldv + c0 + 8 * u, m[u]);
#pragma GCC unroll 2
      for (int g = 0; g < G; ++g) {
        const __m256 pg = _mm256_broadcast_ss(p + j * ldq + g);
#pragma GCC unroll 4
        for (int u = 0; u < 4; ++u) acc[g][u] = _mm256_fmadd_ps(pg, vj[u], acc[g][u]);
      }
    }
#pragma GCC unroll 2
    for (int g = 0; g < G; ++g) {
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) _mm256_maskstore_ps(states + g * stride + c0 + 8 * u, m[u], acc[g][u]);
    }
  }
}

// SimdKernels::attend_span_lanes at 8 lanes a register (see kernels_avx512.cpp).
void attend_span_lanes_avx2(float* st, int64_t ldq, int64_t nq, int64_t n, int64_t pos, const int32_t* lo,
                            const int32_t* hi, float scale, const float* v, int64_t ldv, int64_t dv,
                            float* states, int64_t stride) {
  D0_CHECK(ldq % 8 == 0 && ldq <= kMaxAttentionLanes && nq <= ldq);
  alignas(32) float shift[kMaxAttentionLanes];  // each lane's largest visible score, then its m'
  const __m256 vscale = _mm256_set1_ps(scale);
  const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
  for (int64_t i0 = 0; i0 < ldq; i0 += 8) {
    const __m256i vlo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo + i0));
    const __m256i vhi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hi + i0));
    __m256 best = neg_inf;
    for (int64_t j = 0; j < n; ++j) {
      const __m256i kp = _mm256_set1_epi32(static_cast<int32_t>(pos + j));
      const __m256i unseen = _mm256_or_si256(_mm256_cmpgt_epi32(vlo, kp), _mm256_cmpgt_epi32(kp, vhi));
      const __m256 seen = _mm256_castsi256_ps(_mm256_xor_si256(unseen, _mm256_set1_epi32(-1)));
      float* sj = st + j * ldq + i0;
      const __m256 sv = _mm256_mul_ps(_mm256_loadu_ps(sj), vscale);
      best = _mm256_blendv_ps(best, _mm256_max_ps(best, sv), seen);
      _mm256_storeu_ps(sj, _mm256_blendv_ps(neg_inf, sv, seen));
    }
    _mm256_store_ps(shift + i0, best);
  }
  rescale_lanes(shift, nq, dv, states, stride, scale_avx2);
  for (int64_t i0 = 0; i0 < ldq; i0 += 8) {
    const __m256 vm = _mm256_load_ps(shift + i0);
    __m256 sums = _mm256_setzero_ps();
    for (int64_t j = 0; j < n; ++j) {
      float* sj = st + j * ldq + i0;
      const __m256 sv = _mm256_loadu_ps(sj);
      const __m256 seen = _mm256_cmp_ps(sv, neg_inf, _CMP_NEQ_OQ);
      const __m256 e = _mm256_and_ps(seen, exp_neg(_mm256_sub_ps(sv, vm)));
      _mm256_storeu_ps(sj, e);
      sums = _mm256_add_ps(sums, e);
    }
    alignas(32) float lane_sums[8];
    _mm256_store_ps(lane_sums, sums);
    for (int64_t i = i0; i < std::min(nq, i0 + 8); ++i) states[i * stride + dv + 1] += lane_sums[i - i0];
  }
  int64_t i = 0;
  for (; i + 2 <= nq; i += 2)
    attend_values_lanes_avx2<2>(st + i, ldq, n, v, ldv, dv, states + i * stride, stride);
  for (; i < nq; ++i) attend_values_lanes_avx2<1>(st + i, ldq, n, v, ldv, dv, states + i * stride, stride);
}

// silu(g) u with the sigmoid from exp(-|g|) <= 1 (see kernels_avx512.cpp); the tail by the same formula.
void silu_mul_avx2(const float* g, const float* u, int64_t n, float* out) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 gv = _mm256_loadu_ps(g + i);
    const __m256 e = exp_neg(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_and_ps(gv, abs_mask)));
    const __m256 num = _mm256_blendv_ps(e, one, _mm256_cmp_ps(gv, _mm256_setzero_ps(), _CMP_GE_OQ));
    const __m256 sig = _mm256_div_ps(num, _mm256_add_ps(one, e));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(gv, sig), _mm256_loadu_ps(u + i)));
  }
  for (; i < n; ++i) out[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

float exp_sum_avx2(float* s, int64_t n, float shift) {
  const __m256 vs = _mm256_set1_ps(shift);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp_neg(_mm256_sub_ps(_mm256_loadu_ps(s + i), vs));
    _mm256_storeu_ps(s + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  float total = hsum(acc);
  for (; i < n; ++i) total += (s[i] = std::exp(s[i] - shift));
  return total;
}

// f32_to_bf16 eight at a time: round to nearest even (bits + 0x7fff + the kept lsb), NaN kept quiet.
void to_bf16_avx2(const float* x, int64_t n, uint16_t* out) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1), quiet = _mm256_set1_epi32(0x40);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i bits = _mm256_castps_si256(_mm256_loadu_ps(x + i));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), one);
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(bias, lsb)), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, abs_mask), inf);
    const __m256i kept = _mm256_or_si256(_mm256_srli_epi32(bits, 16), quiet);
    const __m256i h = _mm256_blendv_epi8(rounded, kept, nan);  // [8] 16-bit values in 32-bit lanes
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), packed);
  }
  for (; i < n; ++i) out[i] = f32_to_bf16(x[i]);
}

// KB keys x 16 query lanes (two registers): per column c, two loads of qt and KB broadcast key elements.
template <int KB>
void key_query_tile_avx2(const float* k, int64_t ldk, const float* qt, int64_t ldq, int64_t d, float* st) {
  __m256 acc[KB][2];
#pragma GCC unroll 8
  for (int j = 0; j < KB; ++j) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
  for (int64_t c = 0; c < d; ++c) {
    const __m256 q0 = _mm256_loadu_ps(qt + c * ldq), q1 = _mm256_loadu_ps(qt + c * ldq + 8);
#pragma GCC unroll 8
    for (int j = 0; j < KB; ++j) {
      const __m256 kv = _mm256_broadcast_ss(k + j * ldk + c);
      acc[j][0] = _mm256_fmadd_ps(kv, q0, acc[j][0]);
      acc[j][1] = _mm256_fmadd_ps(kv, q1, acc[j][1]);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < KB; ++j) {
    _mm256_storeu_ps(st + j * ldq, acc[j][0]);
    _mm256_storeu_ps(st + j * ldq + 8, acc[j][1]);
  }
}

void key_query_dots_avx2(const float* k, int64_t ldk, int64_t n, const float* qt, int64_t ldq, int64_t d,
                         float* st) {
  int64_t i0 = 0;
  for (; i0 + 16 <= ldq; i0 += 16) {
    int64_t j = 0;
    for (; j + 6 <= n; j += 6) key_query_tile_avx2<6>(k + j * ldk, ldk, qt + i0, ldq, d, st + j * ldq + i0);
    for (; j < n; ++j) key_query_tile_avx2<1>(k + j * ldk, ldk, qt + i0, ldq, d, st + j * ldq + i0);
  }
  if (i0 < ldq) {
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) key_query_tile8<8>(k + j * ldk, ldk, qt + i0, ldq, d, st + j * ldq + i0);
    for (; j < n; ++j) key_query_tile8<1>(k + j * ldk, ldk, qt + i0, ldq, d, st + j * ldq + i0);
  }
}

void widen_bf16_rows_avx2(const uint16_t* src, int64_t ld, int64_t rows, int64_t cols, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* s = src + r * ld;
    float* o = out + r * cols;
    int64_t c = 0;
    for (; c + 8 <= cols; c += 8) {
      const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + c)));
      _mm256_storeu_ps(o + c, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
    }
    for (; c < cols; ++c) o[c] = bf16_to_f32(s[c]);
  }
}

SimdKernels make_avx2_kernels() {
  SimdKernels k{SimdLevel::kAvx2, dot_rows_avx2, dequant_row_avx2,  gemm_tile_avx2,
                dot_avx2,         axpy_avx2,     scale_avx2,        nullptr,
                to_bf16_avx2,     exp_sum_avx2,  dot_rows_int_avx2, "avx2-maddubs"};
  k.axpy_rows = axpy_rows_avx2;
  k.dot_many = dot_many_avx2;
  k.key_query_dots = key_query_dots_avx2;
  k.widen_bf16_rows = widen_bf16_rows_avx2;
  k.attend_span_lanes = attend_span_lanes_avx2;
  k.dot_rows_multi = dot_rows_multi_avx2;
  k.order_x = order_x_avx2;
  k.dot_rows_ordered = dot_rows_ordered_avx2;
  k.silu_mul = silu_mul_avx2;
  k.pack_f32_panel = pack_f32_panel_avx2;
  k.gemm_int = gemm_int_avx2;
  k.quantize_int8_row = quantize_int8_row_avx2;
  k.prepare_int_x = prepare_int_x_avx2;
  k.dot_rows_int_prepared = dot_rows_int_prepared_avx2;
  // AVX-VNNI (vpdpbusd on 256-bit VEX): one instruction instead of vpmaddubsw + vpmaddwd.
  if (cpu_has_avx_vnni()) {
    k.dot_rows_int = dot_rows_int_avx_vnni;
    k.int_dot_name = "avx-vnni";
  }
  return k;
}

}  // namespace

void dot_rows_int_avx2(const WeightView& w, int64_t n0, int64_t n1, const int8_t* xq, const float* xs,
                       float* y) {
  int_dot_rows<MaddubsDot>(w, n0, n1, xq, xs, y);
}

const SimdKernels& avx2_kernels() {
  static const SimdKernels k = make_avx2_kernels();
  return k;
}

}  // namespace day0::cpu
