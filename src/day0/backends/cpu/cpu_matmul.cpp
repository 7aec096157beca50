// y = x W^T on the cpu backend: fused-dequant GEMV for decode, packed cache-blocked GEMM for prefill
// (exact float32, or the BF16 vdpbf16ps GEMM when the call allows rounding, MatmulArgs::exact, and the
// CPU runs vdpbf16ps faster than FMA, Context::bf16_dot).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "day0/backends/cpu/cpu_ops.h"
#include "day0/core/error.h"
#include "day0/ops/kernel_checks.h"

namespace day0::cpu {

namespace {

inline constexpr int64_t kKc = 256;           // K block: a packed [kKc][kNr] panel is 32 KiB, it stays in L1
inline constexpr int64_t kMaxPanelChunk = 8;  // weight panels a thread takes at a time (for_panel_chunks)

// fn(thread, p_begin, p_end) over chunks of weight panels taken in turn by the pool's threads (one
// slowed by another tenant of the host takes fewer); a chunk runs every K block itself, so no barrier
// separates K blocks.
template <typename Fn>
void for_panel_chunks(const Context& c, int64_t panels, Fn&& fn) {
  const int64_t chunk = std::clamp<int64_t>(panels / (4 * c.pool.size()), 1, kMaxPanelChunk);
  const int64_t n_chunks = (panels + chunk - 1) / chunk;
  std::atomic<int64_t> next{0};
  c.pool.run([&](int tid) {
    for (int64_t ch = next.fetch_add(1); ch < n_chunks; ch = next.fetch_add(1))
      fn(tid, ch * chunk, std::min(panels, (ch + 1) * chunk));
  });
}

// y[t][n] (+)= dots[n - n0] + bias[n] for n0 <= n < n1.
void finish_row(const MatmulArgs& a, int64_t t, int64_t n0, int64_t n1, const float* dots) {
  float* y = a.y.row(t);
  for (int64_t n = n0; n < n1; ++n) {
    float v = dots[n - n0] + (a.bias ? a.bias[n] : 0.0f);
    y[n] = a.accumulate ? y[n] + v : v;
  }
}

// Up to kGemvMaxRows rows, or any number for a row_invariant call: those go over each step's weight
// rows in groups of kGemvMaxRows tokens with the same row-dot kernels, so every row's dots are those of a
// one-token call while the weights still stream from memory once per call.
void gemv(const Context& c, const MatmulArgs& a) {
  const int64_t t_rows = a.x.rows;
  const int64_t k = a.w.cols;
  D0_CHECK(t_rows <= kGemvMaxRows || a.row_invariant);
  // x as the row dots take it: rounded to BF16 once for vdpbf16ps (bf16x_rows), MXFP4's nibble order
  // (even/odd elements paired), or as it is.
  const bool bf16x = bf16x_rows(c, a.w, a.exact);
  std::vector<float> local;  // MXFP4 only, when the call has no workspace
  std::vector<float>& prepared = c.ws ? c.ws->gemv_prepared : local;
  std::vector<uint16_t> local_bf16;  // BF16 x, when the call has no workspace
  std::vector<uint16_t>& rounded = c.ws ? c.ws->gemv_bf16 : local_bf16;
  // [T] each x row as the row dots take it: on the stack for a decode step (which allocates nothing),
  // on the heap for a row_invariant call of more rows.
  const float* xs_few[kGemvMaxRows] = {};
  const uint16_t* xbs_few[kGemvMaxRows] = {};
  std::vector<const float*> xs_many;
  std::vector<const uint16_t*> xbs_many;
  if (t_rows > kGemvMaxRows) {
    xs_many.resize(static_cast<size_t>(t_rows));
    xbs_many.resize(static_cast<size_t>(t_rows));
  }
  const float** xs = t_rows > kGemvMaxRows ? xs_many.data() : xs_few;
  const uint16_t** xbs = t_rows > kGemvMaxRows ? xbs_many.data() : xbs_few;
  if (bf16x) {
    uint16_t* xb = aligned_bf16_rows(rounded, t_rows, k);
    const int64_t stride = bf16_row_stride(k);
    for (int64_t t = 0; t < t_rows; ++t) {
      c.k.to_bf16(a.x.row(t), k, xb + t * stride);
      xbs[static_cast<size_t>(t)] = xb + t * stride;
    }
  } else if (a.w.format == WeightFormat::kMxfp4) {
    float* xp = grown(prepared, t_rows * k);
    for (int64_t t = 0; t < t_rows; ++t) {
      prepare_mxfp4_x(a.x.row(t), k, xp + t * k);
      xs[static_cast<size_t>(t)] = xp + t * k;
    }
  } else {
    for (int64_t t = 0; t < t_rows; ++t) xs[static_cast<size_t>(t)] = a.x.row(t);
  }
  // The level's own layout of x (SimdKernels::order_x), once per call instead of once per dot_rows call.
  bool ordered = false;
  std::vector<float> local_ordered;  // when the call has no workspace
  if (!bf16x && c.k.order_x != nullptr) {
    float* xo = grown(c.ws ? c.ws->gemv_ordered : local_ordered, t_rows * k);
    ordered = c.k.order_x(a.w, xs[0], xo);
    for (int64_t t = 1; ordered && t < t_rows; ++t) {
      c.k.order_x(a.w, xs[static_cast<size_t>(t)], xo + t * k);
      xs[static_cast<size_t>(t)] = xo + t * k;
    }
    if (ordered) xs[0] = xo;
  }
  constexpr int64_t kRowsPerStep = 8;
  const auto dot_rows = [&](int64_t begin, int64_t end) {
    float dots[kGemvMaxRows][kRowsPerStep];
    for (int64_t n0 = begin; n0 < end; n0 += kRowsPerStep) {
      const int64_t n1 = std::min(end, n0 + kRowsPerStep);
      for (int64_t t0 = 0; t0 < t_rows; t0 += kGemvMaxRows) {
        const int64_t group = std::min(kGemvMaxRows, t_rows - t0);
        if (bf16x) {
          c.k.dot_rows_bf16x(a.w, n0, n1, xbs + t0, group, dots[0], kRowsPerStep);
        } else if (ordered) {
          for (int64_t t = 0; t < group; ++t) c.k.dot_rows_ordered(a.w, n0, n1, xs[t0 + t], dots[t]);
        } else {
          dot_rows_each(c.k, a.w, n0, n1, xs + t0, group, dots[0], kRowsPerStep);
        }
        for (int64_t t = 0; t < group; ++t) finish_row(a, t0 + t, n0, n1, dots[t]);
      }
    }
  };
  // Chunks of kGemvChunkBytes of rows (a multiple of kRowsPerStep), no larger than an even share.
  const int64_t rows = a.w.rows, threads = c.pool.size();
  const int64_t row_bytes = std::max<int64_t>(1, static_cast<int64_t>(a.w.data_bytes()) / rows);
  const int64_t share = (rows + threads - 1) / threads;
  const int64_t chunk = std::max(kRowsPerStep, std::min((share + kRowsPerStep - 1) / kRowsPerStep,
                                                        kGemvChunkBytes / row_bytes / kRowsPerStep) *
                                                   kRowsPerStep);
  const int64_t chunks = (rows + chunk - 1) / chunk;
  if (chunks <= threads) {
    c.pool.parallel_for(rows, 64, dot_rows);
    return;
  }
  std::atomic<int64_t> next{0};
  c.pool.run([&](int) {
    for (int64_t i = next.fetch_add(1); i < chunks; i = next.fetch_add(1))
      dot_rows(i * chunk, std::min(rows, (i + 1) * chunk));
  });
}

// Float32 products (every weight format, and BF16 weights where the FMA tiles outrun vdpbf16ps). x is
// packed once per call into tiles of kMr rows per K block, which the microkernel walks contiguously (x
// rows themselves are often 4 KiB apart, which aliases in L1); each weight panel is dequantised and
// transposed into [kc][kNr] right before its tiles use it.
void gemm(const Context& c, const MatmulArgs& a) {
  const int64_t t_rows = a.x.rows;
  const int64_t n_rows = a.w.rows;
  const int64_t k_total = a.w.cols;
  const int64_t panels = (n_rows + kNr - 1) / kNr;
  const int64_t m_tiles = (t_rows + kMr - 1) / kMr;
  Workspace local;
  Workspace& ws = c.ws ? *c.ws : local;
  // x[6 tile + i][k0 + kk] of the K block starting at k0 (kc columns wide) at
  // x_tiles[(k0 m_tiles + tile kc + kk) kMr + i]; zero past the last row.
  float* x_tiles = grown(ws.gemm_x, m_tiles * kMr * k_total);
  c.pool.parallel_for(m_tiles, 1, [&](int64_t begin, int64_t end) {
    for (int64_t tile = begin; tile < end; ++tile) {
      const float* rows[kMr] = {};
      for (int64_t i = 0; i < kMr; ++i) {
        if (tile * kMr + i < t_rows) rows[i] = a.x.row(tile * kMr + i);
      }
      for (int64_t k0 = 0; k0 < k_total; k0 += kKc) {
        const int64_t kc = std::min(kKc, k_total - k0);
        float* dst = x_tiles + (k0 * m_tiles + tile * kc) * kMr;
        for (int64_t kk = 0; kk < kc; ++kk) {
          for (int64_t i = 0; i < kMr; ++i) dst[kk * kMr + i] = rows[i] != nullptr ? rows[i][k0 + kk] : 0.0f;
        }
      }
    }
  });
  if (static_cast<int64_t>(ws.gemm_panel.size()) < c.pool.size())
    ws.gemm_panel.resize(static_cast<size_t>(c.pool.size()));
  // A chunk's panels of one K block are packed together (at most kMaxPanelChunk x 32 KiB), then the x tiles
  // go past them kMTiles at a time (6 KiB each): both stay in L2 however many rows x has, where sweeping
  // every x tile over one panel at a time read all of x again from L3 (or DRAM, on a host whose L3 other
  // tenants share) for each panel.
  constexpr int64_t kMTiles = 16;
  for_panel_chunks(c, panels, [&](int tid, int64_t p_begin, int64_t p_end) {
    const int64_t chunk = p_end - p_begin;
    D0_CHECK(chunk <= kMaxPanelChunk);
    // [chunk][kc][kNr] packed panels, then [kNr][kc] dequantised weight rows (no pack_f32_panel)
    float* packed = aligned_64<float>(ws.gemm_panel[static_cast<size_t>(tid)], (chunk + 1) * kKc * kNr);
    float* rows = packed + chunk * kKc * kNr;
    for (int64_t k0 = 0; k0 < k_total; k0 += kKc) {
      const int64_t kc = std::min(kKc, k_total - k0);
      const bool accumulate = k0 > 0 || a.accumulate;
      const float* x_block = x_tiles + k0 * m_tiles * kMr;
      for (int64_t p = p_begin; p < p_end; ++p) {
        const int64_t n0 = p * kNr;
        const int64_t nr = std::min(kNr, n_rows - n0);
        float* panel = packed + (p - p_begin) * kKc * kNr;
        if (c.k.pack_f32_panel != nullptr) {
          c.k.pack_f32_panel(a.w, n0, nr, k0, kc, panel);
        } else {
          for (int64_t j = 0; j < nr; ++j) c.k.dequant_row(a.w, n0 + j, k0, kc, rows + j * kc);
          for (int64_t kk = 0; kk < kc; ++kk) {
            float* dst = panel + kk * kNr;
            for (int64_t j = 0; j < nr; ++j) dst[j] = rows[j * kc + kk];
            for (int64_t j = nr; j < kNr; ++j) dst[j] = 0.0f;
          }
        }
      }
      for (int64_t t0 = 0; t0 < m_tiles; t0 += kMTiles) {
        const int64_t t1 = std::min(m_tiles, t0 + kMTiles);
        for (int64_t p = p_begin; p < p_end; ++p) {
          const int64_t n0 = p * kNr;
          const int64_t nr = std::min(kNr, n_rows - n0);
          const float* panel = packed + (p - p_begin) * kKc * kNr;
          for (int64_t tile = t0; tile < t1; ++tile) {
            const int64_t m0 = tile * kMr;
            const int64_t mr = std::min(kMr, t_rows - m0);
            c.k.gemm_tile(mr, nr, kc, x_block + tile * kc * kMr, panel, a.y.row(m0) + n0, a.y.stride,
                          accumulate);
          }
        }
      }
    }
  });
  if (a.bias != nullptr) {
    for (int64_t t = 0; t < t_rows; ++t) {
      float* y = a.y.row(t);
      for (int64_t n = 0; n < n_rows; ++n) y[n] += a.bias[n];
    }
  }
}

// BF16 weights with vdpbf16ps: activations rounded to BF16 once per call (what a BF16 model computes
// with anyway), weight panels packed as BF16 pairs, twice the FP32 FMA rate. x is packed once, per K
// block into tiles of kMr rows: the tiles of one K block are one contiguous run, walked in order by
// the microkernel for every weight panel (x rows themselves are often 4 KiB apart, which aliases in
// L1). Each weight panel is packed by an in-register transpose right before its tiles use it.
void gemm_bf16(const Context& c, const MatmulArgs& a) {
  const int64_t t_rows = a.x.rows;
  const int64_t n_rows = a.w.rows;
  const int64_t k_total = a.w.cols;
  const int64_t k_pairs = (k_total + 1) / 2;
  const int64_t panels = (n_rows + kNr - 1) / kNr;
  const int64_t m_tiles = (t_rows + kMr - 1) / kMr;
  constexpr int64_t kBlockPairs = kKc / 2;
  // The pairs (x[6 tile + i][2p], x[6 tile + i][2p + 1]) of K block b = p / kBlockPairs, which has kp_b
  // pairs, at x_tiles[b kBlockPairs m_tiles kMr + (tile kp_b + p % kBlockPairs) kMr + i]; zero past the
  // last row and in the odd half pair.
  Workspace local;
  Workspace& ws = c.ws ? *c.ws : local;
  uint32_t* x_tiles = grown(ws.gemm_x_bf16, m_tiles * k_pairs * kMr);
  c.pool.parallel_for(m_tiles, 1, [&](int64_t begin, int64_t end) {
    std::vector<uint32_t> row(static_cast<size_t>(k_pairs));
    for (int64_t tile = begin; tile < end; ++tile) {
      for (int64_t i = 0; i < kMr; ++i) {
        const int64_t t = tile * kMr + i;
        if (t < t_rows) {
          row.back() = 0u;
          c.k.to_bf16(a.x.row(t), k_total, reinterpret_cast<uint16_t*>(row.data()));
        } else {
          std::fill(row.begin(), row.end(), 0u);
        }
        for (int64_t b0 = 0; b0 < k_pairs; b0 += kBlockPairs) {
          const int64_t kp = std::min(kBlockPairs, k_pairs - b0);
          uint32_t* dst = x_tiles + (b0 * m_tiles + tile * kp) * kMr + i;
          for (int64_t p = 0; p < kp; ++p) dst[p * kMr] = row[static_cast<size_t>(b0 + p)];
        }
      }
    }
  });
  const auto* w = static_cast<const uint16_t*>(a.w.data);
  std::vector<std::vector<uint32_t>> scratch(static_cast<size_t>(c.pool.size()));
  for_panel_chunks(c, panels, [&](int tid, int64_t p_begin, int64_t p_end) {
    // [kp][kNr] pairs: each pair row is one cache line
    auto* packed = aligned_64<uint32_t>(scratch[static_cast<size_t>(tid)], kKc / 2 * kNr);
    for (int64_t k0 = 0; k0 < k_total; k0 += kKc) {
      const int64_t kc = std::min(kKc, k_total - k0);
      const int64_t kp = (kc + 1) / 2;
      const bool accumulate = k0 > 0 || a.accumulate;
      for (int64_t p = p_begin; p < p_end; ++p) {
        const int64_t n0 = p * kNr;
        const int64_t nr = std::min(kNr, n_rows - n0);
        c.k.pack_bf16_panel(w + n0 * k_total, k_total, nr, k0, kc, packed);
        for (int64_t tile = 0; tile < m_tiles; ++tile) {
          const int64_t m0 = tile * kMr;
          const int64_t mr = std::min(kMr, t_rows - m0);
          c.k.gemm_tile_bf16(mr, nr, kp, x_tiles + (k0 / 2 * m_tiles + tile * kp) * kMr, packed,
                             a.y.row(m0) + n0, a.y.stride, accumulate);
        }
      }
    }
  });
  if (a.bias != nullptr) {
    for (int64_t t = 0; t < t_rows; ++t) {
      float* y = a.y.row(t);
      for (int64_t n = 0; n < n_rows; ++n) y[n] += a.bias[n];
    }
  }
}

// kGemvMaxRows + 1 to kFewMaxRows tokens, BF16 weights, dot route: x packed once into tiles of 16 token
// lanes of BF16 pairs, weight rows read in place (no panels) by dot_rows_bf16_x16 in chunks of rows taken
// in turn by the threads.
void gemm_bf16_few(const Context& c, const MatmulArgs& a) {
  const int64_t t_rows = a.x.rows;
  const int64_t k = a.w.cols;
  D0_CHECK(t_rows <= kFewMaxRows);
  const int64_t tiles = (t_rows + 15) / 16;
  const int64_t tile_words = (k + 1) / 2 * 16;
  Workspace local;
  Workspace& ws = c.ws ? *c.ws : local;
  uint32_t* xt = aligned_64<uint32_t>(ws.gemm_x_bf16, tiles * tile_words);  // [tile][pairs][16]
  for (int64_t j = 0; j < tiles; ++j)
    c.k.pack_bf16_x16(a.x.row(16 * j), a.x.stride, std::min<int64_t>(16, t_rows - 16 * j), k,
                      xt + j * tile_words);
  const auto* w = static_cast<const uint16_t*>(a.w.data);
  // Rows per kernel call: 64, fewer for many tiles so that out stays 16 KiB (a multiple of 8, the kernel's
  // row block).
  constexpr int64_t kOutFloats = 4096;
  const int64_t call_rows = std::clamp<int64_t>(kOutFloats / (16 * tiles) / 8 * 8, 8, 64);
  D0_CHECK(call_rows * 16 * tiles <= kOutFloats);
  // Work items of about kGemvChunkBytes of rows (whole calls), no larger than an even share: items of one
  // call's 64 rows (128 KiB at hidden 1024), taken in turn, would have each thread jump past the other's
  // every 128 KiB; about 1 MiB keeps its reads one stream (2 MiB, 4 MiB and even halves do as well).
  const int64_t share = (a.w.rows + c.pool.size() - 1) / c.pool.size();
  const int64_t item_rows = std::max<int64_t>(1, std::min((share + call_rows - 1) / call_rows,
                                                          kGemvChunkBytes / (2 * k) / call_rows)) *
                            call_rows;
  const int64_t items = (a.w.rows + item_rows - 1) / item_rows;
  std::atomic<int64_t> next{0};
  c.pool.run([&](int) {
    alignas(64) float out[kOutFloats];  // [tile][row][token lane]
    for (int64_t item = next.fetch_add(1); item < items; item = next.fetch_add(1)) {
      const int64_t end = std::min(a.w.rows, (item + 1) * item_rows);
      for (int64_t n0 = item * item_rows; n0 < end; n0 += call_rows) {
        const int64_t rows = std::min(call_rows, end - n0);
        c.k.dot_rows_bf16_x16(w + n0 * k, k, rows, k, xt, tiles, out);
        for (int64_t j = 0; j < tiles; ++j) {  // finish_row's arithmetic, 16 rows of a tile at a time
          const int64_t lanes = std::min<int64_t>(16, t_rows - 16 * j);
          float* y_rows[16];
          for (int64_t l = 0; l < lanes; ++l) y_rows[l] = a.y.row(16 * j + l) + n0;
          c.k.lanes_to_rows_x16(out + j * rows * 16, rows, lanes, a.bias ? a.bias + n0 : nullptr, nullptr,
                                a.accumulate, y_rows);
        }
      }
    }
  });
}

// BF16 weights on AMX tiles. The weights are the tiles' left operand (16 rows x 32 BF16 of a row-major
// matrix is a tile: each weight byte is read once per call, copied as whole tiles into L1-friendly
// order by the kernel), x^T the right one (rounded to BF16 and packed into pairs once per call), so the
// tiles compute y^T, transposed into y by the kernel at the end of the last K block.
// Blocking: x blocks of [kc / 2][mpad] pairs (~1 MiB) stay in L2 while each thread walks its 32-row
// weight blocks; between K blocks the partial y^T waits in a stage; M is cut into chunks of at most 512
// rows, which keeps the stage within 64 MiB up to 32k weight rows (and chunks fewer rows past that).
void gemm_bf16_amx(const Context& c, const MatmulArgs& a) {
  constexpr int64_t kTile = 32;
  const auto round_up = [](int64_t v, int64_t m) { return (v + m - 1) / m * m; };
  const int64_t n_rows = a.w.rows;
  const int64_t k_total = a.w.cols;
  const int64_t n_pad = round_up(n_rows, kTile);
  const int64_t k_pad = round_up(k_total, kTile);
  const int64_t blocks = n_pad / kTile;
  const int64_t chunk = std::clamp<int64_t>((int64_t{64} << 20) / (n_pad * 4) / kTile * kTile, kTile, 512);
  Workspace local;
  Workspace& ws = c.ws ? *c.ws : local;
  if (static_cast<int64_t>(ws.amx_w.size()) < c.pool.size())
    ws.amx_w.resize(static_cast<size_t>(c.pool.size()));
  const auto* w = static_cast<const uint16_t*>(a.w.data);
  for (int64_t m_begin = 0; m_begin < a.x.rows; m_begin += chunk) {
    const int64_t m_rows = std::min(chunk, a.x.rows - m_begin);
    const int64_t mpad = round_up(m_rows, kTile);
    const int64_t kc = std::clamp<int64_t>((int64_t{1} << 20) / (mpad * 2) / kTile * kTile, kTile, k_pad);
    const bool staged = kc < k_pad;
    // x^T in BF16 pairs: [mpad / 16][k_pad / 2][16]; 16-row blocks are written whole (zeros past m_rows)
    // and the last 16 of mpad zeroed here when m_rows leaves them empty.
    const auto x_words = static_cast<size_t>(mpad * k_pad / 2);
    if (ws.amx_x.size() < x_words) ws.amx_x.resize(x_words);
    const int64_t row_blocks = (m_rows + 15) / 16;
    if (row_blocks * 16 < mpad)
      std::fill_n(ws.amx_x.data() + row_blocks * k_pad / 2 * 16, static_cast<size_t>(k_pad / 2 * 16), 0u);
    c.pool.parallel_for(row_blocks, 1, [&](int64_t begin, int64_t end) {
      const int64_t r0 = begin * 16, r1 = std::min(m_rows, end * 16);
      c.k.amx_pack_x(a.x.row(m_begin + r0), a.x.stride, r1 - r0, k_total, k_pad, ws.amx_x.data(), r0);
    });
    if (staged) ws.amx_yt.resize(std::max(ws.amx_yt.size(), static_cast<size_t>(n_pad * mpad)));
    for (int64_t k0 = 0; k0 < k_pad; k0 += kc) {
      const int64_t kb = std::min(kc, k_pad - k0);
      c.pool.run([&](int tid) {
        const int64_t b_begin = blocks * tid / c.pool.size();
        const int64_t b_end = blocks * (tid + 1) / c.pool.size();
        auto* aligned = aligned_64<uint16_t>(ws.amx_w[static_cast<size_t>(tid)], kTile * kb);
        for (int64_t blk = b_begin; blk < b_end; ++blk) {
          const int64_t n0 = blk * kTile;
          AmxBlock b;
          b.w = w + n0 * k_total + k0;
          b.ldw = k_total;
          b.w_rows = std::min(kTile, n_rows - n0);
          b.w_cols = std::min(kb, k_total - k0);
          b.w_pack = aligned;
          b.xp = ws.amx_x.data();
          b.pairs = k_pad / 2;
          b.k0 = k0;
          b.mpad = mpad;
          b.kc = kb;
          b.stage = staged ? ws.amx_yt.data() + n0 * mpad : nullptr;
          b.first = k0 == 0;
          b.last = k0 + kb == k_pad;
          b.y = a.y.row(m_begin) + n0;
          b.ldy = a.y.stride;
          b.rows = m_rows;
          b.cols = b.w_rows;
          b.bias = a.bias ? a.bias + n0 : nullptr;
          b.accumulate = a.accumulate;
          c.k.gemm_bf16_amx(b);
        }
      });
    }
  }
}

// INT8 / INT4 weights against int8 activations (see cpu_ops.h).
void int_matmul(const Context& c, const MatmulArgs& a) {
  const int64_t t_rows = a.x.rows;
  Int8Rows local_x;
  std::vector<float> local_terms;
  Int8Rows& xq = c.ws ? c.ws->int8_x : local_x;
  std::vector<float>& terms = c.ws ? c.ws->int8_terms : local_terms;
  // [T, blocks * 32] int8 + [T, blocks] scales, rows split between the threads: one thread quantizing a
  // prompt left the other idle for a fifth of an INT8 prompt's time (perf, SmolLM2 pp512).
  size_activations(t_rows, a.x.cols, xq);
  const auto quantize_row =
      c.k.quantize_int8_row != nullptr ? c.k.quantize_int8_row : quantize_activation_row;
  c.pool.parallel_for(t_rows, 8, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      quantize_row(a.x.row(t), a.x.cols, xq.q.data() + t * xq.blocks * kIntBlock,
                   xq.scale.data() + t * xq.blocks, xq.sum.data() + t * xq.blocks);
  });
  const int64_t groups = a.w.int_groups();
  // Stored zero points (asymmetric INT8 / INT4): y[n] -= sum_g scale_w[n, g] * z[n, g] * terms[t, g].
  // Symmetric INT4's zero (8) is subtracted inside the kernels' integer sums instead.
  const bool zero_points = a.w.zeros != nullptr;
  if (zero_points) {
    if (static_cast<int64_t>(terms.size()) < t_rows * groups)
      terms.resize(static_cast<size_t>(t_rows * groups));
    for (int64_t t = 0; t < t_rows; ++t)
      activation_group_terms(xq, t, a.w.group, groups, terms.data() + t * groups);
  }
  // dots[n - n0] of token t less the zero-point terms, into y (n1 - n0 <= kIntTileRows). Each row's
  // terms are summed over the groups in order, but the rows' sums advance side by side: one row at a
  // time, its chain of dependent adds cost INT4 prompts twice the AMX tiles' time (perf, SmolLM2).
  const auto finish_int = [&](int64_t t, int64_t n0, int64_t n1, float* dots) {
    if (zero_points) {
      const float* tg = terms.data() + t * groups;
      float corr[kIntTileRows] = {};
      const int64_t rows = n1 - n0;
      const int64_t s = n0 * groups;
      const float* z = a.w.zeros + n0 * groups;
      for (int64_t g = 0; g < groups; ++g)
        for (int64_t i = 0; i < rows; ++i)
          corr[i] += a.w.int_scale(s + i * groups + g) * z[i * groups + g] * tg[g];
      for (int64_t i = 0; i < rows; ++i) dots[i] -= corr[i];
    }
    finish_row(a, t, n0, n1, dots);
  };
  // A prompt on AMX-INT8 tiles: the same sums bit for bit (SimdKernels::gemm_int_amx), so only speed
  // depends on the route; a row_invariant call keeps the row dots, whose bits match the tiles' only at
  // the scalar level.
  if (c.k.gemm_int_amx != nullptr && t_rows > kGemvMaxRows && !a.row_invariant) {
    Workspace local_ws;
    Workspace& ws = c.ws ? *c.ws : local_ws;
    const int64_t blocks = xq.blocks;
    const int64_t tiles = (t_rows + 15) / 16;
    auto* xp = aligned_64<int8_t>(ws.int_tiles_x, tiles * blocks * 512);
    auto* xsp = aligned_64<float>(ws.int_tiles_xs, tiles * blocks * 16);
    pack_int_x_tiles(xq.q.data(), xq.scale.data(), t_rows, blocks, xp, xsp);
    if (static_cast<int>(ws.int_tiles_w.size()) < c.pool.size())
      ws.int_tiles_w.resize(static_cast<size_t>(c.pool.size()));
    if (static_cast<int>(ws.thread.size()) < c.pool.size())
      ws.thread.resize(static_cast<size_t>(c.pool.size()));
    // Plain y = x W^T (no zero points, bias or accumulate): the tiles write y itself; copying every
    // output through a per-thread buffer took a tenth of an INT8 prompt's time (perf, SmolLM2 pp512).
    const bool direct = !zero_points && a.bias == nullptr && !a.accumulate;
    for_panel_chunks(c, (a.w.rows + kIntTileRows - 1) / kIntTileRows, [&](int tid, int64_t p0, int64_t p1) {
      auto* w_pack =
          aligned_64<uint8_t>(ws.int_tiles_w[static_cast<size_t>(tid)], kIntTileRows * blocks * 32);
      float* out =
          direct ? nullptr : grown(ws.thread[static_cast<size_t>(tid)], t_rows * kIntTileRows);  // [T][32]
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t n0 = p * kIntTileRows, n1 = std::min(a.w.rows, n0 + kIntTileRows);
        if (direct) {
          c.k.gemm_int_amx(a.w, n0, n1 - n0, xp, xsp, t_rows, w_pack, a.y.row(0) + n0, a.y.stride);
          continue;
        }
        c.k.gemm_int_amx(a.w, n0, n1 - n0, xp, xsp, t_rows, w_pack, out, kIntTileRows);
        for (int64_t t = 0; t < t_rows; ++t) finish_int(t, n0, n1, out + t * kIntTileRows);
      }
    });
    return;
  }
  // A prompt on the level's 256-bit panels (SimdKernels::gemm_int): the scalar row dots' bits, as the
  // AMX tiles', so a row_invariant call keeps the row dots.
  if (c.k.gemm_int != nullptr && t_rows > kGemvMaxRows && !a.row_invariant) {
    Workspace local_ws;
    Workspace& ws = c.ws ? *c.ws : local_ws;
    if (static_cast<int>(ws.int_tiles_w.size()) < c.pool.size())
      ws.int_tiles_w.resize(static_cast<size_t>(c.pool.size()));
    if (static_cast<int>(ws.thread.size()) < c.pool.size())
      ws.thread.resize(static_cast<size_t>(c.pool.size()));
    const int64_t pack_bytes = gemm_int_pack_bytes(a.w);
    const bool direct = !zero_points && a.bias == nullptr && !a.accumulate;  // the panels write y itself
    for_panel_chunks(c, (a.w.rows + kIntPanelRows - 1) / kIntPanelRows, [&](int tid, int64_t p0, int64_t p1) {
      auto* w_pack = aligned_64<uint8_t>(ws.int_tiles_w[static_cast<size_t>(tid)], pack_bytes);
      float* out =
          direct ? nullptr : grown(ws.thread[static_cast<size_t>(tid)], t_rows * kIntPanelRows);  // [T][8]
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t n0 = p * kIntPanelRows, n1 = std::min(a.w.rows, n0 + kIntPanelRows);
        if (direct) {
          c.k.gemm_int(a.w, n0, n1 - n0, xq.codes(0), xq.scales(0), xq.sums(0), t_rows, w_pack,
                       a.y.row(0) + n0, a.y.stride);
          continue;
        }
        c.k.gemm_int(a.w, n0, n1 - n0, xq.codes(0), xq.scales(0), xq.sums(0), t_rows, w_pack, out,
                     kIntPanelRows);
        for (int64_t t = 0; t < t_rows; ++t) finish_int(t, n0, n1, out + t * kIntPanelRows);
      }
    });
    return;
  }
  constexpr int64_t kRowsPerStep = 8;
  constexpr int64_t kIntTokenTile = 16;
  // Each token's codes laid out once for the level's prepared row dots, where it has them for w.
  std::vector<uint8_t> local_prep;
  std::vector<uint8_t>& prep = c.ws ? c.ws->int_x_prepared : local_prep;
  const int64_t prep_bytes = c.k.prepare_int_x != nullptr ? int_x_prepared_bytes(a.w.cols) : 0;
  uint8_t* prepared = prep_bytes > 0 ? aligned_64<uint8_t>(prep, t_rows * prep_bytes) : nullptr;
  bool use_prepared = prepared != nullptr;
  for (int64_t t = 0; t < t_rows && use_prepared; ++t)
    use_prepared = c.k.prepare_int_x(a.w, xq.codes(t), xq.scales(t), prepared + t * prep_bytes);
  // Rows of equal bytes: a split by rows is a split by weight bytes.
  c.pool.parallel_for(a.w.rows, 64, [&](int64_t begin, int64_t end) {
    float dots[kRowsPerStep];
    for (int64_t t0 = 0; t0 < t_rows; t0 += kIntTokenTile) {
      const int64_t t1 = std::min(t_rows, t0 + kIntTokenTile);
      for (int64_t n0 = begin; n0 < end; n0 += kRowsPerStep) {
        const int64_t n1 = std::min(end, n0 + kRowsPerStep);
        for (int64_t t = t0; t < t1; ++t) {
          if (use_prepared) {
            c.k.dot_rows_int_prepared(a.w, n0, n1, prepared + t * prep_bytes, xq.codes(t), xq.scales(t),
                                      dots);
          } else {
            c.k.dot_rows_int(a.w, n0, n1, xq.codes(t), xq.scales(t), dots);
          }
          finish_int(t, n0, n1, dots);
        }
      }
    }
  });
}

// The kernels matmul() picks from. matmul() and matmul_unit() both take the route from here, so the unit
// a benchmark states its peak for is the one that ran.
enum class MatmulRoute { kInt, kGemv, kBf16Amx, kBf16Few, kBf16Dot, kFloatGemm };

MatmulRoute matmul_route(const Context& c, WeightFormat format, bool exact, int64_t rows,
                         bool row_invariant = false) {
  const bool bf16 = !exact && format == WeightFormat::kBF16;
  if (!exact && (format == WeightFormat::kInt8 || format == WeightFormat::kInt4)) return MatmulRoute::kInt;
  if (rows <= kGemvMaxRows || row_invariant) return MatmulRoute::kGemv;
  if (bf16 && c.k.gemm_bf16_amx != nullptr) return MatmulRoute::kBf16Amx;
  if (bf16 && c.k.dot_rows_bf16_x16 != nullptr && c.k.lanes_to_rows_x16 != nullptr && c.bf16_dot &&
      rows <= kFewMaxRows)
    return MatmulRoute::kBf16Few;
  if (bf16 && c.k.gemm_tile_bf16 != nullptr && c.bf16_dot) return MatmulRoute::kBf16Dot;
  return MatmulRoute::kFloatGemm;
}

}  // namespace

ComputeUnit matmul_unit(const Context& c, WeightFormat weights, bool exact, int64_t rows) {
  // Every level above scalar runs its float loops on FMA vectors, 256 bits wide at avx2.
  const ComputeUnit float_unit = c.k.level == SimdLevel::kScalar ? ComputeUnit::kScalar
                                 : c.k.level == SimdLevel::kAvx2 ? ComputeUnit::kFp32FmaAvx2
                                                                 : ComputeUnit::kFp32Fma;
  switch (matmul_route(c, weights, exact, rows)) {
    case MatmulRoute::kInt:
      if (c.k.gemm_int_amx != nullptr && rows > kGemvMaxRows) return ComputeUnit::kAmxInt8;  // int_matmul
      return std::string_view(c.k.int_dot_name) == "avx512-vnni" ? ComputeUnit::kInt8Avx512Vnni
                                                                 : ComputeUnit::kInt8Dot;
    case MatmulRoute::kGemv:
      // The row dots round x to BF16 exactly where the GEMM would take vdpbf16ps (bf16x_rows).
      return bf16x_rows(c, weights, exact) ? ComputeUnit::kBf16Dot : float_unit;
    case MatmulRoute::kBf16Amx:
      return ComputeUnit::kAmxBf16;
    case MatmulRoute::kBf16Few:
    case MatmulRoute::kBf16Dot:
      return ComputeUnit::kBf16Dot;
    case MatmulRoute::kFloatGemm:
      return float_unit;
  }
  return ComputeUnit::kUnknown;
}

void matmul(const Context& c, const MatmulArgs& a) {
  check_args(a);
  if (a.x.rows == 0 || a.w.rows == 0) return;
  if (a.w.cols == 0) {
    for (int64_t t = 0; t < a.x.rows; ++t) {
      std::vector<float> zeros(static_cast<size_t>(a.w.rows), 0.0f);
      finish_row(a, t, 0, a.w.rows, zeros.data());
    }
    return;
  }
  switch (matmul_route(c, a.w.format, a.exact, a.x.rows, a.row_invariant)) {
    case MatmulRoute::kInt:
      int_matmul(c, a);
      break;
    case MatmulRoute::kGemv:
      gemv(c, a);
      break;
    case MatmulRoute::kBf16Amx:
      gemm_bf16_amx(c, a);
      break;
    case MatmulRoute::kBf16Few:
      gemm_bf16_few(c, a);
      break;
    case MatmulRoute::kBf16Dot:
      gemm_bf16(c, a);
      break;
    case MatmulRoute::kFloatGemm:
      gemm(c, a);
      break;
  }
}

void embedding(const Context& c, const EmbeddingArgs& a) {
  check_args(a);
  c.pool.parallel_for(static_cast<int64_t>(a.ids.size()), 16, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      c.k.dequant_row(a.table, a.ids[static_cast<size_t>(t)], 0, a.table.cols, a.out.row(t));
  });
}

}  // namespace day0::cpu
