// AVX-512 inner loops (compiled with -mavx512f/bw/vl/dq/bf16/vnni, see src/day0/CMakeLists.txt).
// Tails use AVX-512 masks, so no scalar remainder loops are needed for F32/BF16/F16/FP8.
// GCC 12's AVX-512 headers build some intrinsics from _mm512_undefined_*(), which -Wuninitialized
// reports at every call site (a known false positive): silence it for this file only.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "day0/backends/cpu/simd/attention_lanes.h"
#include "day0/backends/cpu/simd/row_prefetch.h"
#include "day0/backends/cpu/simd/simd_kernels.h"
#include "day0/backends/cpu/simd/weight_rows.h"
#include "day0/backends/cpu/simd_level.h"
#include "day0/core/error.h"

namespace day0::cpu {

namespace {

inline __mmask16 tail_mask(int64_t n) {
  return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1u);
}

// 16 weights starting at column k of a row, as float32 (masked lanes read nothing and give 0).
inline __m512 load_bf16(const uint16_t* p, __mmask16 m) {
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline __m512 load_f16(const uint16_t* p, __mmask16 m) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}
// E4M3 -> F16 bit pattern of value * 2^-8 (sign kept, exponent and mantissa shifted right by one;
// E4M3 subnormals land on F16 subnormals exactly), then F16 -> F32. Callers multiply by 2^8, folded
// into the block scale. S.1111.111 (NaN in E4M3, which the shift alone would make 480) is forced to
// an F16 NaN.
inline constexpr float kFp8Unscale = 256.0f;
inline __m512 fp8_halves_to_ps(__m256i b16) {  // 16 bytes zero-extended to 16-bit lanes
  // u = b << 7 puts exponent and mantissa in place and the sign on bit 14; adding bit 14 to itself
  // carries it to bit 15 and clears it.
  const __m256i u = _mm256_slli_epi16(b16, 7);
  const __m256i h = _mm256_add_epi16(u, _mm256_and_si256(u, _mm256_set1_epi16(0x4000)));
  const __m256i nan =
      _mm256_cmpeq_epi16(_mm256_and_si256(b16, _mm256_set1_epi16(0x7f)), _mm256_set1_epi16(0x7f));
  return _mm512_cvtph_ps(_mm256_or_si256(h, nan));
}
inline __m512 load_fp8(const uint8_t* p, __mmask16 m) {
  return fp8_halves_to_ps(_mm256_cvtepu8_epi16(_mm_maskz_loadu_epi8(m, p)));
}
// fp8_halves_to_ps's F16 patterns for 32 bytes zero-extended to 16-bit lanes, in one register (the same
// bits; one instruction per step instead of two half-width ones, which FP8 row dots, bound by their
// decoding rather than by memory, feel even in cache).
inline __m512i fp8_to_f16x32(__m512i b32) {
  const __m512i u = _mm512_slli_epi16(b32, 7);
  const __m512i h = _mm512_add_epi16(u, _mm512_and_si512(u, _mm512_set1_epi16(0x4000)));
  const __mmask32 nan =
      _mm512_cmpeq_epi16_mask(_mm512_and_si512(b32, _mm512_set1_epi16(0x7f)), _mm512_set1_epi16(0x7f));
  return _mm512_mask_mov_epi16(h, nan, _mm512_set1_epi16(-1));
}
inline __m512 fp4_table() {
  return _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f, -2.0f,
                        -3.0f, -4.0f, -6.0f);
}
// 16 FP4 scale bytes -> float32. E8M0: the byte is the exponent field (0 is 2^-127, 255 NaN). NVFP4's
// E4M3 bytes: looked up in the decoded table (a gather of 16 lanes, once per 256 columns) and multiplied
// by the global scale, rounding as fp4_scale_value does.
inline __m512 fp4_scales_x16(const WeightView& w, const uint8_t* p) {
  const __m512i u = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  if (w.fp4_scale_code == Fp4ScaleCode::kE4M3) {
    return _mm512_mul_ps(_mm512_i32gather_ps(u, f8e4m3_table(), 4), _mm512_set1_ps(w.fp4_global_scale));
  }
  __m512i bits = _mm512_slli_epi32(u, 23);
  bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(u, _mm512_setzero_si512()),
                               _mm512_set1_epi32(0x00400000));
  bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(u, _mm512_set1_epi32(255)),
                               _mm512_set1_epi32(0x7fc00000));
  return _mm512_castsi512_ps(bits);
}

inline float plain_dot(const WeightView& w, const void* row, const float* x, int64_t k0, int64_t k1) {
  __m512 acc0 = _mm512_setzero_ps();
  __m512 acc1 = _mm512_setzero_ps();
  int64_t k = k0;
  switch (w.format) {
    case WeightFormat::kF32: {
      const auto* r = static_cast<const float*>(row);
      for (; k + 32 <= k1; k += 32) {
        prefetch_ahead(r + k);
        prefetch_ahead(r + k + 16);
        acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(r + k), _mm512_loadu_ps(x + k), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(r + k + 16), _mm512_loadu_ps(x + k + 16), acc1);
      }
      for (; k < k1; k += 16) {
        const __mmask16 m = tail_mask(k1 - k);
        acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, r + k), _mm512_maskz_loadu_ps(m, x + k), acc0);
      }
      break;
    }
    case WeightFormat::kBF16:
    case WeightFormat::kF16: {
      const auto* r = static_cast<const uint16_t*>(row);
      const bool bf = w.format == WeightFormat::kBF16;
      for (; k + 32 <= k1; k += 32) {
        prefetch_ahead(r + k);
        const __m512 w0 = bf ? load_bf16(r + k, 0xffff) : load_f16(r + k, 0xffff);
        const __m512 w1 = bf ? load_bf16(r + k + 16, 0xffff) : load_f16(r + k + 16, 0xffff);
        acc0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + k), acc0);
        acc1 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + k + 16), acc1);
      }
      for (; k < k1; k += 16) {
        const __mmask16 m = tail_mask(k1 - k);
        const __m512 w0 = bf ? load_bf16(r + k, m) : load_f16(r + k, m);
        acc0 = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(m, x + k), acc0);
      }
      break;
    }
    default: {  // FP8 within one scale block
      const auto* r = static_cast<const uint8_t*>(row);
      for (; k + 32 <= k1; k += 32) {
        prefetch_ahead(r + k);
        acc0 = _mm512_fmadd_ps(load_fp8(r + k, 0xffff), _mm512_loadu_ps(x + k), acc0);
        acc1 = _mm512_fmadd_ps(load_fp8(r + k + 16, 0xffff), _mm512_loadu_ps(x + k + 16), acc1);
      }
      for (; k < k1; k += 16) {
        const __mmask16 m = tail_mask(k1 - k);
        acc0 = _mm512_fmadd_ps(load_fp8(r + k, m), _mm512_maskz_loadu_ps(m, x + k), acc0);
      }
      break;
    }
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

// The scales of one 32-column block by lane j of its 16 bytes (elements 2j and 2j + 1): with groups of 16
// the first scale for bytes 0-7, the second for bytes 8-15.
inline __m512 fp4_pair_scales(float first, float second) {
  return _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(first), _mm512_set1_ps(second));
}

// FP4 row with a scale per 16 columns: two scales per 16-byte block, folded into the block's products by
// one multiply of the lanes (fp4_pair_scales), the same work per byte as MXFP4's one.
float fp4_g16_dot(const WeightView& w, int64_t n, const float* x) {
  const auto* bytes = static_cast<const uint8_t*>(row_ptr(w, n));
  const auto* scales = static_cast<const uint8_t*>(w.scales) + n * w.fp4_row_scales();
  const __m512 table = fp4_table();
  const __m512i pair = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  __m512 acc0 = _mm512_setzero_ps();
  __m512 acc1 = _mm512_setzero_ps();
  const int64_t blocks = w.cols / 32;
  auto block = [&](int64_t b, __m512 s, __m512& acc) {
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + b * 16)));
    const __m512 lo = _mm512_permutexvar_ps(v, table);
    const __m512 hi = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), table);
    const float* xb = x + b * 32;  // evens then odds (prepare_mxfp4_x)
    const __m512 p = _mm512_fmadd_ps(lo, _mm512_loadu_ps(xb), _mm512_mul_ps(hi, _mm512_loadu_ps(xb + 16)));
    acc = _mm512_fmadd_ps(p, s, acc);
  };
  int64_t b = 0;
  for (; b + 8 <= blocks; b += 8) {  // 16 scales: 8 blocks
    for (int line = 0; line < 2; ++line) prefetch_ahead_busy(bytes + b * 16 + line * 64);
    const __m512 sf = fp4_scales_x16(w, scales + 2 * b);
    for (int j = 0; j < 8; j += 2) {
      block(b + j, _mm512_permutexvar_ps(_mm512_add_epi32(pair, _mm512_set1_epi32(2 * j)), sf), acc0);
      block(b + j + 1, _mm512_permutexvar_ps(_mm512_add_epi32(pair, _mm512_set1_epi32(2 * j + 2)), sf), acc1);
    }
  }
  for (; b < blocks; ++b)
    block(b, fp4_pair_scales(fp4_scale_value(w, scales[2 * b]), fp4_scale_value(w, scales[2 * b + 1])), acc0);
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

float mxfp4_dot(const WeightView& w, int64_t n, const float* x) {
  if (w.fp4_group() == 16) return fp4_g16_dot(w, n, x);
  const auto* bytes = static_cast<const uint8_t*>(row_ptr(w, n));
  const auto* scales = static_cast<const uint8_t*>(w.scales) + n * (w.cols / 32);
  const __m512 table = fp4_table();
  __m512 acc0 = _mm512_setzero_ps();
  __m512 acc1 = _mm512_setzero_ps();
  const int64_t blocks = w.cols / 32;
  alignas(64) float scale_f[16];
  auto block = [&](int64_t b, float s, __m512& acc) {
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + b * 16)));
    const __m512 lo = _mm512_permutexvar_ps(v, table);  // vpermps reads the index's low 4 bits only
    const __m512 hi = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), table);
    const float* xb = x + b * 32;  // evens then odds (prepare_mxfp4_x)
    const __m512 p = _mm512_fmadd_ps(lo, _mm512_loadu_ps(xb), _mm512_mul_ps(hi, _mm512_loadu_ps(xb + 16)));
    acc = _mm512_fmadd_ps(p, _mm512_set1_ps(s), acc);
  };
  int64_t b = 0;
  for (; b + 16 <= blocks; b += 16) {
    for (int line = 0; line < 4; ++line) prefetch_ahead_busy(bytes + b * 16 + line * 64);
    _mm512_store_ps(scale_f, fp4_scales_x16(w, scales + b));
    for (int j = 0; j < 16; j += 2) {
      block(b + j, scale_f[j], acc0);
      block(b + j + 1, scale_f[j + 1], acc1);
    }
  }
  for (; b < blocks; ++b) block(b, fp4_scale_value(w, scales[b]), acc0);
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

// FP8 row: per scale block a vector partial sum, folded into the total with one FMA by the block
// scale (no horizontal reduction per block).
float fp8_dot(const WeightView& w, int64_t n, const float* x) {
  const auto* r = static_cast<const uint8_t*>(row_ptr(w, n));
  const float* scales = static_cast<const float*>(w.scales) + (n / w.block_rows) * fp8_scale_cols(w);
  __m512 total = _mm512_setzero_ps();
  for (int64_t k0 = 0, b = 0; k0 < w.cols; k0 += w.block_cols, ++b) {
    const int64_t k1 = std::min(w.cols, k0 + w.block_cols);
    __m512 acc0 = _mm512_setzero_ps();
    __m512 acc1 = _mm512_setzero_ps();
    int64_t k = k0;
    for (; k + 32 <= k1; k += 32) {
      prefetch_ahead_busy(r + k);
      const __m512i h =
          fp8_to_f16x32(_mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r + k))));
      acc0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(h)), _mm512_loadu_ps(x + k), acc0);
      acc1 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1)), _mm512_loadu_ps(x + k + 16),
                             acc1);
    }
    for (; k < k1; k += 16) {
      const __mmask16 m = tail_mask(k1 - k);
      acc0 = _mm512_fmadd_ps(load_fp8(r + k, m), _mm512_maskz_loadu_ps(m, x + k), acc0);
    }
    total = _mm512_fmadd_ps(_mm512_add_ps(acc0, acc1), _mm512_set1_ps(scales[b] * kFp8Unscale), total);
  }
  return _mm512_reduce_add_ps(total);
}

float row_dot(const WeightView& w, int64_t n, const float* x) {
  if (w.is_int()) return scalar_row_dot(w, n, x);  // exact float path of integer weights: not hot
  if (w.format == WeightFormat::kMxfp4) return mxfp4_dot(w, n, x);
  if (w.format == WeightFormat::kFp8Block) return fp8_dot(w, n, x);
  return plain_dot(w, row_ptr(w, n), x, 0, w.cols);
}

// FP8 rows through byte tables. Every E4M3 value is a BF16 value (4 significant bits, subnormals
// included; the NaN code gives a BF16 NaN), so two vpermi2b look up the high and low bytes of each value's
// BF16 pattern for 64 weights at once, the sign bit is ORed into the high byte, unpacking interleaves them
// into 16-bit lanes and a shift (even lanes) or a mask (odd lanes) widens them to float32: about half the
// instructions per byte of the F16 conversion (fp8_dot), which keeps these row dots compute-bound. The
// lanes come out in a fixed order per 64 columns (fp8_table_order_x), in which x is laid out once per call.
constexpr uint16_t e4m3_magnitude_bf16(int m) {  // m: the code's low 7 bits
  if (m == 0x7f) return 0x7fc0;
  const int e = m >> 3, f = m & 7;
  if (e != 0) return static_cast<uint16_t>(((e + 120) << 7) | (f << 4));  // 2^(e-7) (1 + f/8)
  if (f == 0) return 0;
  const int p = f >= 4 ? 2 : f >= 2 ? 1 : 0;  // a subnormal f/8 * 2^-6: normalised at its leading bit p
  return static_cast<uint16_t>(((p + 118) << 7) | ((f - (1 << p)) << (7 - p)));
}
struct Fp8ByteTables {
  alignas(64) uint8_t lo[128];
  alignas(64) uint8_t hi[128];
};
constexpr Fp8ByteTables make_fp8_byte_tables() {
  Fp8ByteTables t{};
  for (int m = 0; m < 128; ++m) {
    t.lo[m] = static_cast<uint8_t>(e4m3_magnitude_bf16(m) & 0xff);
    t.hi[m] = static_cast<uint8_t>(e4m3_magnitude_bf16(m) >> 8);
  }
  return t;
}
constexpr Fp8ByteTables kFp8Bytes = make_fp8_byte_tables();
// x up to this many columns is laid out on the stack (128 KiB); wider rows take fp8_dot.
constexpr int64_t kFp8TableMaxCols = 32768;

// vpermi2b is AVX-512 VBMI (Ice Lake, Sapphire Rapids, Zen 4), which the avx512 level does not require
// (Skylake-X and Cooper Lake lack it): checked here, and only the table functions are built for it.
bool fp8_table_path(const WeightView& w) {
  static const bool vbmi = __builtin_cpu_supports("avx512vbmi");
  return vbmi && w.format == WeightFormat::kFp8Block && w.cols % 64 == 0 && w.cols <= kFp8TableMaxCols &&
         (w.block_cols == 32 || w.block_cols % 64 == 0);
}

// Per 64 columns c.., lane q (L = q / 4, j = q % 4) of the four vectors holds columns c + 16L + 2j,
// c + 16L + 2j + 1, c + 16L + 8 + 2j and c + 16L + 9 + 2j (unpacklo / unpackhi of 16-column lanes, then even
// and odd 16-bit halves).
void fp8_table_order_x(const float* x, int64_t cols, float* out) {
  for (int64_t c = 0; c < cols; c += 64) {
    for (int64_t q = 0; q < 16; ++q) {
      const int64_t col = c + 16 * (q / 4) + 2 * (q % 4);
      out[c + q] = x[col];
      out[c + 16 + q] = x[col + 1];
      out[c + 32 + q] = x[col + 8];
      out[c + 48 + q] = x[col + 9];
    }
  }
}

// One FP8 row against x in fp8_table_order_x's order: per 64 columns a vector partial sum, folded into
// the total with one FMA by the block scale (32-column blocks: lanes 0-7 are the first block's, 8-15 the
// second's, as fp4_pair_scales lays them out).
__attribute__((target("avx512vbmi"))) float fp8_table_dot(const WeightView& w, int64_t n, const float* xp) {
  const auto* r = static_cast<const uint8_t*>(row_ptr(w, n));
  const float* scales = static_cast<const float*>(w.scales) + (n / w.block_rows) * fp8_scale_cols(w);
  const __m512i lo0 = _mm512_load_si512(kFp8Bytes.lo), lo1 = _mm512_load_si512(kFp8Bytes.lo + 64);
  const __m512i hi0 = _mm512_load_si512(kFp8Bytes.hi), hi1 = _mm512_load_si512(kFp8Bytes.hi + 64);
  const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i odd = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  const __m512i pair = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  const bool pairs = w.block_cols == 32;
  __m512 total = _mm512_setzero_ps();
  for (int64_t c = 0; c < w.cols; c += 64) {
    prefetch_ahead_busy(r + c);
    const __m512i raw = _mm512_loadu_si512(r + c);
    const __m512i lo = _mm512_permutex2var_epi8(lo0, raw, lo1);  // the index's low 7 bits: the magnitude
    const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(hi0, raw, hi1), raw, sign, 0xf8);
    const __m512i a = _mm512_unpacklo_epi8(lo, hi), b = _mm512_unpackhi_epi8(lo, hi);
    __m512 p = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(a, 16)), _mm512_loadu_ps(xp + c));
    p = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(a, odd)), _mm512_loadu_ps(xp + c + 16), p);
    p = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(b, 16)), _mm512_loadu_ps(xp + c + 32), p);
    p = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(b, odd)), _mm512_loadu_ps(xp + c + 48), p);
    const __m512 s =
        pairs ? _mm512_permutexvar_ps(pair, _mm512_castps128_ps512(_mm_castsi128_ps(_mm_loadl_epi64(
                                                reinterpret_cast<const __m128i*>(scales + c / 32)))))
              : _mm512_set1_ps(scales[c / w.block_cols]);
    total = _mm512_fmadd_ps(p, s, total);
  }
  return _mm512_reduce_add_ps(total);
}

// FP4 rows 128 columns (64 bytes) a step: the bytes loaded as 16 dwords and shifted by 4t (t = 0..7) put
// nibble t of every dword in the low 4 bits that vpermps reads, so one vpermps decodes 16 values with no
// byte widening (vpmovzxbd competes with vpermps for the shuffle port; shifts do not). Vector t, lane d
// holds column 8d + t of the step; x is laid out in that order once per call (fp4_wide_order_x), and the
// group scales are spread to the lanes of their columns by one vpermps per step.
constexpr int64_t kFp4WideMaxCols = 32768;

bool fp4_wide_path(const WeightView& w) {
  return w.format == WeightFormat::kMxfp4 && w.cols % 128 == 0 && w.cols <= kFp4WideMaxCols;
}

// x in mxfp4 order (prepare_mxfp4_x: per 32 columns the evens, then the odds) to fp4_wide_dot's order.
void fp4_wide_order_x(const float* x, int64_t cols, float* out) {
  for (int64_t c = 0; c < cols; c += 128) {
    for (int64_t t = 0; t < 8; ++t) {
      for (int64_t d = 0; d < 16; ++d) {
        const int64_t col = c + 8 * d + t, r = col % 32;
        out[c + 16 * t + d] = x[col - r + (r % 2 == 0 ? r / 2 : 16 + r / 2)];
      }
    }
  }
}

float fp4_wide_dot(const WeightView& w, int64_t n, const float* xq) {
  const auto* bytes = static_cast<const uint8_t*>(row_ptr(w, n));
  const auto* scales = static_cast<const uint8_t*>(w.scales) + n * w.fp4_row_scales();
  const __m512 table = fp4_table();
  const bool g16 = w.fp4_group() == 16;
  // Lane d of a step holds columns 8d.. 8d + 7: group d / 4 of the step's 4 (32 columns) or d / 2 of its 8.
  const __m512i spread = g16 ? _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7)
                             : _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const int64_t groups_per_step = g16 ? 8 : 4;
  __m512 acc0 = _mm512_setzero_ps();
  __m512 acc1 = _mm512_setzero_ps();
  __m512 sf = _mm512_setzero_ps();
  for (int64_t c = 0, step = 0; c < w.cols; c += 128, ++step) {
    const int64_t g0 = step * groups_per_step;
    if (g0 % 16 == 0) {  // 16 scales: 2 steps (groups of 16) or 4 (groups of 32)
      if (w.fp4_row_scales() - g0 >= 16) {
        sf = fp4_scales_x16(w, scales + g0);
      } else {
        alignas(64) float s16[16] = {};
        for (int64_t i = 0; i < w.fp4_row_scales() - g0; ++i) s16[i] = fp4_scale_value(w, scales[g0 + i]);
        sf = _mm512_load_ps(s16);
      }
    }
    prefetch_ahead_busy(bytes + c / 2);
    const __m512i v = _mm512_loadu_si512(bytes + c / 2);
    const float* xs = xq + c;
    __m512 p0 = _mm512_mul_ps(_mm512_permutexvar_ps(v, table), _mm512_loadu_ps(xs));
    __m512 p1 =
        _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), table), _mm512_loadu_ps(xs + 16));
    p0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(v, 8), table), _mm512_loadu_ps(xs + 32), p0);
    p1 =
        _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(v, 12), table), _mm512_loadu_ps(xs + 48), p1);
    p0 =
        _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(v, 16), table), _mm512_loadu_ps(xs + 64), p0);
    p1 =
        _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(v, 20), table), _mm512_loadu_ps(xs + 80), p1);
    p0 =
        _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(v, 24), table), _mm512_loadu_ps(xs + 96), p0);
    p1 = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(v, 28), table), _mm512_loadu_ps(xs + 112),
                         p1);
    const __m512 s =
        _mm512_permutexvar_ps(_mm512_add_epi32(spread, _mm512_set1_epi32(static_cast<int>(g0 % 16))), sf);
    acc0 = _mm512_fmadd_ps(p0, s, acc0);
    acc1 = _mm512_fmadd_ps(p1, s, acc1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

// SimdKernels::order_x: FP4 rows in 128-column steps and FP8 rows through byte tables take x permuted
// within each step, whatever the rows, so that a row's bits never depend on the call.
bool order_x_avx512(const WeightView& w, const float* x, float* out) {
  if (fp4_wide_path(w)) {
    fp4_wide_order_x(x, w.cols, out);
    return true;
  }
  if (fp8_table_path(w)) {
    fp8_table_order_x(x, w.cols, out);
    return true;
  }
  return false;
}

// Rows n0..n1 against x as order_x laid it out (as it is where order_x declines).
void dot_rows_ordered_avx512(const WeightView& w, int64_t n0, int64_t n1, const float* xo, float* y) {
  if (fp4_wide_path(w)) {
    for (int64_t n = n0; n < n1; ++n) y[n - n0] = fp4_wide_dot(w, n, xo);
  } else if (fp8_table_path(w)) {
    for (int64_t n = n0; n < n1; ++n) y[n - n0] = fp8_table_dot(w, n, xo);
  } else {
    for (int64_t n = n0; n < n1; ++n) y[n - n0] = row_dot(w, n, xo);
  }
}

void dot_rows_avx512(const WeightView& w, int64_t n0, int64_t n1, const float* x, float* y) {
  static_assert(kFp4WideMaxCols == kFp8TableMaxCols);
  alignas(64) float xo[kFp8TableMaxCols];  // x laid out for the rows (128 KiB at most)
  dot_rows_ordered_avx512(w, n0, n1, order_x_avx512(w, x, xo) ? xo : x, y);
}

// 16 weights of a plain row of format F from column k (masked lanes read nothing and give 0).
template <WeightFormat F>
inline __m512 load_plain_as(const void* row, int64_t k, __mmask16 m) {
  if constexpr (F == WeightFormat::kF32) {
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(row) + k);
  } else if constexpr (F == WeightFormat::kBF16) {
    return load_bf16(static_cast<const uint16_t*>(row) + k, m);
  } else {
    return load_f16(static_cast<const uint16_t*>(row) + k, m);
  }
}

// One plain row of `cols` elements against NT x at once: y[t * ldy] = row . x t. Each weight vector is
// loaded and widened once for all NT x. Per x the two accumulators, their order, the masked tail and
// the reduction are plain_dot's, so every result has the bits of dot_rows. The row prefetches the
// next one (the same column of it), or the prefetch distance on where rows are shorter: with several x
// kBusyPrefetchBytes, with one the CPU's kPrefetchBytes (0: none).
template <WeightFormat F, int NT>
void plain_dot_row(const WeightView& w, int64_t n, const float* const* xs, float* y, int64_t ldy) {
  constexpr int64_t kElem = F == WeightFormat::kF32 ? 4 : 2;
  const int64_t cols = w.cols;
  const char* row = static_cast<const char*>(row_ptr(w, n));
  const int64_t distance = row_prefetch_bytes<NT>();
  const int64_t ahead = std::max<int64_t>(distance, cols * kElem);
  __m512 a[NT], b[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) a[t] = b[t] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 32 <= cols; k += 32) {
    if (distance != 0) {
      _mm_prefetch(row + ahead + k * kElem, _MM_HINT_T0);
      if constexpr (kElem == 4) _mm_prefetch(row + ahead + k * kElem + 64, _MM_HINT_T0);
    }
    const __m512 w0 = load_plain_as<F>(row, k, 0xffff);
    const __m512 w1 = load_plain_as<F>(row, k + 16, 0xffff);
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      a[t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xs[t] + k), a[t]);
      b[t] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xs[t] + k + 16), b[t]);
    }
  }
  for (; k < cols; k += 16) {
    const __mmask16 m = tail_mask(cols - k);
    const __m512 w0 = load_plain_as<F>(row, k, m);
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) a[t] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(m, xs[t] + k), a[t]);
  }
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) y[t * ldy] = _mm512_reduce_add_ps(_mm512_add_ps(a[t], b[t]));
}

// x in groups of four, three or two against one row at a time (a thread's reads stay one stream: two
// rows at a time measured slower on Zen 4 at 2-16 x); a single x left over goes through dot_rows.
template <WeightFormat F, int NT>
void plain_rows_multi(const WeightView& w, int64_t n0, int64_t n1, const float* const* xs, float* y,
                      int64_t ldy) {
  for (int64_t n = n0; n < n1; ++n) plain_dot_row<F, NT>(w, n, xs, y + (n - n0), ldy);
}

template <WeightFormat F>
void dot_rows_multi_as(const WeightView& w, int64_t n0, int64_t n1, const float* const* xs, int64_t nx,
                       float* y, int64_t ldy) {
  for (int64_t t = 0; t < nx;) {
    const int64_t nt = std::min<int64_t>(4, nx - t);
    float* yt = y + t * ldy;
    if (nt == 4) {
      plain_rows_multi<F, 4>(w, n0, n1, xs + t, yt, ldy);
    } else if (nt == 3) {
      plain_rows_multi<F, 3>(w, n0, n1, xs + t, yt, ldy);
    } else if (nt == 2) {
      plain_rows_multi<F, 2>(w, n0, n1, xs + t, yt, ldy);
    } else {
      dot_rows_avx512(w, n0, n1, xs[t], yt);
    }
    t += nt;
  }
}

void dot_rows_multi_avx512(const WeightView& w, int64_t n0, int64_t n1, const float* const* xs, int64_t nx,
                           float* y, int64_t ldy) {
  switch (w.format) {
    case WeightFormat::kF32:
      return dot_rows_multi_as<WeightFormat::kF32>(w, n0, n1, xs, nx, y, ldy);
    case WeightFormat::kBF16:
      return dot_rows_multi_as<WeightFormat::kBF16>(w, n0, n1, xs, nx, y, ldy);
    case WeightFormat::kF16:
      return dot_rows_multi_as<WeightFormat::kF16>(w, n0, n1, xs, nx, y, ldy);
    default:  // FP8 blocks, MXFP4, INT8 / INT4 (exact path): one x at a time
      for (int64_t t = 0; t < nx; ++t) dot_rows_avx512(w, n0, n1, xs[t], y + t * ldy);
  }
}

// One BF16 row against NT x in BF16, 64 columns a step: per x two accumulators (columns 0-31 and 32-63
// of each step) and a masked tail 32 columns at a time into the first, the same order whatever NT is,
// so every result has the bits of NT = 1. One row at a time keeps a thread's reads one stream (two rows
// at a time measured slower on Zen 4 at 2-4 x). The prefetch distance is the CPU's at every NT: one
// vdpbf16ps per 64-byte weight vector and x keeps the loads issuing as fast as with one x, so the 2 KiB
// prefetch the FMA row dots need would only cost bandwidth here (as it does on Zen 4).
template <int NT>
void bf16x_row(const uint16_t* row, int64_t cols, const uint16_t* const* xs, float* y, int64_t ldy) {
  __m512 a[NT], b[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) a[t] = b[t] = _mm512_setzero_ps();
  const int64_t ahead = kPrefetchBytes;
  int64_t k = 0;
  for (; k + 64 <= cols; k += 64) {
    if (ahead != 0) {
      const char* line = reinterpret_cast<const char*>(row + k) + ahead;
      _mm_prefetch(line, _MM_HINT_T0);
      _mm_prefetch(line + 64, _MM_HINT_T0);
    }
    const __m512bh w0 = (__m512bh)_mm512_loadu_si512(row + k);
    const __m512bh w1 = (__m512bh)_mm512_loadu_si512(row + k + 32);
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      a[t] = _mm512_dpbf16_ps(a[t], w0, (__m512bh)_mm512_loadu_si512(xs[t] + k));
      b[t] = _mm512_dpbf16_ps(b[t], w1, (__m512bh)_mm512_loadu_si512(xs[t] + k + 32));
    }
  }
  for (; k < cols; k += 32) {
    const int64_t left = cols - k;
    const __mmask32 m = left >= 32 ? ~__mmask32(0) : static_cast<__mmask32>((1u << left) - 1u);
    const __m512bh w0 = (__m512bh)_mm512_maskz_loadu_epi16(m, row + k);
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t)
      a[t] = _mm512_dpbf16_ps(a[t], w0, (__m512bh)_mm512_maskz_loadu_epi16(m, xs[t] + k));
  }
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) y[t * ldy] = _mm512_reduce_add_ps(_mm512_add_ps(a[t], b[t]));
}

template <int NT>
void bf16x_rows(const WeightView& w, int64_t n0, int64_t n1, const uint16_t* const* xs, float* y,
                int64_t ldy) {
  const auto* base = static_cast<const uint16_t*>(w.data);
  for (int64_t n = n0; n < n1; ++n) bf16x_row<NT>(base + n * w.cols, w.cols, xs, y + (n - n0), ldy);
}

// x in groups of four, then three, two or one.
void dot_rows_bf16x_avx512(const WeightView& w, int64_t n0, int64_t n1, const uint16_t* const* xbs,
                           int64_t nx, float* y, int64_t ldy) {
  D0_CHECK(w.format == WeightFormat::kBF16);
  for (int64_t t = 0; t < nx;) {
    const int64_t nt = std::min<int64_t>(4, nx - t);
    float* yt = y + t * ldy;
    if (nt == 4) {
      bf16x_rows<4>(w, n0, n1, xbs + t, yt, ldy);
    } else if (nt == 3) {
      bf16x_rows<3>(w, n0, n1, xbs + t, yt, ldy);
    } else if (nt == 2) {
      bf16x_rows<2>(w, n0, n1, xbs + t, yt, ldy);
    } else {
      bf16x_rows<1>(w, n0, n1, xbs + t, yt, ldy);
    }
    t += nt;
  }
}

void dequant_row_avx512(const WeightView& w, int64_t n, int64_t k0, int64_t len, float* out) {
  const void* row = row_ptr(w, n);
  if (w.is_int()) {
    scalar_dequant_row(w, n, k0, len, out);
    return;
  }
  if (w.format == WeightFormat::kMxfp4) {
    if (k0 % 32 != 0 || len % 32 != 0) {
      scalar_dequant_row(w, n, k0, len, out);
      return;
    }
    const auto* bytes = static_cast<const uint8_t*>(row);
    const auto* scales = static_cast<const uint8_t*>(w.scales) + n * w.fp4_row_scales();
    const bool g16 = w.fp4_group() == 16;
    const __m512 table = fp4_table();
    const __m512i even_first = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i even_second =
        _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    for (int64_t j = 0; j < len; j += 32) {
      const int64_t b = (k0 + j) / 32;
      const __m512i v =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + b * 16)));
      const __m512 s =
          g16 ? fp4_pair_scales(fp4_scale_value(w, scales[2 * b]), fp4_scale_value(w, scales[2 * b + 1]))
              : _mm512_set1_ps(fp4_scale_value(w, scales[b]));
      const __m512 lo =
          _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_and_si512(v, _mm512_set1_epi32(15)), table), s);
      const __m512 hi = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), table), s);
      _mm512_storeu_ps(out + j, _mm512_permutex2var_ps(lo, even_first, hi));
      _mm512_storeu_ps(out + j + 16, _mm512_permutex2var_ps(lo, even_second, hi));
    }
    return;
  }
  for (int64_t j = 0; j < len; j += 16) {
    const __mmask16 m = tail_mask(len - j);
    const int64_t k = k0 + j;
    __m512 v;
    switch (w.format) {
      case WeightFormat::kF32:
        v = _mm512_maskz_loadu_ps(m, static_cast<const float*>(row) + k);
        break;
      case WeightFormat::kBF16:
        v = load_bf16(static_cast<const uint16_t*>(row) + k, m);
        break;
      case WeightFormat::kF16:
        v = load_f16(static_cast<const uint16_t*>(row) + k, m);
        break;
      default: {
        // A 16-wide chunk may straddle two scale blocks only if block_cols is not a multiple of 16.
        if (w.block_cols % 16 != 0) {
          scalar_dequant_row(w, n, k, std::min<int64_t>(16, len - j), out + j);
          continue;
        }
        v = _mm512_mul_ps(load_fp8(static_cast<const uint8_t*>(row) + k, m),
                          _mm512_set1_ps(fp8_block_scale(w, n, k) * kFp8Unscale));
        break;
      }
    }
    _mm512_mask_storeu_ps(out + j, m, v);
  }
}

// a: x tile packed [kc][kMr], b: weight panel packed [kc][kNr]; each a value is broadcast straight from
// memory into its FMAs.
template <int MR>
void gemm_tile_fixed(int64_t nr, int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                     bool accumulate) {
  __m512 acc[MR][2];
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  // C is often wider than L2: fetch it now, it is needed only after the K loop.
  for (int i = 0; i < MR; ++i) {
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + 16), _MM_HINT_T0);
  }
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_loadu_ps(b + k * kNr);
    const __m512 b1 = _mm512_loadu_ps(b + k * kNr + 16);
    const float* ak = a + k * kMr;
    for (int i = 0; i < MR; ++i) {
      const __m512 av = _mm512_set1_ps(ak[i]);
      acc[i][0] = _mm512_fmadd_ps(av, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(av, b1, acc[i][1]);
    }
  }
  const __mmask16 m0 = tail_mask(nr);
  const __mmask16 m1 = nr > 16 ? tail_mask(nr - 16) : __mmask16(0);
  for (int i = 0; i < MR; ++i) {
    float* ci = c + i * ldc;
    if (accumulate) {
      acc[i][0] = _mm512_add_ps(acc[i][0], _mm512_maskz_loadu_ps(m0, ci));
      acc[i][1] = _mm512_add_ps(acc[i][1], _mm512_maskz_loadu_ps(m1, ci + 16));
    }
    _mm512_mask_storeu_ps(ci, m0, acc[i][0]);
    _mm512_mask_storeu_ps(ci + 16, m1, acc[i][1]);
  }
}

void gemm_tile_avx512(int64_t mr, int64_t nr, int64_t kc, const float* a, const float* b, float* c,
                      int64_t ldc, bool accumulate) {
  switch (mr) {
    case 6:
      return gemm_tile_fixed<6>(nr, kc, a, b, c, ldc, accumulate);
    case 5:
      return gemm_tile_fixed<5>(nr, kc, a, b, c, ldc, accumulate);
    case 4:
      return gemm_tile_fixed<4>(nr, kc, a, b, c, ldc, accumulate);
    case 3:
      return gemm_tile_fixed<3>(nr, kc, a, b, c, ldc, accumulate);
    case 2:
      return gemm_tile_fixed<2>(nr, kc, a, b, c, ldc, accumulate);
    default:
      return gemm_tile_fixed<1>(nr, kc, a, b, c, ldc, accumulate);
  }
}

float dot_avx512(const float* a, const float* b, int64_t n) {
  __m512 acc0 = _mm512_setzero_ps();
  __m512 acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

void axpy_avx512(float alpha, const float* x, float* y, int64_t n) {
  const __m512 va = _mm512_set1_ps(alpha);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(
        y + i, m, _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
  }
}

// Four rows per pass, each accumulated exactly as dot_avx512 does (two accumulators, the tail in the
// first), so the results are the same bits.
void dot_many_avx512(const float* a, const float* b, int64_t ldb, int64_t rows, int64_t n, float* out) {
  int64_t j = 0;
  for (; j + 4 <= rows; j += 4) {
    __m512 acc0[4], acc1[4];
    for (int r = 0; r < 4; ++r) acc0[r] = acc1[r] = _mm512_setzero_ps();
    const float* bj = b + j * ldb;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
      const __m512 a0 = _mm512_loadu_ps(a + i);
      const __m512 a1 = _mm512_loadu_ps(a + i + 16);
      for (int r = 0; r < 4; ++r) {
        acc0[r] = _mm512_fmadd_ps(a0, _mm512_loadu_ps(bj + r * ldb + i), acc0[r]);
        acc1[r] = _mm512_fmadd_ps(a1, _mm512_loadu_ps(bj + r * ldb + i + 16), acc1[r]);
      }
    }
    for (; i < n; i += 16) {
      const __mmask16 m = tail_mask(n - i);
      const __m512 a0 = _mm512_maskz_loadu_ps(m, a + i);
      for (int r = 0; r < 4; ++r)
        acc0[r] = _mm512_fmadd_ps(a0, _mm512_maskz_loadu_ps(m, bj + r * ldb + i), acc0[r]);
    }
    for (int r = 0; r < 4; ++r) out[j + r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r], acc1[r]));
  }
  for (; j < rows; ++j) out[j] = dot_avx512(a, b + j * ldb, n);
}

// KB keys x LB blocks of 16 query lanes: per column c, LB loads of qt and KB broadcast key elements.
template <int KB, int LB>
void key_query_tile_avx512(const float* k, int64_t ldk, const float* qt, int64_t ldq, int64_t d, float* st) {
  __m512 acc[KB][LB];
#pragma GCC unroll 8
  for (int j = 0; j < KB; ++j) {
#pragma GCC unroll 2
    for (int l = 0; l < LB; ++l) acc[j][l] = _mm512_setzero_ps();
  }
  for (int64_t c = 0; c < d; ++c) {
    __m512 q[LB];
#pragma GCC unroll 2
    for (int l = 0; l < LB; ++l) q[l] = _mm512_loadu_ps(qt + c * ldq + 16 * l);
#pragma GCC unroll 8
    for (int j = 0; j < KB; ++j) {
      const __m512 kv = _mm512_set1_ps(k[j * ldk + c]);
#pragma GCC unroll 2
      for (int l = 0; l < LB; ++l) acc[j][l] = _mm512_fmadd_ps(kv, q[l], acc[j][l]);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < KB; ++j) {
#pragma GCC unroll 2
    for (int l = 0; l < LB; ++l) _mm512_storeu_ps(st + j * ldq + 16 * l, acc[j][l]);
  }
}

void key_query_dots_avx512(const float* k, int64_t ldk, int64_t n, const float* qt, int64_t ldq, int64_t d,
                           float* st) {
  // Lanes in zmm blocks; an odd 8 after them go to ymm (key_query_tile8): twice the zmm rate per useful
  // lane on CPUs that split zmm.
  const int64_t whole = ldq / 16 * 16;
  if (whole < ldq) {
    const int64_t i0 = whole;
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) key_query_tile8<8>(k + j * ldk, ldk, qt + i0, ldq, d, st + j * ldq + i0);
    for (; j < n; ++j) key_query_tile8<1>(k + j * ldk, ldk, qt + i0, ldq, d, st + j * ldq + i0);
  }
  for (int64_t i0 = 0; i0 < whole; i0 += 32) {
    const bool two = i0 + 32 <= whole;
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
      if (two) {
        key_query_tile_avx512<8, 2>(k + j * ldk, ldk, qt + i0, ldq, d, st + j * ldq + i0);
      } else {
        key_query_tile_avx512<8, 1>(k + j * ldk, ldk, qt + i0, ldq, d, st + j * ldq + i0);
      }
    }
    for (; j < n; ++j) {
      if (two) {
        key_query_tile_avx512<1, 2>(k + j * ldk, ldk, qt + i0, ldq, d, st + j * ldq + i0);
      } else {
        key_query_tile_avx512<1, 1>(k + j * ldk, ldk, qt + i0, ldq, d, st + j * ldq + i0);
      }
    }
  }
}

// 64 columns of y at a time in four registers while every row is added.
void axpy_rows_avx512(const float* alpha, const float* x, int64_t ldx, int64_t rows, float* y, int64_t n) {
  for (int64_t i0 = 0; i0 < n; i0 += 64) {
    __mmask16 m[4];
    __m512 acc[4];
    for (int v = 0; v < 4; ++v) {
      m[v] = i0 + 16 * v < n ? tail_mask(n - i0 - 16 * v) : __mmask16(0);
      acc[v] = _mm512_maskz_loadu_ps(m[v], y + i0 + 16 * v);
    }
    for (int64_t j = 0; j < rows; ++j) {
      const __m512 a = _mm512_set1_ps(alpha[j]);
      const float* xj = x + j * ldx + i0;
      for (int v = 0; v < 4; ++v)
        acc[v] = _mm512_fmadd_ps(a, _mm512_maskz_loadu_ps(m[v], xj + 16 * v), acc[v]);
    }
    for (int v = 0; v < 4; ++v) _mm512_mask_storeu_ps(y + i0 + 16 * v, m[v], acc[v]);
  }
}

void scale_avx512(float alpha, float* y, int64_t n) {
  const __m512 va = _mm512_set1_ps(alpha);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(va, _mm512_maskz_loadu_ps(m, y + i)));
  }
}

// exp(x) for x <= 0, as in kernels_avx2.cpp, with scalef doing the 2^i.
inline __m512 exp_neg(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-87.0f), x);  // max returns its second operand for NaN: keep it
  const __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f));
  const __m512 i = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, i);
  __m512 p = _mm512_set1_ps(1.5353362e-4f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3398874e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6180355e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5503378e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022652e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, i);
}

// G lanes' accumulators of 64 columns (4 registers each) over the span's keys: each key's 64 values loaded
// once for the G lanes, p broadcast per lane.
template <int G>
void attend_values_lanes(const float* p, int64_t ldq, int64_t n, const float* v, int64_t ldv, int64_t dv,
                         float* states, int64_t stride) {
  for (int64_t c0 = 0; c0 < dv; c0 += 64) {
    __mmask16 m[4];
    __m512 acc[G][4];
#pragma GCC unroll 4
    for (int u = 0; u < 4; ++u) m[u] = c0 + 16 * u < dv ? tail_mask(dv - c0 - 16 * u) : __mmask16(0);
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) acc[g][u] = _mm512_maskz_loadu_ps(m[u], states + g * stride + c0 + 16 * u);
    }
    for (int64_t j = 0; j < n; ++j) {
      __m512 vj[4];
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) vj[u] = _mm512_maskz_loadu_ps(m[u], v + j * ldv + c0 + 16 * u);
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
        const __m512 pg = _mm512_set1_ps(p[j * ldq + g]);
#pragma GCC unroll 4
        for (int u = 0; u < 4; ++u) acc[g][u] = _mm512_fmadd_ps(pg, vj[u], acc[g][u]);
      }
    }
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) _mm512_mask_storeu_ps(states + g * stride + c0 + 16 * u, m[u], acc[g][u]);
    }
  }
}

void widen_bf16_rows_avx512(const uint16_t* src, int64_t ld, int64_t rows, int64_t cols, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* s = src + r * ld;
    float* o = out + r * cols;
    int64_t c = 0;
    for (; c + 16 <= cols; c += 16) _mm512_storeu_ps(o + c, load_bf16(s + c, __mmask16(0xffff)));
    if (c < cols) {
      const __mmask16 m = tail_mask(cols - c);
      _mm512_mask_storeu_ps(o + c, m, load_bf16(s + c, m));
    }
  }
}

// 16 lanes, or 8 (zero above them) as ymm.
template <bool kFull>
inline __m512 load_lanes(const float* p) {
  if constexpr (kFull) return _mm512_loadu_ps(p);
  return _mm512_zextps256_ps512(_mm256_loadu_ps(p));
}
template <bool kFull>
inline void store_lanes(float* p, __m512 v) {
  if constexpr (kFull) {
    _mm512_storeu_ps(p, v);
  } else {
    _mm256_storeu_ps(p, _mm512_castps512_ps256(v));
  }
}

void attend_span_lanes_avx512(float* st, int64_t ldq, int64_t nq, int64_t n, int64_t pos, const int32_t* lo,
                              const int32_t* hi, float scale, const float* v, int64_t ldv, int64_t dv,
                              float* states, int64_t stride) {
  D0_CHECK(ldq % 8 == 0 && ldq <= kMaxAttentionLanes && nq <= ldq);
  alignas(64) float shift[kMaxAttentionLanes];  // each lane's largest visible score, then its m'
  const __m512 vscale = _mm512_set1_ps(scale);
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  // Blocks of 16 lanes, then an odd 8 (ldq is a multiple of 8), loaded and stored as ymm and computed in
  // the low half of zmm (AVX-512 masked stores measured slower on Zen 4 than plain ones).
  const int64_t whole = ldq / 16 * 16;
  // Scores scaled, -inf where the lane does not see the key; each lane's largest.
  const auto scale_block = [&](int64_t i0, auto full) {
    constexpr bool kFull = decltype(full)::value;
    const __mmask16 m = kFull ? __mmask16(0xffff) : __mmask16(0x00ff);
    const auto load_i = [&](const int32_t* p) {
      if constexpr (kFull) return _mm512_loadu_si512(p);
      return _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    };
    const __m512i vlo = load_i(lo + i0), vhi = load_i(hi + i0);
    __m512 best = neg_inf;
    for (int64_t j = 0; j < n; ++j) {
      const __m512i kp = _mm512_set1_epi32(static_cast<int32_t>(pos + j));
      const __mmask16 seen = _mm512_cmpge_epi32_mask(kp, vlo) & _mm512_cmple_epi32_mask(kp, vhi) & m;
      float* sj = st + j * ldq + i0;
      const __m512 sv = _mm512_mul_ps(load_lanes<kFull>(sj), vscale);
      best = _mm512_mask_max_ps(best, seen, best, sv);
      const __m512 kept = _mm512_mask_blend_ps(seen, neg_inf, sv);
      store_lanes<kFull>(sj, kept);
    }
    _mm512_store_ps(shift + i0, best);
  };
  for (int64_t i0 = 0; i0 < whole; i0 += 16) scale_block(i0, std::true_type{});
  if (whole < ldq) scale_block(whole, std::false_type{});
  rescale_lanes(shift, nq, dv, states, stride, scale_avx512);
  // Exponentials in place (0 where unseen), summed per lane in key order.
  const auto exp_block = [&](int64_t i0, auto full) {
    constexpr bool kFull = decltype(full)::value;
    const __mmask16 m = kFull ? __mmask16(0xffff) : __mmask16(0x00ff);
    const __m512 vm = _mm512_load_ps(shift + i0);
    __m512 sums = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; ++j) {
      float* sj = st + j * ldq + i0;
      const __m512 sv = load_lanes<kFull>(sj);
      const __mmask16 seen = _mm512_cmp_ps_mask(sv, neg_inf, _CMP_NEQ_OQ) & m;
      const __m512 e = _mm512_maskz_mov_ps(seen, exp_neg(_mm512_sub_ps(sv, vm)));
      store_lanes<kFull>(sj, e);
      sums = _mm512_add_ps(sums, e);
    }
    alignas(64) float lane_sums[16];
    _mm512_store_ps(lane_sums, sums);
    for (int64_t i = i0; i < std::min(nq, i0 + 16); ++i) states[i * stride + dv + 1] += lane_sums[i - i0];
  };
  for (int64_t i0 = 0; i0 < whole; i0 += 16) exp_block(i0, std::true_type{});
  if (whole < ldq) exp_block(whole, std::false_type{});
  // Values: four lanes at a time share each key's loads.
  int64_t i = 0;
  for (; i + 4 <= nq; i += 4) attend_values_lanes<4>(st + i, ldq, n, v, ldv, dv, states + i * stride, stride);
  for (; i < nq; ++i) attend_values_lanes<1>(st + i, ldq, n, v, ldv, dv, states + i * stride, stride);
}

// silu(g) u with the sigmoid from exp(-|g|) <= 1, which exp_neg covers: 1 / (1 + e) for g >= 0, e / (1 + e)
// below (no overflow for large |g|; a NaN g stays NaN through the product). Lane by lane: every caller
// gets the same bits for the same g and u.
inline __m512 silu_mul_lanes(__m512 gv, __m512 uv) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 e = exp_neg(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(gv)));
  const __m512 num = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(gv, _mm512_setzero_ps(), _CMP_GE_OQ), e, one);
  const __m512 sig = _mm512_div_ps(num, _mm512_add_ps(one, e));
  return _mm512_mul_ps(_mm512_mul_ps(gv, sig), uv);
}

void silu_mul_avx512(const float* g, const float* u, int64_t n, float* out) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(out + i, m,
                          silu_mul_lanes(_mm512_maskz_loadu_ps(m, g + i), _mm512_maskz_loadu_ps(m, u + i)));
  }
}

float exp_sum_avx512(float* s, int64_t n, float shift) {
  const __m512 vs = _mm512_set1_ps(shift);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 e = exp_neg(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + i), vs));
    _mm512_mask_storeu_ps(s + i, m, e);
    acc = _mm512_mask_add_ps(acc, m, acc, e);
  }
  return _mm512_reduce_add_ps(acc);
}

// a: x tile packed [kp][kMr] pairs (x_tiles in cpu_matmul.cpp's gemm_bf16), b: weight panel [kp][kNr]
// pairs (pack_bf16_panel_avx512).
// The pair of a row is broadcast straight from memory into each vdpbf16ps (an embedded broadcast).
template <int MR>
void gemm_bf16_fixed(int64_t nr, int64_t kp, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc,
                     bool accumulate) {
  __m512 acc[MR][2];
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  // C comes from L3 or memory (y is wider than L2): fetch it now, it is needed only after the K loop.
  for (int i = 0; i < MR; ++i) {
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + 16), _MM_HINT_T0);
  }
  for (int64_t p = 0; p < kp; ++p) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + p * kNr);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + p * kNr + 16);
    const uint32_t* ap = a + p * kMr;
    for (int i = 0; i < MR; ++i) {
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], b0, (__m512bh)_mm512_set1_epi32(static_cast<int>(ap[i])));
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], b1, (__m512bh)_mm512_set1_epi32(static_cast<int>(ap[i])));
    }
  }
  const __mmask16 m0 = tail_mask(nr);
  const __mmask16 m1 = nr > 16 ? tail_mask(nr - 16) : __mmask16(0);
  for (int i = 0; i < MR; ++i) {
    float* ci = c + i * ldc;
    if (accumulate) {
      acc[i][0] = _mm512_add_ps(acc[i][0], _mm512_maskz_loadu_ps(m0, ci));
      acc[i][1] = _mm512_add_ps(acc[i][1], _mm512_maskz_loadu_ps(m1, ci + 16));
    }
    _mm512_mask_storeu_ps(ci, m0, acc[i][0]);
    _mm512_mask_storeu_ps(ci + 16, m1, acc[i][1]);
  }
}

void gemm_tile_bf16_avx512(int64_t mr, int64_t nr, int64_t kp, const uint32_t* a, const uint32_t* b, float* c,
                           int64_t ldc, bool accumulate) {
  switch (mr) {
    case 6:
      return gemm_bf16_fixed<6>(nr, kp, a, b, c, ldc, accumulate);
    case 5:
      return gemm_bf16_fixed<5>(nr, kp, a, b, c, ldc, accumulate);
    case 4:
      return gemm_bf16_fixed<4>(nr, kp, a, b, c, ldc, accumulate);
    case 3:
      return gemm_bf16_fixed<3>(nr, kp, a, b, c, ldc, accumulate);
    case 2:
      return gemm_bf16_fixed<2>(nr, kp, a, b, c, ldc, accumulate);
    default:
      return gemm_bf16_fixed<1>(nr, kp, a, b, c, ldc, accumulate);
  }
}

// In-register transpose of 16 rows of 16 dwords: r[i][j] -> r[j][i].
inline void transpose_16x16_epi32(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  // r[4g + c], 128-bit lane l: rows 4g..4g+3 of column 4l + c.
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // Column 4l + c gathers lane l of r[c], r[4 + c], r[8 + c], r[12 + c].
  __m512i out[16];
  for (int c = 0; c < 4; ++c) {
    const __m512i u0 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x44);
    const __m512i u1 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xee);
    const __m512i v0 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x44);
    const __m512i v1 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xee);
    out[c] = _mm512_shuffle_i32x4(u0, v0, 0x88);
    out[4 + c] = _mm512_shuffle_i32x4(u0, v0, 0xdd);
    out[8 + c] = _mm512_shuffle_i32x4(u1, v1, 0x88);
    out[12 + c] = _mm512_shuffle_i32x4(u1, v1, 0xdd);
  }
  for (int i = 0; i < 16; ++i) r[i] = out[i];
}

// packed[p][j] = (W[j][k0 + 2p], W[j][k0 + 2p + 1]) for p < (kc + 1) / 2, j < kNr: a pair of BF16 per
// dword, so the panel is a dword transpose of the rows, done 16 x 16 in registers. Masked loads give
// the zeros past rows, past kc and in the odd half pair (never the next row's first weight: 0 times a
// NaN would be NaN).
void pack_bf16_panel_avx512(const uint16_t* w, int64_t ldw, int64_t rows, int64_t k0, int64_t kc,
                            uint32_t* packed) {
  const int64_t kp = (kc + 1) / 2;
  for (int64_t j0 = 0; j0 < kNr; j0 += 16) {
    for (int64_t p0 = 0; p0 < kp; p0 += 16) {
      const int64_t elems = std::min<int64_t>(32, kc - 2 * p0);  // BF16 values of this 16-pair column block
      const __mmask32 m = elems >= 32 ? __mmask32(0xffffffffu) : __mmask32((1u << elems) - 1u);
      __m512i r[16];
      for (int i = 0; i < 16; ++i) {
        r[i] = j0 + i < rows ? _mm512_maskz_loadu_epi16(m, w + (j0 + i) * ldw + k0 + 2 * p0)
                             : _mm512_setzero_si512();
      }
      transpose_16x16_epi32(r);
      const int64_t pairs = std::min<int64_t>(16, kp - p0);
      for (int64_t p = 0; p < pairs; ++p) _mm512_storeu_si512(packed + (p0 + p) * kNr + j0, r[p]);
    }
  }
}

// xt[p][t] = (bf16(x[t][2p]), bf16(x[t][2p + 1])): 32 columns of each of 16 rows converted to 16 pairs
// (vcvtne2ps2bf16 rounds to nearest even, as to_bf16), then a 16 x 16 dword transpose.
void pack_bf16_x16_avx512(const float* x, int64_t ldx, int64_t rows, int64_t cols, uint32_t* xt) {
  D0_CHECK(rows <= 16);
  const int64_t kp = (cols + 1) / 2;
  for (int64_t p0 = 0; p0 < kp; p0 += 16) {
    const int64_t c0 = 2 * p0;
    const int64_t left = std::min<int64_t>(32, cols - c0);
    const __mmask16 m_lo = tail_mask(left), m_hi = left > 16 ? tail_mask(left - 16) : __mmask16(0);
    __m512i r[16];
    for (int64_t t = 0; t < 16; ++t) {
      if (t >= rows) {
        r[t] = _mm512_setzero_si512();
        continue;
      }
      const float* row = x + t * ldx + c0;
      const __m512 lo = _mm512_maskz_loadu_ps(m_lo, row), hi = _mm512_maskz_loadu_ps(m_hi, row + 16);
      r[t] = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);  // BF16 of columns c0 .. c0 + 31, in order
    }
    transpose_16x16_epi32(r);
    const int64_t pairs = std::min<int64_t>(16, kp - p0);
    for (int64_t p = 0; p < pairs; ++p) _mm512_storeu_si512(xt + (p0 + p) * 16, r[p]);
  }
}

// acc + x . (the BF16 pair at w, broadcast to every lane), the broadcast folded into the instruction's
// memory operand ({1to16}): GCC has no such form of vdpbf16ps and issues a separate vpbroadcastd, one
// per product where a single tile is in flight, which costs issue slots in a loop bound by them. With
// two tiles one broadcast serves both, so those blocks keep the plain intrinsics.
inline __m512 dpbf16_broadcast(__m512 acc, __m512bh x, const uint16_t* w) {
  asm("vdpbf16ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(x), "m"(*reinterpret_cast<const uint32_t*>(w)));
  return acc;
}

// R rows (R <= 8: 8 accumulators cover vdpbf16ps's latency, and 8 row pointers fit the registers) against
// NT tiles of 16 x lanes (NT <= 2: 16 accumulators). Each step broadcasts one pair of every row, used by
// every tile; the lines of a row last 16 steps, so loads come from L1 once a line is in. The next 8 rows
// are fetched into L2 on the way, one line every other step (the hardware prefetchers alone leave a
// block's 8 short streams waiting on DRAM, even on Zen 4, where the one-x row dots do without).
template <int R, int NT>
void bf16_x16_block(const uint16_t* w, int64_t ldw, int64_t cols, const uint32_t* xt, int64_t tile_stride,
                    float* out, int64_t out_stride) {
  __m512 acc[NT][R];
  const uint16_t* rows[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    rows[r] = w + r * ldw;
#pragma GCC unroll 2
    for (int j = 0; j < NT; ++j) acc[j][r] = _mm512_setzero_ps();
  }
  const int64_t full = cols / 2;
  // Addresses past the matrix are only prefetched (never faults), so integer arithmetic, not pointers.
  const uintptr_t next = reinterpret_cast<uintptr_t>(w) + static_cast<uintptr_t>(16 * ldw);
  const auto row_bytes = static_cast<uintptr_t>(2 * ldw);
  for (int64_t p = 0; p < full; ++p) {
    if ((p & 1) == 0) {
      const auto q = static_cast<uintptr_t>(p);
      _mm_prefetch(reinterpret_cast<const char*>(next + q / 2 % 8 * row_bytes + q / 16 * 64), _MM_HINT_T1);
    }
    __m512bh xv[NT];
#pragma GCC unroll 2
    for (int j = 0; j < NT; ++j) xv[j] = (__m512bh)_mm512_loadu_si512(xt + j * tile_stride + p * 16);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      if constexpr (NT == 1) {
        acc[0][r] = dpbf16_broadcast(acc[0][r], xv[0], rows[r] + 2 * p);
      } else {
        uint32_t pair;
        std::memcpy(&pair, rows[r] + 2 * p, sizeof pair);  // rows may be only 2-byte aligned
        const __m512bh wv = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
#pragma GCC unroll 2
        for (int j = 0; j < NT; ++j) acc[j][r] = _mm512_dpbf16_ps(acc[j][r], xv[j], wv);
      }
    }
  }
  if (cols % 2 != 0) {  // the last column alone, its pair's upper half zero (never the next row's first)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512bh wv = (__m512bh)_mm512_set1_epi32(rows[r][cols - 1]);
#pragma GCC unroll 2
      for (int j = 0; j < NT; ++j)
        acc[j][r] =
            _mm512_dpbf16_ps(acc[j][r], (__m512bh)_mm512_loadu_si512(xt + j * tile_stride + full * 16), wv);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 2
    for (int j = 0; j < NT; ++j) _mm512_storeu_ps(out + j * out_stride + r * 16, acc[j][r]);
  }
}

// R rows against every tile: two at a time (the rows' pairs broadcast once for both), then the odd one;
// the rows stay in L1 from one pair of tiles to the next.
template <int R>
void bf16_x16_tiles(const uint16_t* w, int64_t ldw, int64_t cols, const uint32_t* xt, int64_t tiles,
                    float* out, int64_t out_stride) {
  const int64_t tile_stride = (cols + 1) / 2 * 16;
  int64_t j = 0;
  for (; j + 2 <= tiles; j += 2)
    bf16_x16_block<R, 2>(w, ldw, cols, xt + j * tile_stride, tile_stride, out + j * out_stride, out_stride);
  if (j < tiles)
    bf16_x16_block<R, 1>(w, ldw, cols, xt + j * tile_stride, tile_stride, out + j * out_stride, out_stride);
}

void dot_rows_bf16_x16_avx512(const uint16_t* w, int64_t ldw, int64_t rows, int64_t cols, const uint32_t* xt,
                              int64_t tiles, float* out) {
  const int64_t out_stride = rows * 16;
  int64_t i = 0;
  for (; i + 8 <= rows; i += 8)
    bf16_x16_tiles<8>(w + i * ldw, ldw, cols, xt, tiles, out + i * 16, out_stride);
  const uint16_t* wi = w + i * ldw;
  float* oi = out + i * 16;
  switch (rows - i) {
    case 7:
      return bf16_x16_tiles<7>(wi, ldw, cols, xt, tiles, oi, out_stride);
    case 6:
      return bf16_x16_tiles<6>(wi, ldw, cols, xt, tiles, oi, out_stride);
    case 5:
      return bf16_x16_tiles<5>(wi, ldw, cols, xt, tiles, oi, out_stride);
    case 4:
      return bf16_x16_tiles<4>(wi, ldw, cols, xt, tiles, oi, out_stride);
    case 3:
      return bf16_x16_tiles<3>(wi, ldw, cols, xt, tiles, oi, out_stride);
    case 2:
      return bf16_x16_tiles<2>(wi, ldw, cols, xt, tiles, oi, out_stride);
    case 1:
      return bf16_x16_tiles<1>(wi, ldw, cols, xt, tiles, oi, out_stride);
    default:
      return;
  }
}

// SimdKernels::swiglu_pack_x16: two columns of 16 lanes at a time, each silu_mul_lanes of its g and u,
// rounded to BF16 (vcvtneps2bf16: nearest even, as pack_bf16_x16) and zero-extended into the low and high
// halves of the lanes' dwords.
void swiglu_pack_x16_avx512(const float* g, const float* u, int64_t ld, int64_t n, int64_t lanes,
                            uint32_t* act) {
  const __mmask16 live = tail_mask(lanes);
  const auto column = [&](int64_t c) {
    if (c >= n) return _mm512_setzero_ps();
    const __m512 a =
        silu_mul_lanes(_mm512_maskz_loadu_ps(live, g + c * ld), _mm512_maskz_loadu_ps(live, u + c * ld));
    return _mm512_maskz_mov_ps(live, a);
  };
  for (int64_t c = 0; c < n; c += 2) {
    const __m512i lo = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(column(c)));
    const __m512i hi = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(column(c + 1)));
    _mm512_storeu_si512(act + c / 2 * 16, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
  }
}

// SimdKernels::lanes_to_rows_x16: 16 rows of the tile at a time transposed in registers (a lane's 16 rows
// in one register), then each live lane's row written.
void lanes_to_rows_x16_avx512(const float* tile, int64_t rows, int64_t lanes, const float* bias,
                              const float* w, bool accumulate, float* const* out_rows) {
  for (int64_t r0 = 0; r0 < rows; r0 += 16) {
    const int64_t n = std::min<int64_t>(16, rows - r0);
    const __mmask16 m = tail_mask(n);
    __m512i r[16];
    for (int64_t i = 0; i < 16; ++i)
      r[i] = i < n ? _mm512_loadu_si512(tile + (r0 + i) * 16) : _mm512_setzero_si512();
    transpose_16x16_epi32(r);
    const __m512 b = bias != nullptr ? _mm512_maskz_loadu_ps(m, bias + r0) : _mm512_setzero_ps();
    for (int64_t l = 0; l < lanes; ++l) {
      float* y = out_rows[l] + r0;
      const __m512 v = _mm512_add_ps(_mm512_castsi512_ps(r[l]), b);
      const __m512 wl = _mm512_set1_ps(w != nullptr ? w[l] : 1.0f);
      _mm512_mask_storeu_ps(y, m,
                            accumulate ? _mm512_fmadd_ps(wl, v, _mm512_maskz_loadu_ps(m, y))
                                       : (w != nullptr ? _mm512_mul_ps(wl, v) : v));
    }
  }
}

// packed[k][j] = W[n0 + j][k0 + k] (see SimdKernels::pack_f32_panel): 16 rows x 16 columns at a time,
// loaded as floats, transposed in registers. Masked loads and zero rows give the zeros past kc and past
// rows.
void pack_f32_panel_avx512(const WeightView& w, int64_t n0, int64_t rows, int64_t k0, int64_t kc,
                           float* packed) {
  D0_CHECK(kc <= 256);
  if (w.format == WeightFormat::kBF16) {
    // The BF16 GEMM's pair panel (one dword transpose per 32 columns: half the shuffles of transposing
    // floats), each pair then split into its two floats.
    alignas(64) uint32_t pairs[128 * kNr];  // [(kc + 1) / 2][kNr]
    pack_bf16_panel_avx512(static_cast<const uint16_t*>(row_ptr(w, n0)), w.cols, rows, k0, kc, pairs);
    const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
    for (int64_t p = 0; 2 * p < kc; ++p) {
      for (int64_t j0 = 0; j0 < kNr; j0 += 16) {
        const __m512i v = _mm512_load_si512(pairs + p * kNr + j0);
        _mm512_storeu_si512(packed + 2 * p * kNr + j0, _mm512_slli_epi32(v, 16));
        if (2 * p + 1 < kc) _mm512_storeu_si512(packed + (2 * p + 1) * kNr + j0, _mm512_and_si512(v, high));
      }
    }
    return;
  }
  // F32 and F16 rows are loaded in place; other formats are dequantised row by row first.
  const bool direct = w.format == WeightFormat::kF32 || w.format == WeightFormat::kF16;
  alignas(64) float dequantised[kNr * 256];  // [rows][kc]
  if (!direct) {
    for (int64_t j = 0; j < rows; ++j) dequant_row_avx512(w, n0 + j, k0, kc, dequantised + j * kc);
  }
  const auto load = [&](int64_t j, int64_t c0, __mmask16 m) -> __m512 {
    const void* row = row_ptr(w, n0 + j);
    switch (w.format) {
      case WeightFormat::kF32:
        return _mm512_maskz_loadu_ps(m, static_cast<const float*>(row) + k0 + c0);
      case WeightFormat::kF16:
        return load_f16(static_cast<const uint16_t*>(row) + k0 + c0, m);
      default:
        return _mm512_maskz_loadu_ps(m, dequantised + j * kc + c0);
    }
  };
  for (int64_t j0 = 0; j0 < kNr; j0 += 16) {
    for (int64_t c0 = 0; c0 < kc; c0 += 16) {
      const __mmask16 m = tail_mask(kc - c0);
      __m512i r[16];
      for (int i = 0; i < 16; ++i) {
        r[i] = j0 + i < rows ? _mm512_castps_si512(load(j0 + i, c0, m)) : _mm512_setzero_si512();
      }
      transpose_16x16_epi32(r);
      const int64_t cols = std::min<int64_t>(16, kc - c0);
      for (int64_t k = 0; k < cols; ++k) _mm512_storeu_si512(packed + (c0 + k) * kNr + j0, r[k]);
    }
  }
}

void to_bf16_portable(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(x[i]);
}

// to_bf16_avx512's rounding, widened straight back (a shift into the high half of each lane).
void round_bf16_avx512(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m256i h = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + i));
    _mm512_mask_storeu_ps(y + i, m, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
  }
}

// Round to nearest even like f32_to_bf16 (vcvtneps2bf16 does the same for finite values).
void to_bf16_avx512(const float* x, int64_t n, uint16_t* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(x + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), (__m256i)h);
  }
  for (; i < n; ++i) out[i] = f32_to_bf16(x[i]);
}

}  // namespace

const SimdKernels& avx512_kernels() {
  // vdpbf16ps / vcvtneps2bf16 need AVX-512 BF16 on top of the base AVX-512 of this level.
  const bool has_bf16 = cpu_has_avx512_bf16();
  static const SimdKernels k = [&] {
    SimdKernels t{SimdLevel::kAvx512,
                  dot_rows_avx512,
                  dequant_row_avx512,
                  gemm_tile_avx512,
                  dot_avx512,
                  axpy_avx512,
                  scale_avx512,
                  has_bf16 ? gemm_tile_bf16_avx512 : nullptr,
                  has_bf16 ? to_bf16_avx512 : to_bf16_portable,
                  exp_sum_avx512,
                  cpu_has_avx512_vnni() ? dot_rows_int_avx512_vnni : dot_rows_int_avx512_maddubs,
                  cpu_has_avx512_vnni() ? "avx512-vnni" : "avx2-maddubs"};
    if (has_bf16) t.pack_bf16_panel = pack_bf16_panel_avx512;
    if (has_bf16) t.dot_rows_bf16x = dot_rows_bf16x_avx512;
    if (has_bf16) t.pack_bf16_x16 = pack_bf16_x16_avx512;
    if (has_bf16) t.dot_rows_bf16_x16 = dot_rows_bf16_x16_avx512;
    if (has_bf16) t.swiglu_pack_x16 = swiglu_pack_x16_avx512;
    if (has_bf16) t.lanes_to_rows_x16 = lanes_to_rows_x16_avx512;
    t.pack_f32_panel = pack_f32_panel_avx512;
    t.axpy_rows = axpy_rows_avx512;
    t.dot_many = dot_many_avx512;
    t.key_query_dots = key_query_dots_avx512;
    t.widen_bf16_rows = widen_bf16_rows_avx512;
    t.attend_span_lanes = attend_span_lanes_avx512;
    t.dot_rows_multi = dot_rows_multi_avx512;
    t.order_x = order_x_avx512;
    t.dot_rows_ordered = dot_rows_ordered_avx512;
    t.silu_mul = silu_mul_avx512;
    t.quantize_int8_row = quantize_int8_row_avx512;
    if (has_bf16) t.round_bf16 = round_bf16_avx512;
    return t;
  }();
  return k;
}

}  // namespace day0::cpu
