// The AMX level: the AVX-512 table plus the BF16 GEMM on AMX tiles (TDPBF16PS: a 16 x 16 FP32 tile
// += a 16 x 32 BF16 tile times a 32 x 16 one, 8192 multiply-adds per instruction, 16 times the work of
// one vdpbf16ps) and, where the CPU has AMX-INT8, the INT8 / INT4 GEMM on int8 tiles (TDPBSSD /
// TDPBUSD). Compiled with the AMX flags; only called where cpu_has_amx_bf16() (and cpu_has_amx_int8()).
// GCC 12's AVX-512 headers start some intrinsics from _mm512_undefined_ps(), which -Wuninitialized flags.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "day0/backends/cpu/simd/simd_kernels.h"

namespace day0::cpu {

namespace {

// The 64-byte tile configuration LDTILECFG reads (palette 1: eight tiles of at most 16 rows x 64 bytes).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles 0-3: the 2 x 2 accumulators C[n half][m half] (16 x 16 FP32); 4, 5: two 16-row blocks of
// weights (16 x 32 BF16); 6, 7: two 16-column blocks of x^T (16 pairs x 16 columns x 2 BF16).
void configure_tiles() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  _tile_loadconfig(&cfg);
}

// r[i][j] -> r[j][i] for 16 x 16 32-bit lanes: pairs, then quads within 128-bit lanes, then the lanes.
void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  __m512 u[16];
  for (int i = 0; i < 16; i += 4) {
    const __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]);
    const __m512d c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
    u[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));      // column 4L + 0 of rows i .. i + 3
    u[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));  // 4L + 1
    u[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));  // 4L + 2
    u[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));  // 4L + 3
  }
  for (int j = 0; j < 4; ++j) {
    const __m512 s0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x44);       // lanes A0 A1 B0 B1
    const __m512 s1 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xEE);       // A2 A3 B2 B3
    const __m512 s2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x44);  // C0 C1 D0 D1
    const __m512 s3 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xEE);  // C2 C3 D2 D3
    r[j] = _mm512_shuffle_f32x4(s0, s2, 0x88);                          // column j: A0 B0 C0 D0
    r[4 + j] = _mm512_shuffle_f32x4(s0, s2, 0xDD);                      // column 4 + j
    r[8 + j] = _mm512_shuffle_f32x4(s1, s3, 0x88);
    r[12 + j] = _mm512_shuffle_f32x4(s1, s3, 0xDD);
  }
}

__mmask16 first_lanes(int64_t n) {
  if (n <= 0) return 0;
  return n >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << n) - 1u);
}

void amx_pack_x_impl(const float* x, int64_t ldx, int64_t rows, int64_t k, int64_t k_pad, uint32_t* xp,
                     int64_t m0) {
  const int64_t pairs = k_pad / 2;
  for (int64_t r0 = 0; r0 < rows; r0 += 16) {
    uint32_t* block = xp + (m0 + r0) / 16 * pairs * 16;  // [pairs][16]
    for (int64_t k0 = 0; k0 < k_pad; k0 += 32) {
      __m512 v[16];  // row i: 16 BF16 pairs of x row r0 + i, columns k0 .. k0 + 31
      for (int i = 0; i < 16; ++i) {
        if (r0 + i >= rows) {
          v[i] = _mm512_setzero_ps();
          continue;
        }
        const float* row = x + (r0 + i) * ldx + k0;
        const __m512 lo = _mm512_maskz_loadu_ps(first_lanes(k - k0), row);
        const __m512 hi = _mm512_maskz_loadu_ps(first_lanes(k - k0 - 16), row + 16);
        v[i] = _mm512_castsi512_ps((__m512i)_mm512_cvtne2ps_pbh(hi, lo));
      }
      transpose16(v);  // row j: pair k0 / 2 + j of the 16 x rows
      for (int j = 0; j < 16; ++j) _mm512_storeu_ps(block + (k0 / 2 + j) * 16, v[j]);
    }
  }
}

// w_pack[(h * steps + s) * 512 + r * 32 + c] = W[16 h + r][32 s + c]: tile (h, s) is 1 KiB at
// w_pack + (h * steps + s) * 512; zero past w_rows / w_cols.
void pack_weights(const AmxBlock& b) {
  const int64_t steps = b.kc / 32;
  for (int64_t n = 0; n < 32; ++n) {
    uint16_t* dst = b.w_pack + (n / 16) * steps * 512 + (n % 16) * 32;
    if (n >= b.w_rows) {
      for (int64_t st = 0; st < steps; ++st) _mm512_store_si512(dst + st * 512, _mm512_setzero_si512());
      continue;
    }
    const uint16_t* src = b.w + n * b.ldw;
    for (int64_t st = 0; st < steps; ++st) {
      const int64_t left = b.w_cols - 32 * st;
      const __mmask32 lanes = left >= 32  ? ~__mmask32(0)
                              : left <= 0 ? __mmask32(0)
                                          : (__mmask32(1) << left) - 1;
      _mm512_store_si512(dst + st * 512, _mm512_maskz_loadu_epi16(lanes, src + 32 * st));
    }
  }
}

// acc tile (n half nh, m half mh) stored row-major [16 n][16 m] in c: into y rows m (16 of them).
void write_tile(const AmxBlock& b, const float* c, int64_t m_first, int64_t n_first) {
  __m512 r[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(c + 16 * i);
  transpose16(r);  // row i: m = m_first + i, lanes n_first .. n_first + 15
  const __mmask16 lanes = first_lanes(b.cols - n_first);
  if (lanes == 0) return;
  const __m512 bias = b.bias ? _mm512_maskz_loadu_ps(lanes, b.bias + n_first) : _mm512_setzero_ps();
  for (int i = 0; i < 16 && m_first + i < b.rows; ++i) {
    float* y = b.y + (m_first + i) * b.ldy + n_first;
    __m512 v = _mm512_add_ps(r[i], bias);
    if (b.accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(lanes, y));
    _mm512_mask_storeu_ps(y, lanes, v);
  }
}

void gemm_bf16_amx_block(const AmxBlock& b) {
  pack_weights(b);
  configure_tiles();
  const int64_t steps = b.kc / 32;
  const auto s_stride = static_cast<long>(b.mpad * 4);  // bytes between stage rows
  const uint16_t* w0 = b.w_pack;                        // rows 0..15: tile s at w0 + 512 s
  const uint16_t* w1 = b.w_pack + steps * 512;          // rows 16..31
  alignas(64) float c[4][16 * 16];
  for (int64_t m0 = 0; m0 < b.mpad; m0 += 32) {
    float* s0 = b.stage ? b.stage + m0 : nullptr;                // stage rows 0..15 of the weight block
    float* s1 = b.stage ? b.stage + 16 * b.mpad + m0 : nullptr;  // rows 16..31
    if (b.first) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
    } else {
      _tile_loadd(0, s0, s_stride);
      _tile_loadd(1, s0 + 16, s_stride);
      _tile_loadd(2, s1, s_stride);
      _tile_loadd(3, s1 + 16, s_stride);
    }
    // B tiles of x rows m0 .. m0 + 15 and m0 + 16 .. m0 + 31: [pairs][16] each, from pair k0 / 2.
    const uint32_t* x0 = b.xp + (m0 / 16 * b.pairs + b.k0 / 2) * 16;
    const uint32_t* x1 = x0 + b.pairs * 16;
    for (int64_t st = 0; st < steps; ++st) {
      _tile_loadd(4, w0 + st * 512, 64);
      _tile_loadd(5, w1 + st * 512, 64);
      _tile_loadd(6, x0 + st * 256, 64);
      _tile_loadd(7, x1 + st * 256, 64);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    if (!b.last) {
      _tile_stored(0, s0, s_stride);
      _tile_stored(1, s0 + 16, s_stride);
      _tile_stored(2, s1, s_stride);
      _tile_stored(3, s1 + 16, s_stride);
      continue;
    }
    if (m0 >= b.rows) continue;
    _tile_stored(0, c[0], 64);
    _tile_stored(1, c[1], 64);
    _tile_stored(2, c[2], 64);
    _tile_stored(3, c[3], 64);
    write_tile(b, c[0], m0, 0);
    write_tile(b, c[1], m0 + 16, 0);
    write_tile(b, c[2], m0, 16);
    write_tile(b, c[3], m0 + 16, 16);
  }
  _tile_release();
}

// INT8 / INT4 tiles (gemm_int_amx). Per block of 32 columns: C (16 weight rows x 16 tokens, int32) =
// A (16 rows x 32 code bytes) times B (8 rows x 16 tokens x 4 activation bytes). Even blocks use tiles
// 0 (C), 2 (A), 4 (B), odd ones 1, 3, 5, so the next block's tile work can overlap this one's float sums.
void configure_int_tiles() {
  TileConfig cfg;
  for (int t = 0; t < 2; ++t) {
    cfg.colsb[t] = 64;  // C: 16 x 16 int32
    cfg.rows[t] = 16;
    cfg.colsb[2 + t] = 32;  // A: 16 rows x one block of codes
    cfg.rows[2 + t] = 16;
    cfg.colsb[4 + t] = 64;  // B: 8 groups of 4 columns x 16 tokens
    cfg.rows[4 + t] = 8;
  }
  _tile_loadconfig(&cfg);
}

// w_pack[(h * blocks + b) * 512 + r * 32 + c] = code of row n0 + 16 h + r, column 32 b + c (INT4 widened
// to a byte 0..15, or to code - 8 in -8..7 for symmetric INT4: its zero point folded into the signed
// tiles' exact sums), zero for rows past `rows`: tile (h, b) is 512 contiguous bytes.
void pack_int_rows(const WeightView& w, int64_t n0, int64_t rows, int64_t blocks, uint8_t* w_pack) {
  const bool centred = w.format == WeightFormat::kInt4 && w.zeros == nullptr;
  const int64_t row_bytes = w.int_row_bytes();
  const auto* codes = static_cast<const uint8_t*>(w.data);
  for (int64_t r = 0; r < kIntTileRows; ++r) {
    uint8_t* dst = w_pack + (r / 16) * blocks * 512 + (r % 16) * 32;
    if (r >= rows) {
      for (int64_t b = 0; b < blocks; ++b)
        _mm256_store_si256(reinterpret_cast<__m256i*>(dst + b * 512), _mm256_setzero_si256());
      continue;
    }
    const uint8_t* src = codes + (n0 + r) * row_bytes;
    for (int64_t b = 0; b < blocks; ++b) {
      __m256i v;
      if (w.format == WeightFormat::kInt4) {  // low nibbles are columns 0..15, high ones 16..31
        const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + b * 16));
        v = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0f));
        if (centred) v = _mm256_sub_epi8(v, _mm256_set1_epi8(8));
      } else {
        v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + b * 32));
      }
      _mm256_store_si256(reinterpret_cast<__m256i*>(dst + b * 512), v);
    }
  }
}

// acc[i] (+)= float(C row i) * (xs * sw[i]) for the 16 rows of one C tile: a multiply, then an add, as
// the scalar row dot rounds them. The explicitly rounded forms (round to nearest, as the plain ones)
// keep GCC from fusing them into one FMA, which it does to plain vector arithmetic in C++ mode.
// Rows i >= live (past the matrix) take scale 0 and are never read back.
inline void add_block(const int32_t* c, __m512 xs, const float* sw, int64_t groups, int64_t live,
                      __m512 acc[16]) {
  constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  for (int i = 0; i < 16; ++i) {
    const __m512 s = _mm512_mul_round_ps(xs, _mm512_set1_ps(i < live ? sw[i * groups] : 0.0f), kNearest);
    const __m512 dot = _mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * i));
    acc[i] = _mm512_add_round_ps(acc[i], _mm512_mul_round_ps(dot, s, kNearest), kNearest);
  }
}

// kUnsigned: codes 0..15 (INT4 with stored zero points) on TDPBUSD; else signed codes on TDPBSSD.
template <bool kUnsigned>
void gemm_int_amx_tiles(const WeightView& w, int64_t n0, int64_t rows, const int8_t* xp, const float* xsp,
                        int64_t tokens, uint8_t* w_pack, float* out, int64_t ldo) {
  const int64_t blocks = (w.cols + kIntBlock - 1) / kIntBlock;
  const int64_t groups = w.int_groups();
  const int64_t per_group = groups <= 1 ? blocks : w.group / kIntBlock;
  pack_int_rows(w, n0, rows, blocks, w_pack);
  configure_int_tiles();
  // Rows n0 .. n0 + rows' scales [rows, groups] as float32: BF16 / F16 ones widened once per panel.
  const float* scales = static_cast<const float*>(w.scales) + n0 * groups;
  thread_local std::vector<float> widened;
  if (w.int_scale_type != ScaleType::kF32) {
    widened.resize(static_cast<size_t>(rows * groups));
    for (int64_t i = 0; i < rows * groups; ++i)
      widened[static_cast<size_t>(i)] = w.int_scale(n0 * groups + i);
    scales = widened.data();
  }
  alignas(64) int32_t c[2][16 * 16];
  const int64_t tiles = (tokens + 15) / 16;
  for (int64_t h = 0; h * 16 < rows; ++h) {
    const uint8_t* a = w_pack + h * blocks * 512;
    const float* sw = scales + 16 * h * groups;  // row i, group g at sw[i * groups + g]
    const int64_t live = std::min<int64_t>(16, rows - 16 * h);
    for (int64_t u = 0; u < tiles; ++u) {
      const int8_t* bx = xp + u * blocks * 512;
      const float* bs = xsp + u * blocks * 16;
      __m512 acc[16];
      for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
      int64_t b = 0;
      for (; b + 2 <= blocks; b += 2) {
        _tile_zero(0);
        _tile_loadd(2, a + b * 512, 32);
        _tile_loadd(4, bx + b * 512, 64);
        _tile_zero(1);
        _tile_loadd(3, a + (b + 1) * 512, 32);
        _tile_loadd(5, bx + (b + 1) * 512, 64);
        if constexpr (kUnsigned) {
          _tile_dpbusd(0, 2, 4);
          _tile_dpbusd(1, 3, 5);
        } else {
          _tile_dpbssd(0, 2, 4);
          _tile_dpbssd(1, 3, 5);
        }
        _tile_stored(0, c[0], 64);
        _tile_stored(1, c[1], 64);
        add_block(c[0], _mm512_load_ps(bs + b * 16), sw + b / per_group, groups, live, acc);
        add_block(c[1], _mm512_load_ps(bs + (b + 1) * 16), sw + (b + 1) / per_group, groups, live, acc);
      }
      if (b < blocks) {
        _tile_zero(0);
        _tile_loadd(2, a + b * 512, 32);
        _tile_loadd(4, bx + b * 512, 64);
        if constexpr (kUnsigned) {
          _tile_dpbusd(0, 2, 4);
        } else {
          _tile_dpbssd(0, 2, 4);
        }
        _tile_stored(0, c[0], 64);
        add_block(c[0], _mm512_load_ps(bs + b * 16), sw + b / per_group, groups, live, acc);
      }
      transpose16(acc);  // acc[j]: token 16 u + j, lanes rows 16 h .. 16 h + 15
      const __mmask16 rows_live = first_lanes(live);
      for (int64_t j = 0; j < std::min<int64_t>(16, tokens - 16 * u); ++j)
        _mm512_mask_storeu_ps(out + (16 * u + j) * ldo + 16 * h, rows_live, acc[j]);
    }
  }
  _tile_release();
}

void gemm_int_amx_impl(const WeightView& w, int64_t n0, int64_t rows, const int8_t* xp, const float* xsp,
                       int64_t tokens, uint8_t* w_pack, float* out, int64_t ldo) {
  if (w.format == WeightFormat::kInt4 && w.zeros != nullptr) {
    gemm_int_amx_tiles<true>(w, n0, rows, xp, xsp, tokens, w_pack, out, ldo);
  } else {
    gemm_int_amx_tiles<false>(w, n0, rows, xp, xsp, tokens, w_pack, out, ldo);
  }
}

}  // namespace

// A register-only loop of tile products (machine_limits.cpp): `products` issues four independent ones
// (accumulators 0..3, operands 4..7 loaded once from zeros: the rate does not depend on the values), each
// `macs` multiply-adds. Returns the operations done (a multiply and an add each).
template <class Products>
double amx_tile_loop(int64_t iterations, int64_t macs, Products products) {
  configure_tiles();
  alignas(64) static const uint8_t zeros[16 * 64] = {};
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, zeros, 64);
  _tile_loadd(5, zeros, 64);
  _tile_loadd(6, zeros, 64);
  _tile_loadd(7, zeros, 64);
  for (int64_t i = 0; i < iterations; ++i) products();
  alignas(64) int32_t sink[16 * 16];
  _tile_stored(0, sink, 64);
  _tile_release();
  volatile int32_t keep = sink[0];
  (void)keep;
  return static_cast<double>(iterations) * 4 * static_cast<double>(macs) * 2;
}

// TDPBF16PS on full tiles: 16 x 16 outputs of 32 BF16 pairs.
double amx_bf16_loop(int64_t iterations) {
  return amx_tile_loop(iterations, 16 * 16 * 32, [] {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  });
}

// TDPBSSD on full tiles (16 x 16 outputs of 64 int8 products): the unit of INT8 / INT4 prompts, whose
// tiles take one 32-column block per instruction, half this work.
double amx_int8_loop(int64_t iterations) {
  return amx_tile_loop(iterations, 16 * 16 * 64, [] {
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 4, 7);
    _tile_dpbssd(2, 5, 6);
    _tile_dpbssd(3, 5, 7);
  });
}

const SimdKernels& amx_kernels() {
  static const SimdKernels k = [] {
    SimdKernels t = avx512_kernels();
    t.level = SimdLevel::kAmx;
    t.amx_pack_x = amx_pack_x_impl;
    t.gemm_bf16_amx = gemm_bf16_amx_block;
    if (cpu_has_amx_int8()) t.gemm_int_amx = gemm_int_amx_impl;
    return t;
  }();
  return k;
}

}  // namespace day0::cpu
