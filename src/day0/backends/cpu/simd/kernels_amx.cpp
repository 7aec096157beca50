// The AMX level: the AVX-512 table plus the BF16 GEMM on AMX tiles (TDPBF16PS: a 16 x 16 FP32 tile
// += a 16 x 32 BF16 tile times a 32 x 16 one, 8192 multiply-adds per instruction, 16 times the work of
// one vdpbf16ps). Compiled with the AMX flags; only called where cpu_has_amx_bf16().
#include <immintrin.h>

#include <cstdint>

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

void gemm_bf16_amx_block(const uint16_t* w, int64_t ldw, const uint32_t* xp, int64_t mpad, int64_t kc,
                         float* yt, int64_t ldy, bool accumulate) {
  configure_tiles();
  const auto w_stride = static_cast<long>(ldw * 2);   // bytes between weight rows
  const auto x_stride = static_cast<long>(mpad * 4);  // bytes between pair rows of x^T
  const auto y_stride = static_cast<long>(ldy * 4);
  const uint16_t* w1 = w + 16 * ldw;
  for (int64_t m0 = 0; m0 < mpad; m0 += 32) {
    float* c0 = yt + m0;             // rows 0..15 of the weight block
    float* c1 = yt + 16 * ldy + m0;  // rows 16..31
    if (accumulate) {
      _tile_loadd(0, c0, y_stride);
      _tile_loadd(1, c0 + 16, y_stride);
      _tile_loadd(2, c1, y_stride);
      _tile_loadd(3, c1 + 16, y_stride);
    } else {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
    }
    for (int64_t k = 0; k < kc; k += 32) {
      const uint32_t* b = xp + (k / 2) * mpad + m0;  // pairs k/2 .. k/2 + 15 of columns m0 .. m0 + 31
      _tile_loadd(4, w + k, w_stride);
      _tile_loadd(5, w1 + k, w_stride);
      _tile_loadd(6, b, x_stride);
      _tile_loadd(7, b + 16, x_stride);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, c0, y_stride);
    _tile_stored(1, c0 + 16, y_stride);
    _tile_stored(2, c1, y_stride);
    _tile_stored(3, c1 + 16, y_stride);
  }
  _tile_release();
}

}  // namespace

// Register-only TDPBF16PS loop (machine_limits.cpp): four independent accumulators, the operand tiles
// loaded once.
double amx_bf16_loop(int64_t iterations) {
  configure_tiles();
  alignas(64) static const uint16_t ones[16 * 32] = {};
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, ones, 64);
  _tile_loadd(5, ones, 64);
  _tile_loadd(6, ones, 64);
  _tile_loadd(7, ones, 64);
  for (int64_t i = 0; i < iterations; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  alignas(64) float sink[16 * 16];
  _tile_stored(0, sink, 64);
  _tile_release();
  volatile float keep = sink[0];
  (void)keep;
  return static_cast<double>(iterations) * 4 * 16 * 16 * 32 * 2;
}

const SimdKernels& amx_kernels() {
  static const SimdKernels k = [] {
    SimdKernels t = avx512_kernels();
    t.level = SimdLevel::kAmx;
    t.gemm_bf16_amx = gemm_bf16_amx_block;
    return t;
  }();
  return k;
}

}  // namespace day0::cpu
