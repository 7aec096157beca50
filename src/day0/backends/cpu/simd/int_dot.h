#pragma once
// The INT8 / INT4 x int8-activation row dots on 256-bit vectors, one 32-column block per step, shared
// by the AVX2, AVX-VNNI and AVX-512 files (each compiles its own copy with its own flags: internal
// linkage, as weight_rows.h). `Dot` is the u8 x s8 -> 8 x int32 primitive: vpmaddubsw + vpmaddwd on
// AVX2, vpdpbusd with VNNI. INT8 codes are signed, so the usual sign trick feeds it |c| (u8; |-128| =
// 128 fits) and x * sign(c) (s8; x is never -128, see ops/int8_activations.h); INT4 codes are already
// unsigned nibbles. No int16 saturation: |c| * |x| * 2 <= 128 * 127 * 2 < 2^15. Symmetric INT4 (no
// zero points stored: the zero is 8) subtracts 8 * sum(x) from each block's integer sum (SimdKernels::
// dot_rows_int): exact, where a float correction after the scales would cancel.
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "day0/ops/tensor.h"

namespace day0::cpu {
namespace {  // NOLINT(cert-dcl59-cpp, google-build-namespaces): see weight_rows.h

inline float int_hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 h = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)));
}

// The 32 nibbles of one INT4 block as bytes in column order (low nibbles are columns 0..15).
inline __m256i int4_block(const uint8_t* p) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}

// Scale i of scales held as S (WeightView::int_scale_type), as float32: a load, a load and a shift
// (BF16), or a load and vcvtph2ps (F16); every file including this one is compiled with F16C.
template <ScaleType S>
inline float int_scale_at(const void* scales, int64_t i) {
  if constexpr (S == ScaleType::kF32) {
    return static_cast<const float*>(scales)[i];
  } else if constexpr (S == ScaleType::kBF16) {
    const uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(scales)[i]) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  } else {
    return _cvtsh_ss(static_cast<const uint16_t*>(scales)[i]);
  }
}

// Scale i broadcast to 8 float32 lanes: F32 one broadcast load; BF16 a 16-bit broadcast shifted into the
// high half of each lane (the float32 whose top half the BF16 is); F16 a 16-bit broadcast and vcvtph2ps.
// Vector forms keep the widening off the scalar ports: the row dots multiply it by the block's x scale
// as a vector (the same float32 product as the scalar one).
template <ScaleType S>
inline __m256 int_scale_x8(const void* scales, int64_t i) {
  if constexpr (S == ScaleType::kF32) {
    return _mm256_broadcast_ss(static_cast<const float*>(scales) + i);
  } else {
    const auto bits = static_cast<short>(static_cast<const uint16_t*>(scales)[i]);
    if constexpr (S == ScaleType::kBF16)
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_set1_epi16(bits), 16));
    return _mm256_cvtph_ps(_mm_set1_epi16(bits));
  }
}

// f(std::integral_constant<ScaleType, S>) for the scale type t, so that a row-dot template is
// instantiated per scale type rather than testing it per block.
template <class F>
inline void with_scale_type(ScaleType t, F&& f) {
  switch (t) {
    case ScaleType::kBF16:
      f(std::integral_constant<ScaleType, ScaleType::kBF16>{});
      return;
    case ScaleType::kF16:
      f(std::integral_constant<ScaleType, ScaleType::kF16>{});
      return;
    case ScaleType::kF32:
      break;
  }
  f(std::integral_constant<ScaleType, ScaleType::kF32>{});
}

// Rows n.. of an INT8 / INT4 weight and their scales, with the block and group counts a row dot walks.
struct IntRowsAt {
  int64_t blocks;     // 32-column blocks a row
  int64_t row_bytes;  // bytes a row
  int64_t groups;     // scales a row
  int64_t per_group;  // blocks a scale
  const uint8_t* rows;
  const void* scales;  // [.., groups] from row n, as WeightView::int_scale_type
};
inline IntRowsAt int_rows_at(const WeightView& w, int64_t n) {
  const int64_t blocks = (w.cols + kIntBlock - 1) / kIntBlock;
  const int64_t groups = w.int_groups();
  return {blocks,
          w.int_row_bytes(),
          groups,
          groups <= 1 ? blocks : w.group / kIntBlock,
          static_cast<const uint8_t*>(w.data) + n * w.int_row_bytes(),
          static_cast<const uint8_t*>(w.scales) + n * groups * scale_type_bytes(w.int_scale_type)};
}

template <class Dot, bool kInt4, bool kFold, int R, ScaleType S>
inline void int_rows(const WeightView& w, int64_t n, const int8_t* xq, const float* xs, float* y) {
  const auto [blocks, row_bytes, groups, per_group, rows, scales] = int_rows_at(w, n);
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  // The next R rows are prefetched at the same column, a cache line at a time (as the plain GEMV:
  // R row streams at once outrun what the hardware prefetchers start on their own).
  const bool prefetch = R > 1 && n + 2 * R <= w.rows;
  const int64_t block_bytes = kInt4 ? 16 : 32;
  // The group of block b, counted rather than divided: an idiv a block cost the INT4 row dots of a
  // SmolLM2 prompt about a tenth of their time on Zen 3 (perf).
  int64_t g = 0, left_in_group = per_group;
  for (int64_t b = 0; b < blocks; ++b) {
    if (prefetch && (b * block_bytes) % 64 == 0) {
      const uint8_t* next = rows + R * row_bytes + b * block_bytes;
      for (int r = 0; r < R; ++r)
        _mm_prefetch(reinterpret_cast<const char*>(next + r * row_bytes), _MM_HINT_T0);
    }
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * kIntBlock));
    const __m256 sx = _mm256_set1_ps(xs[b]);
    // 8 * the block's codes of x, in the lanes Dot sums them into (the zero point of symmetric INT4).
    __m256i zero_term = _mm256_setzero_si256();
    if constexpr (kFold) zero_term = Dot::dot(_mm256_set1_epi8(8), x);
    for (int r = 0; r < R; ++r) {
      __m256i p;
      if constexpr (kInt4) {
        p = Dot::dot(int4_block(rows + r * row_bytes + b * 16), x);
        if constexpr (kFold) p = _mm256_sub_epi32(p, zero_term);
      } else {
        const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows + r * row_bytes + b * 32));
        p = Dot::dot(_mm256_sign_epi8(c, c), _mm256_sign_epi8(x, c));
      }
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p),
                               _mm256_mul_ps(sx, int_scale_x8<S>(scales, r * groups + g)), acc[r]);
    }
    if (--left_in_group == 0) {
      ++g;
      left_in_group = per_group;
    }
  }
  for (int r = 0; r < R; ++r) y[r] = int_hsum(acc[r]);
}

template <class Dot>
inline void int_dot_rows(const WeightView& w, int64_t n0, int64_t n1, const int8_t* xq, const float* xs,
                         float* y) {
  // Four rows per pass share each activation block load.
  with_scale_type(w.int_scale_type, [&](auto scale_type) {
    constexpr ScaleType S = decltype(scale_type)::value;
    int64_t n = n0;
    if (w.format == WeightFormat::kInt4 && w.zeros == nullptr) {
      for (; n + 4 <= n1; n += 4) int_rows<Dot, true, true, 4, S>(w, n, xq, xs, y + (n - n0));
      for (; n < n1; ++n) int_rows<Dot, true, true, 1, S>(w, n, xq, xs, y + (n - n0));
    } else if (w.format == WeightFormat::kInt4) {
      for (; n + 4 <= n1; n += 4) int_rows<Dot, true, false, 4, S>(w, n, xq, xs, y + (n - n0));
      for (; n < n1; ++n) int_rows<Dot, true, false, 1, S>(w, n, xq, xs, y + (n - n0));
    } else {
      for (; n + 4 <= n1; n += 4) int_rows<Dot, false, false, 4, S>(w, n, xq, xs, y + (n - n0));
      for (; n < n1; ++n) int_rows<Dot, false, false, 1, S>(w, n, xq, xs, y + (n - n0));
    }
  });
}

// vpmaddubsw (u8 x s8 pairs -> int16) then vpmaddwd against ones (pairs -> int32).
struct MaddubsDot {
  static __m256i dot(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
  }
};

}  // namespace
}  // namespace day0::cpu
