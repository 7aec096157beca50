// INT8 / INT4 prompts on 256-bit integer dot products (SimdKernels::gemm_int at the avx2 level): eight
// weight rows at a time, their codes packed so that one vector holds four consecutive columns of each of
// the eight rows. Against one token's four activation codes broadcast to every lane, vpmaddubsw +
// vpmaddwd then leave each row's partial sum in its own lane, so a block's eight rows cost one int-to-
// float conversion, one scale product and one add for all of them, where the row dots pay those per row
// and sum the lanes at the end. The result is dot_rows_int_scalar's bit for bit: each row's exact block
// dots, scaled and added in block order, a multiply then an add (never fused).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "day0/backends/cpu/simd/int_dot.h"
#include "day0/backends/cpu/simd/simd_kernels.h"

namespace day0::cpu {
namespace {

// One packed block of a panel: 8 chunks of 4 columns x 8 rows of codes (INT4 widened to bytes 0..15,
// INT8 as |c|), then for INT8 the same layout of the signed codes (vpsignb's operand), then the eight
// rows' scales of the block's group.
constexpr int64_t kChunkBytes = kIntPanelRows * 4;  // 32: 4 columns of 8 rows

int64_t packed_block_bytes(WeightFormat format) {
  return (format == WeightFormat::kInt8 ? 2 : 1) * 8 * kChunkBytes + kIntPanelRows * 4;
}

// The 32 codes of row `row`'s block b as bytes in column order (INT4 nibbles widened: low nibbles are
// columns 0..15).
inline __m256i block_codes(const WeightView& w, const uint8_t* row, int64_t b) {
  if (w.format == WeightFormat::kInt4) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + b * 16));
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0f));
  }
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + b * 32));
}

// v[r] holds row r's 8 chunks (32-bit lanes); afterwards v[k] holds chunk k of rows 0..7 (an 8 x 8
// transpose of 32-bit elements).
inline void transpose8x32(__m256i v[8]) {
  __m256i a[8], b[8];
  for (int i = 0; i < 8; i += 2) {
    a[i] = _mm256_unpacklo_epi32(v[i], v[i + 1]);
    a[i + 1] = _mm256_unpackhi_epi32(v[i], v[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    b[i] = _mm256_unpacklo_epi64(a[i], a[i + 2]);
    b[i + 1] = _mm256_unpackhi_epi64(a[i], a[i + 2]);
    b[i + 2] = _mm256_unpacklo_epi64(a[i + 1], a[i + 3]);
    b[i + 3] = _mm256_unpackhi_epi64(a[i + 1], a[i + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_permute2x128_si256(b[i], b[i + 4], 0x20);
    v[i + 4] = _mm256_permute2x128_si256(b[i], b[i + 4], 0x31);
  }
}

void pack_panel(const WeightView& w, int64_t n0, int64_t rows, int64_t blocks, uint8_t* pack) {
  const int64_t row_bytes = w.int_row_bytes();
  const int64_t groups = w.int_groups();
  const int64_t per_group = groups <= 1 ? blocks : w.group / kIntBlock;
  const int64_t stride = packed_block_bytes(w.format);
  const bool int8 = w.format == WeightFormat::kInt8;
  const auto* codes = static_cast<const uint8_t*>(w.data);
  int64_t g = 0, left = per_group;
  for (int64_t b = 0; b < blocks; ++b) {
    __m256i v[8];
    for (int64_t r = 0; r < kIntPanelRows; ++r)
      v[r] = r < rows ? block_codes(w, codes + (n0 + r) * row_bytes, b) : _mm256_setzero_si256();
    transpose8x32(v);
    uint8_t* dst = pack + b * stride;
    for (int k = 0; k < 8; ++k) {
      __m256i* chunk = reinterpret_cast<__m256i*>(dst + k * kChunkBytes);
      if (int8) {
        _mm256_store_si256(chunk, _mm256_sign_epi8(v[k], v[k]));  // |c| (|-128| = 128 as u8)
        _mm256_store_si256(reinterpret_cast<__m256i*>(dst + (8 + k) * kChunkBytes), v[k]);
      } else {
        _mm256_store_si256(chunk, v[k]);
      }
    }
    auto* s = reinterpret_cast<float*>(dst + stride - kIntPanelRows * 4);
    for (int64_t r = 0; r < kIntPanelRows; ++r) s[r] = r < rows ? w.int_scale((n0 + r) * groups + g) : 0.0f;
    if (--left == 0) {
      ++g;
      left = per_group;
    }
  }
}

// The rounded product a * b, kept from being fused into a later add (GCC contracts plain vector
// arithmetic into FMAs; the scalar row dot rounds the product and the sum separately).
inline __m256 mul_rounded(__m256 a, __m256 b) {
  __m256 p = _mm256_mul_ps(a, b);
  asm("" : "+x"(p));
  return p;
}

// Tokens t .. t + NT against a packed panel: each chunk load serves the NT tokens, whose sums advance side
// by side (one token at a time, INT8 prompts ran about a fifth slower in day0_gemm_bench on Zen 3, INT4
// ones as fast). kFold: symmetric INT4, whose zero point 8 comes off each block's exact sum as 8 * the
// block's x codes.
template <bool kInt4, bool kFold, int NT>
void panel_token_group(const uint8_t* pack, int64_t blocks, int64_t stride, int64_t t, const int8_t* xq,
                       const float* xs, const int32_t* xsum, __m256 acc[NT]) {
  const __m256i ones = _mm256_set1_epi16(1);
  const int64_t x_stride = blocks * kIntBlock;
  for (int j = 0; j < NT; ++j) acc[j] = _mm256_setzero_ps();  // lane r: row r
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* p = pack + b * stride;
    const auto chunk = [&](int k) {
      return _mm256_load_si256(reinterpret_cast<const __m256i*>(p + k * kChunkBytes));
    };
    // Token j's four codes of chunk k, in every lane.
    const auto xk = [&](int j, int k) {
      int32_t v;
      __builtin_memcpy(&v, xq + (t + j) * x_stride + b * kIntBlock + 4 * k, 4);
      return _mm256_set1_epi32(v);
    };
    __m256i dot[NT];
    if constexpr (kInt4) {
      // Codes 0..15 against |x| <= 127: a pair sums to at most 3810, eight chunks' pairs to 30480, so
      // the 16-bit sums are exact.
      for (int k = 0; k < 8; ++k) {
        const __m256i c = chunk(k);
        for (int j = 0; j < NT; ++j) {
          const __m256i m = _mm256_maddubs_epi16(c, xk(j, k));
          dot[j] = k == 0 ? m : _mm256_add_epi16(dot[j], m);
        }
      }
      for (int j = 0; j < NT; ++j) {
        dot[j] = _mm256_madd_epi16(dot[j], ones);
        if constexpr (kFold)
          dot[j] = _mm256_sub_epi32(dot[j], _mm256_set1_epi32(8 * xsum[(t + j) * blocks + b]));
      }
    } else {
      // |c| <= 128 against |x| <= 127: one pair fits 16 bits, two do not; widen every chunk.
      for (int k = 0; k < 8; ++k) {
        const __m256i c = chunk(k), sign = chunk(8 + k);
        for (int j = 0; j < NT; ++j) {
          const __m256i m =
              _mm256_madd_epi16(_mm256_maddubs_epi16(c, _mm256_sign_epi8(xk(j, k), sign)), ones);
          dot[j] = k == 0 ? m : _mm256_add_epi32(dot[j], m);
        }
      }
    }
    const __m256 ws = _mm256_load_ps(reinterpret_cast<const float*>(p + stride - kIntPanelRows * 4));
    for (int j = 0; j < NT; ++j) {
      const __m256 scale =
          mul_rounded(_mm256_set1_ps(xs[(t + j) * blocks + b]), ws);  // xs[b] * scale_w, as the row dot
      acc[j] = _mm256_add_ps(acc[j], mul_rounded(_mm256_cvtepi32_ps(dot[j]), scale));
    }
  }
}

template <bool kInt4, bool kFold>
void panel_tokens(const uint8_t* pack, int64_t blocks, int64_t stride, int64_t rows, const int8_t* xq,
                  const float* xs, const int32_t* xsum, int64_t tokens, float* out, int64_t ldo) {
  const __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(rows)),
                                          _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  constexpr int kGroup = 4;
  int64_t t = 0;
  for (; t + kGroup <= tokens; t += kGroup) {
    __m256 acc[kGroup];
    panel_token_group<kInt4, kFold, kGroup>(pack, blocks, stride, t, xq, xs, xsum, acc);
    for (int j = 0; j < kGroup; ++j) _mm256_maskstore_ps(out + (t + j) * ldo, live, acc[j]);
  }
  for (; t < tokens; ++t) {
    __m256 acc[1];
    panel_token_group<kInt4, kFold, 1>(pack, blocks, stride, t, xq, xs, xsum, acc);
    _mm256_maskstore_ps(out + t * ldo, live, acc[0]);
  }
}

// One pair of blocks (2b, 2b + 1) of a token laid out for int4_pair_rows: the codes of columns 0..15 of
// both blocks, then those of columns 16..31 (the order a 32-byte load of two INT4 blocks unpacks to), 8 *
// their sums in the lanes vpmaddwd leaves them in (symmetric INT4's zero point), and the two scales, each
// over the four lanes of its block.
struct Int4PairX {
  alignas(32) int8_t lo[32];
  int8_t hi[32];
  int32_t zero_term[8];
  float scale[8];
};

// Rows n .. n + R of an INT4 weight against a prepared token: two blocks a step from one 32-byte load.
// Scales i and i + 1 (adjacent in memory: groups of 32 columns) in the low and the high four lanes, from
// one load: BF16 pairs shifted into each lane's high half by a per-lane shift and masked, F16 pairs widened
// and spread by vpermps, F32 pairs spread by vpermps. Two broadcasts and a lane permute cost the INT4 g32
// row dots about a tenth more on Zen 3 (one core, rows in L1: 5.0 against 4.6 TSC cycles per 64 columns).
template <ScaleType S>
inline __m256 int_scale_pair_x8(const void* scales, int64_t i) {
  const __m256i spread = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
  if constexpr (S == ScaleType::kF32) {
    const auto* f = static_cast<const float*>(scales) + i;
    double pair;
    std::memcpy(&pair, f, sizeof pair);
    return _mm256_permutevar8x32_ps(_mm256_castpd_ps(_mm256_set1_pd(pair)), spread);
  } else {
    int32_t pair;
    std::memcpy(&pair, static_cast<const uint16_t*>(scales) + i, sizeof pair);
    if constexpr (S == ScaleType::kBF16) {
      const __m256i high_first = _mm256_setr_epi32(16, 16, 16, 16, 0, 0, 0, 0);
      return _mm256_castsi256_ps(_mm256_and_si256(_mm256_sllv_epi32(_mm256_set1_epi32(pair), high_first),
                                                  _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
    }
    return _mm256_permutevar8x32_ps(_mm256_cvtph_ps(_mm_set1_epi32(pair)), spread);
  }
}

template <bool kFold, int R, ScaleType S>
void int4_pair_rows(const WeightView& w, int64_t n, const Int4PairX* xp, const int8_t* xq, const float* xs,
                    float* y) {
  const int64_t blocks = (w.cols + kIntBlock - 1) / kIntBlock;
  const int64_t row_bytes = w.int_row_bytes();
  const int64_t groups = w.int_groups();
  const int64_t per_group = groups <= 1 ? blocks : w.group / kIntBlock;
  const auto* rows = static_cast<const uint8_t*>(w.data) + n * row_bytes;
  const void* scales = static_cast<const uint8_t*>(w.scales) + n * groups * scale_type_bytes(S);
  const __m256i mask = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
  const bool prefetch = R > 1 && n + 2 * R <= w.rows;
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  int64_t g0 = 0, left0 = per_group;  // the group of block 2p, counted
  const int64_t pairs = blocks / 2;
  for (int64_t p = 0; p < pairs; ++p) {
    const int64_t g1 = left0 == 1 ? g0 + 1 : g0;  // the group of block 2p + 1
    const Int4PairX& x = xp[p];
    const __m256i xlo = _mm256_load_si256(reinterpret_cast<const __m256i*>(x.lo));
    const __m256i xhi = _mm256_load_si256(reinterpret_cast<const __m256i*>(x.hi));
    const __m256 sx = _mm256_load_ps(x.scale);
    if (prefetch && p % 2 == 0) {
      for (int r = 0; r < R; ++r)
        _mm_prefetch(reinterpret_cast<const char*>(rows + (R + r) * row_bytes + p * 32), _MM_HINT_T0);
    }
    const bool two_groups = g1 != g0;
    for (int r = 0; r < R; ++r) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows + r * row_bytes + p * 32));
      const __m256i lo = _mm256_and_si256(v, mask);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
      __m256i dot = _mm256_madd_epi16(
          _mm256_add_epi16(_mm256_maddubs_epi16(lo, xlo), _mm256_maddubs_epi16(hi, xhi)), ones);
      if constexpr (kFold)
        dot = _mm256_sub_epi32(dot, _mm256_load_si256(reinterpret_cast<const __m256i*>(x.zero_term)));
      // Block 2p's scale in the low four lanes, block 2p + 1's in the high four.
      const __m256 ws = two_groups ? int_scale_pair_x8<S>(scales, r * groups + g0)
                                   : int_scale_x8<S>(scales, r * groups + g0);
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(sx, ws), acc[r]);
    }
    // Two blocks on: the group of block 2p + 2.
    left0 -= 2;
    while (left0 <= 0) {
      ++g0;
      left0 += per_group;
    }
  }
  if (blocks % 2 == 1) {  // the last block alone, as the row dots take it
    const int64_t b = blocks - 1;
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * kIntBlock));
    __m256i zero_term = _mm256_setzero_si256();
    if constexpr (kFold) zero_term = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(8), x), ones);
    for (int r = 0; r < R; ++r) {
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows + r * row_bytes + b * 16));
      const __m256i c = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), mask);
      const __m256i dot = _mm256_sub_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(c, x), ones), zero_term);
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot),
                               _mm256_set1_ps(xs[b] * int_scale_at<S>(scales, r * groups + g0)), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    const __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc[r]), _mm256_extractf128_ps(acc[r], 1));
    const __m128 q = _mm_add_ps(h, _mm_movehl_ps(h, h));
    y[r] = _mm_cvtss_f32(_mm_add_ss(q, _mm_shuffle_ps(q, q, 1)));
  }
}

}  // namespace

int64_t int_x_prepared_bytes(int64_t cols) {
  return (cols + kIntBlock - 1) / kIntBlock / 2 * static_cast<int64_t>(sizeof(Int4PairX));
}

bool prepare_int_x_avx2(const WeightView& w, const int8_t* xq, const float* xs, uint8_t* out) {
  if (w.format != WeightFormat::kInt4) return false;
  const int64_t pairs = (w.cols + kIntBlock - 1) / kIntBlock / 2;
  auto* xp = reinterpret_cast<Int4PairX*>(out);
  const __m256i eight = _mm256_set1_epi8(8), ones = _mm256_set1_epi16(1);
  for (int64_t p = 0; p < pairs; ++p) {
    const int8_t* a = xq + 2 * p * kIntBlock;  // block 2p, then 2p + 1
    const __m256i lo = _mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 32)),
                                        _mm_loadu_si128(reinterpret_cast<const __m128i*>(a)));
    const __m256i hi = _mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 48)),
                                        _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 16)));
    _mm256_store_si256(reinterpret_cast<__m256i*>(xp[p].lo), lo);
    _mm256_store_si256(reinterpret_cast<__m256i*>(xp[p].hi), hi);
    const __m256i z = _mm256_madd_epi16(
        _mm256_add_epi16(_mm256_maddubs_epi16(eight, lo), _mm256_maddubs_epi16(eight, hi)), ones);
    _mm256_store_si256(reinterpret_cast<__m256i*>(xp[p].zero_term), z);
    _mm256_store_ps(xp[p].scale, _mm256_set_m128(_mm_set1_ps(xs[2 * p + 1]), _mm_set1_ps(xs[2 * p])));
  }
  return true;
}

void dot_rows_int_prepared_avx2(const WeightView& w, int64_t n0, int64_t n1, const uint8_t* prepared,
                                const int8_t* xq, const float* xs, float* y) {
  const auto* xp = reinterpret_cast<const Int4PairX*>(prepared);
  with_scale_type(w.int_scale_type, [&](auto scale_type) {
    constexpr ScaleType S = decltype(scale_type)::value;
    int64_t n = n0;
    if (w.zeros == nullptr) {
      for (; n + 4 <= n1; n += 4) int4_pair_rows<true, 4, S>(w, n, xp, xq, xs, y + (n - n0));
      for (; n < n1; ++n) int4_pair_rows<true, 1, S>(w, n, xp, xq, xs, y + (n - n0));
    } else {
      for (; n + 4 <= n1; n += 4) int4_pair_rows<false, 4, S>(w, n, xp, xq, xs, y + (n - n0));
      for (; n < n1; ++n) int4_pair_rows<false, 1, S>(w, n, xp, xq, xs, y + (n - n0));
    }
  });
}

// quantize_activation_row's arithmetic on 32 floats at a time: the same amax, the same float32 product
// x * (127 / amax) rounded half to even (vcvtps2dq under the default rounding mode, as nearbyint), so every
// code, scale and sum equals it. Lanes past n load as zeros, which leave amax and the sum unchanged and
// make the padding codes 0.
void quantize_int8_row_avx2(const float* x, int64_t n, int8_t* q, float* scale, int32_t* sum) {
  const int64_t blocks = (n + kIntBlock - 1) / kIntBlock;
  const __m256i abs_bits = _mm256_set1_epi32(0x7fffffff);
  const __m256i largest_finite = _mm256_set1_epi32(0x7f7fffff);
  const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t k0 = b * kIntBlock;
    __m256 v[4];
    __m256i a[4];
    __m256i bad = _mm256_setzero_si256();
    for (int i = 0; i < 4; ++i) {
      const int64_t left = n - k0 - 8 * i;
      if (left >= 8) {
        v[i] = _mm256_loadu_ps(x + k0 + 8 * i);
      } else if (left > 0) {
        v[i] = _mm256_maskload_ps(x + k0 + 8 * i,
                                  _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(left)), lane));
      } else {
        v[i] = _mm256_setzero_ps();
      }
      a[i] = _mm256_and_si256(_mm256_castps_si256(v[i]), abs_bits);  // |x| as bits
      bad = _mm256_or_si256(bad, _mm256_cmpgt_epi32(a[i], largest_finite));
    }
    int8_t* qb = q + k0;
    // An infinity or a NaN (exponent all ones) anywhere in the block: a NaN scale, zero codes.
    if (_mm256_movemask_epi8(bad) != 0) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb), _mm256_setzero_si256());
      scale[b] = NAN;
      sum[b] = 0;
      continue;
    }
    // Finite magnitudes order as their bits do.
    __m256i m = _mm256_max_epu32(_mm256_max_epu32(a[0], a[1]), _mm256_max_epu32(a[2], a[3]));
    __m128i m4 = _mm_max_epu32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
    m4 = _mm_max_epu32(m4, _mm_shuffle_epi32(m4, 0x4e));
    m4 = _mm_max_epu32(m4, _mm_shuffle_epi32(m4, 0xb1));
    const float amax = _mm_cvtss_f32(_mm_castsi128_ps(m4));
    if (amax == 0.0f) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb), _mm256_setzero_si256());
      scale[b] = 0.0f;
      sum[b] = 0;
      continue;
    }
    scale[b] = amax / 127.0f;
    const __m256 inv = _mm256_set1_ps(127.0f / amax);
    __m256i c[4];
    for (int i = 0; i < 4; ++i)
      c[i] = _mm256_min_epi32(_mm256_max_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(v[i], inv)), lo), hi);
    // Packing works within 128-bit halves: the permutation puts the four 8-code runs back in order.
    const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb), _mm256_permutevar8x32_epi32(bytes, order));
    const __m256i s8 = _mm256_add_epi32(_mm256_add_epi32(c[0], c[1]), _mm256_add_epi32(c[2], c[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
    sum[b] = _mm_cvtsi128_si32(s4);
  }
}

int64_t gemm_int_pack_bytes(const WeightView& w) {
  return (w.cols + kIntBlock - 1) / kIntBlock * packed_block_bytes(w.format);
}

void gemm_int_avx2(const WeightView& w, int64_t n0, int64_t rows, const int8_t* xq, const float* xs,
                   const int32_t* xsum, int64_t tokens, uint8_t* w_pack, float* out, int64_t ldo) {
  const int64_t blocks = (w.cols + kIntBlock - 1) / kIntBlock;
  pack_panel(w, n0, rows, blocks, w_pack);
  const int64_t stride = packed_block_bytes(w.format);
  if (w.format == WeightFormat::kInt8) {
    panel_tokens<false, false>(w_pack, blocks, stride, rows, xq, xs, xsum, tokens, out, ldo);
  } else if (w.zeros == nullptr) {
    panel_tokens<true, true>(w_pack, blocks, stride, rows, xq, xs, xsum, tokens, out, ldo);
  } else {
    panel_tokens<true, false>(w_pack, blocks, stride, rows, xq, xs, xsum, tokens, out, ldo);
  }
}

}  // namespace day0::cpu
