// MoE experts on the cpu backend: tokens grouped by expert (dispatch), each active expert's SwiGLU MLP
// run as batched matmuls over its tokens, outputs scattered back weighted (combine). Experts nobody
// chose are skipped, so a decode step reads only the top-k experts' weights.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "day0/backends/cpu/cpu_ops.h"
#include "day0/backends/reference/reference_kernels.h"
#include "day0/core/error.h"
#include "day0/ops/kernel_checks.h"

namespace day0::cpu {

namespace {

// Formats whose row dots take x as it is (MXFP4 wants x reordered; INT8 / INT4 outside `exact` take
// int8 activations, int_rows below).
bool plain_rows(const WeightView& w, bool exact) {
  return w.format != WeightFormat::kMxfp4 && (exact || !w.is_int());
}

// INT8 / INT4 matrices whose row dots take int8 activations, as the matmul driver's few-token route:
// outside `exact`, without stored zero points (those take their matmuls, which subtract the zero terms).
bool int_rows(const WeightView& w, bool exact) {
  return !exact && w.is_int() && w.zeros == nullptr;
}

// The activation rows of the slots of the `active` experts (slot s at x_of(s), n columns; `start`: the
// dispatch's moe_start) quantized for the integer row dots into q, and, where the level lays them out for
// w's format (SimdKernels::prepare_int_x), into prepared: what int_matmul does to a call's x, so that a
// slot gets the bits of its expert's own matmul. Returns whether the rows were laid out.
template <class RowOf>
bool quantize_int_rows(const Context& c, const WeightView& w, const std::vector<int64_t>& active,
                       const std::vector<int64_t>& start, int64_t n, RowOf x_of, Int8Rows& q,
                       std::vector<uint8_t>& prepared, uint8_t*& prep, int64_t& prep_bytes) {
  size_activations(start.back(), n, q);
  const auto quantize_row =
      c.k.quantize_int8_row != nullptr ? c.k.quantize_int8_row : quantize_activation_row;
  prep_bytes = c.k.prepare_int_x != nullptr ? int_x_prepared_bytes(n) : 0;
  prep = prep_bytes > 0 ? aligned_64<uint8_t>(prepared, start.back() * prep_bytes) : nullptr;
  std::atomic<bool> laid_out{prep != nullptr};
  c.pool.parallel_for(static_cast<int64_t>(active.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const auto e = static_cast<size_t>(active[static_cast<size_t>(i)]);
      for (int64_t r = start[e]; r < start[e + 1]; ++r) {
        quantize_row(x_of(r), n, q.q.data() + r * q.blocks * kIntBlock, q.scale.data() + r * q.blocks,
                     q.sum.data() + r * q.blocks);
        if (prep != nullptr && !c.k.prepare_int_x(w, q.codes(r), q.scales(r), prep + r * prep_bytes))
          laid_out = false;
      }
    }
  });
  return laid_out;
}

// Whether the level lays x out the same way for the row dots of a and b (SimdKernels::order_x depends on
// nothing else).
bool same_x_layout(const WeightView& a, const WeightView& b) {
  return a.format == b.format && a.cols == b.cols && a.block_cols == b.block_cols && a.group == b.group;
}

// The experts' gated activation of one gate / up pair where it is not the plain SwiGLU: the clamped
// SwiGLU or GEGLU, in double like the reference, so that every path gives the same bits.
float gated_of(const MoeExpertsArgs& a, float g, float u) {
  return static_cast<float>(a.gelu_tanh ? ref::geglu_of(g, u)
                                        : ref::clamped_swiglu_of(g, u, a.limit, a.alpha, a.up_shift));
}

// out[j] = the gated activation of (g[j], u[j]) for j < n: gated_of, or the level's silu_mul, which the
// tiles' swiglu_pack_x16 computes lane for lane, so that an expert's activations have the same bits on
// every path.
void swiglu_span(const Context& c, const MoeExpertsArgs& a, const float* g, const float* u, int64_t n,
                 float* out) {
  if (a.clamped || a.gelu_tanh) {
    for (int64_t j = 0; j < n; ++j) out[j] = gated_of(a, g[j], u[j]);
  } else if (c.k.silu_mul != nullptr) {
    c.k.silu_mul(g, u, n, out);
  } else {
    for (int64_t j = 0; j < n; ++j) out[j] = g[j] / (1.0f + std::exp(-g[j])) * u[j];
  }
}

// Experts with few tokens (at most kMoeRowDotMaxTokens each: every expert of a decode step, most of a
// serving step's) go through two passes over the pool for all of them together, instead of three
// matmuls per expert, each a fork-join over a megabyte of weights whose panels a GEMM would repack for
// a handful of tokens:
//   1. gate and up rows of every such expert in items of columns taken in turn by the threads (experts
//      differ in tokens), SwiGLU fused: act[slot][inter]; an item is at least kMoeItemBytes of gate
//      rows (a thread reads a long run before it jumps past the other's; short items of 64 KiB are
//      measurably slower), walked in pieces of up to kMaxPiece columns, gate rows then up rows, so that a
//      thread reads one stream at a time (alternating 64 KiB of gate and up rows is slower too); within a
//      piece each group of rows meets every token of the expert while it is in L1;
//   2. down rows split by output row, each chunk over every such expert in expert order, weighted into
//      out (the order the per-expert path adds them in).
// Each token's products are those of its own row dots, whatever else the batch holds. A row-invariant call
// sends experts of any number of tokens here, in groups of kMoeRowDotMaxTokens per row-dot call.
// `active`: local experts with tokens, ascending; the dispatch (moe_start / tokens / weights) is done.
void moe_experts_gemv(const Context& c, const MoeExpertsArgs& a, Workspace& ws,
                      const std::vector<int64_t>& active, int64_t inter) {
  const int64_t h = a.x.cols;
  constexpr int64_t kCols = 32;       // item columns come in multiples of this
  constexpr int64_t kMaxPiece = 256;  // act columns per piece of a pass 1 item, at most
  constexpr int64_t kStep = 8;        // weight rows per dot_rows call
  // Columns per item: a multiple of kCols, at least kMoeItemBytes of gate rows, at most all of them.
  const WeightView& gate0 = a.experts[static_cast<size_t>(active.front())].gate;
  const int64_t row_bytes = std::max<int64_t>(1, static_cast<int64_t>(gate0.data_bytes()) / gate0.rows);
  const int64_t item_cols =
      std::min((inter + kCols - 1) / kCols, std::max<int64_t>(1, kMoeItemBytes / (row_bytes * kCols))) *
      kCols;
  const int64_t chunks = (inter + item_cols - 1) / item_cols;
  const int64_t piece = std::min(item_cols, kMaxPiece);
  const int64_t slots = ws.moe_start.back();
  if (static_cast<int64_t>(ws.moe_act.size()) < slots * inter)
    ws.moe_act.resize(static_cast<size_t>(slots * inter));
  float* act = ws.moe_act.data();  // [slots, inter], slot order = dispatch order
  // Scaled inputs (input_scaling: the routing weight multiplies x before the expert) [slots, h].
  if (a.input_scaling) {
    if (static_cast<int64_t>(ws.moe_x.size()) < slots * h) ws.moe_x.resize(static_cast<size_t>(slots * h));
    for (int64_t slot = 0; slot < slots; ++slot) {
      const float* src = a.x.row(ws.moe_tokens[static_cast<size_t>(slot)]);
      const float wgt = ws.moe_weights[static_cast<size_t>(slot)];
      float* dst = ws.moe_x.data() + slot * h;
      for (int64_t col = 0; col < h; ++col) dst[col] = src[col] * wgt;
    }
  }
  auto x_of = [&](int64_t slot) {
    return a.input_scaling ? ws.moe_x.data() + slot * h : a.x.row(ws.moe_tokens[static_cast<size_t>(slot)]);
  };
  // Not exact and every matrix BF16: x and act rounded to BF16 once per slot, vdpbf16ps row dots (the
  // rounding the experts' GEMM applies to the same call when they have more tokens).
  bool bf16x = true;
  for (int64_t e : active) {
    const ExpertWeights& ew = a.experts[static_cast<size_t>(e)];
    bf16x = bf16x && bf16x_rows(c, ew.gate, a.exact) && bf16x_rows(c, ew.down, a.exact) &&
            (a.layout != GateUpLayout::kSeparate || bf16x_rows(c, ew.up, a.exact));
  }
  uint16_t* xb = nullptr;    // [slots, h] at row stride xb_stride
  uint16_t* actb = nullptr;  // [slots, inter] at row stride actb_stride
  const int64_t xb_stride = bf16_row_stride(h), actb_stride = bf16_row_stride(inter);
  if (bf16x) {
    xb = aligned_bf16_rows(ws.moe_x_bf16, slots, h);
    actb = aligned_bf16_rows(ws.moe_act_bf16, slots, inter);
    for (int64_t slot = 0; slot < slots; ++slot) c.k.to_bf16(x_of(slot), h, xb + slot * xb_stride);
  }
  const ExpertWeights& first = a.experts[static_cast<size_t>(active.front())];
  // INT8 / INT4 experts (every active one, int_rows): each slot's x quantized once here, its act after
  // pass 1, for the level's integer row dots (prepared where it lays x out for the format: the first
  // expert's, as each matmul would for its own).
  const bool intx = int_rows(first.gate, a.exact);
  struct IntRows {
    const Int8Rows* q = nullptr;
    const uint8_t* prep = nullptr;  // [slots][prep_bytes], or null
    int64_t prep_bytes = 0;
    WeightFormat format{};  // the format prep serves
    // y[i] for rows [n0, n1) of w against slot s.
    void dots(const SimdKernels& k, const WeightView& w, int64_t n0, int64_t n1, int64_t s, float* y) const {
      if (prep != nullptr && w.format == format) {
        k.dot_rows_int_prepared(w, n0, n1, prep + s * prep_bytes, q->codes(s), q->scales(s), y);
      } else {
        k.dot_rows_int(w, n0, n1, q->codes(s), q->scales(s), y);
      }
    }
  };
  IntRows xi, acti;
  if (intx) {
    uint8_t* prep = nullptr;
    xi = {&ws.int8_x, nullptr, 0, first.gate.format};
    if (quantize_int_rows(c, first.gate, active, ws.moe_start, h, x_of, ws.int8_x, ws.int_x_prepared, prep,
                          xi.prep_bytes))
      xi.prep = prep;
  }
  // The level's own layout of x and of act (SimdKernels::order_x), once per slot rather than once per
  // dot_rows call, where every active expert's matrices take the first one's layout.
  bool order_in = !bf16x && !intx && c.k.order_x != nullptr, order_act = order_in;
  for (int64_t e : active) {
    const ExpertWeights& ew = a.experts[static_cast<size_t>(e)];
    order_in = order_in && same_x_layout(ew.gate, first.gate) &&
               (a.layout != GateUpLayout::kSeparate || same_x_layout(ew.up, first.gate));
    order_act = order_act && same_x_layout(ew.down, first.down);
  }
  float* xo = order_in ? grown(ws.moe_x_ordered, slots * h) : nullptr;  // [slots, h]
  for (int64_t slot = 0; order_in && slot < slots; ++slot)
    order_in = c.k.order_x(first.gate, x_of(slot), xo + slot * h);
  const auto items = static_cast<int64_t>(active.size()) * chunks;
  constexpr int64_t kGroup = kMoeRowDotMaxTokens;  // tokens per row-dot call
  constexpr int64_t kLd = 2 * kMaxPiece;           // gu's row stride
  int64_t most = 0;                                // the most tokens of an active expert
  for (int64_t e : active)
    most = std::max(most, ws.moe_start[static_cast<size_t>(e) + 1] - ws.moe_start[static_cast<size_t>(e)]);
  if (most > kGroup && static_cast<int64_t>(ws.thread.size()) < c.pool.size())
    ws.thread.resize(static_cast<size_t>(c.pool.size()));
  std::atomic<int64_t> next{0};
  c.pool.run([&](int tid) {
    // [token of the expert][kLd]: gate then up dots of a piece (interleaved: g u g u ...); on the stack for
    // up to kGroup tokens (a step that is not row-invariant allocates nothing)
    float gu_few[kGroup * kLd];
    float* gu = most > kGroup ? grown(ws.thread[static_cast<size_t>(tid)], most * kLd) : gu_few;
    for (int64_t item = next.fetch_add(1); item < items; item = next.fetch_add(1)) {
      const int64_t e = active[static_cast<size_t>(item / chunks)];
      const int64_t item0 = item % chunks * item_cols, item1 = std::min(inter, item0 + item_cols);
      const ExpertWeights& ew = a.experts[static_cast<size_t>(e)];
      const int64_t s0 = ws.moe_start[static_cast<size_t>(e)], s1 = ws.moe_start[static_cast<size_t>(e) + 1];
      D0_CHECK(s1 - s0 <= kGroup || a.row_invariant);
      // dots(matrix, its first row, rows, where the first row's dot goes in gu) for a piece's gate or up
      // rows: each step of rows meets every group of tokens while it is in L1.
      const auto dots = [&](const WeightView& w, int64_t r0, int64_t rows, int64_t out0) {
        for (int64_t r = 0; r < rows; r += kStep) {
          const int64_t m = std::min(kStep, rows - r);
          for (int64_t g0 = s0; g0 < s1; g0 += kGroup) {
            const int64_t g1 = std::min(s1, g0 + kGroup);
            float* y = gu + (g0 - s0) * kLd + out0 + r;  // the group's first token's dots
            const float* xs[kGroup];
            const uint16_t* xbs[kGroup];
            for (int64_t slot = g0; slot < g1; ++slot) {
              xs[slot - g0] = x_of(slot);
              xbs[slot - g0] = bf16x ? xb + slot * xb_stride : nullptr;
            }
            if (bf16x) {
              c.k.dot_rows_bf16x(w, r0 + r, r0 + r + m, xbs, g1 - g0, y, kLd);
            } else if (intx) {
              for (int64_t slot = g0; slot < g1; ++slot)
                xi.dots(c.k, w, r0 + r, r0 + r + m, slot, y + (slot - g0) * kLd);
            } else if (order_in) {
              for (int64_t slot = g0; slot < g1; ++slot)
                c.k.dot_rows_ordered(w, r0 + r, r0 + r + m, xo + slot * h, y + (slot - g0) * kLd);
            } else {
              dot_rows_each(c.k, w, r0 + r, r0 + r + m, xs, g1 - g0, y, kLd);
            }
          }
        }
      };
      for (int64_t c0 = item0; c0 < item1; c0 += piece) {
        const int64_t n = std::min(piece, item1 - c0);
        if (a.layout == GateUpLayout::kInterleaved) {
          dots(ew.gate, 2 * c0, 2 * n, 0);
        } else if (a.layout == GateUpLayout::kSeparate) {
          dots(ew.gate, c0, n, 0);
          dots(ew.up, c0, n, piece);
        } else {
          dots(ew.gate, c0, n, 0);
          dots(ew.gate, inter + c0, n, piece);
        }
        for (int64_t slot = s0; slot < s1; ++slot) {
          const float* d = gu + (slot - s0) * kLd;
          float* out = act + slot * inter;
          float g[kMaxPiece], u[kMaxPiece];  // the piece's gate and up sums of this token, biases added
          for (int64_t j = 0; j < n; ++j) {
            if (a.layout == GateUpLayout::kInterleaved) {
              g[j] = d[2 * j] + (ew.gate_bias ? ew.gate_bias[2 * (c0 + j)] : 0.0f);
              u[j] = d[2 * j + 1] + (ew.gate_bias ? ew.gate_bias[2 * (c0 + j) + 1] : 0.0f);
              continue;
            }
            const bool separate = a.layout == GateUpLayout::kSeparate;
            g[j] = d[j] + (ew.gate_bias ? ew.gate_bias[c0 + j] : 0.0f);
            u[j] = d[piece + j] + (separate ? (ew.up_bias ? ew.up_bias[c0 + j] : 0.0f)
                                            : (ew.gate_bias ? ew.gate_bias[inter + c0 + j] : 0.0f));
          }
          swiglu_span(c, a, g, u, n, out + c0);
          if (bf16x) c.k.to_bf16(out + c0, n, actb + slot * actb_stride + c0);
        }
      }
    }
  });
  if (intx) {
    uint8_t* prep = nullptr;
    acti = {&ws.moe_act_int8, nullptr, 0, first.down.format};
    if (quantize_int_rows(
            c, first.down, active, ws.moe_start, inter, [&](int64_t slot) { return act + slot * inter; },
            ws.moe_act_int8, ws.moe_act_prepared, prep, acti.prep_bytes))
      acti.prep = prep;
  }
  float* act_o = order_act ? grown(ws.moe_act_ordered, slots * inter) : nullptr;  // [slots, inter]
  for (int64_t slot = 0; order_act && slot < slots; ++slot)
    order_act = c.k.order_x(first.down, act + slot * inter, act_o + slot * inter);
  constexpr int64_t kRows = 8;  // down rows per dot_rows call
  // Experts outer, row blocks inner: a thread reads each expert's rows of its range as one stream
  // (hundreds of KiB the prefetchers follow) rather than 8 rows of one expert, then 8 of the next; every
  // output element still gets the experts added in expert order.
  c.pool.parallel_for((h + kRows - 1) / kRows, 4, [&](int64_t begin, int64_t end) {
    float d[kGroup][kRows];
    const float* acts[kGroup];
    const uint16_t* actbs[kGroup];
    for (int64_t e : active) {
      const ExpertWeights& ew = a.experts[static_cast<size_t>(e)];
      const int64_t s0 = ws.moe_start[static_cast<size_t>(e)], s1 = ws.moe_start[static_cast<size_t>(e) + 1];
      for (int64_t blk = begin; blk < end; ++blk) {
        const int64_t r0 = blk * kRows, r1 = std::min(h, r0 + kRows);
        for (int64_t g0 = s0; g0 < s1; g0 += kGroup) {
          const int64_t g1 = std::min(s1, g0 + kGroup);
          for (int64_t slot = g0; slot < g1; ++slot) {
            acts[slot - g0] = act + slot * inter;
            actbs[slot - g0] = bf16x ? actb + slot * actb_stride : nullptr;
          }
          if (bf16x) {
            c.k.dot_rows_bf16x(ew.down, r0, r1, actbs, g1 - g0, d[0], kRows);
          } else if (intx) {
            for (int64_t slot = g0; slot < g1; ++slot) acti.dots(c.k, ew.down, r0, r1, slot, d[slot - g0]);
          } else if (order_act) {
            for (int64_t slot = g0; slot < g1; ++slot)
              c.k.dot_rows_ordered(ew.down, r0, r1, act_o + slot * inter, d[slot - g0]);
          } else {
            dot_rows_each(c.k, ew.down, r0, r1, acts, g1 - g0, d[0], kRows);
          }
          for (int64_t slot = g0; slot < g1; ++slot) {
            float* ds = d[slot - g0];
            if (ew.down_bias)
              for (int64_t r = r0; r < r1; ++r) ds[r - r0] += ew.down_bias[r];
            const float w = a.input_scaling ? 1.0f : ws.moe_weights[static_cast<size_t>(slot)];
            c.k.axpy(w, ds, a.out.row(ws.moe_tokens[static_cast<size_t>(slot)]) + r0, r1 - r0);
          }
        }
      }
    }
  });
}

// Whether an expert's matrices can run on dot_rows_bf16_x16 tiles (see kMoeTileMaxTokens).
bool tile_rows(const Context& c, const MoeExpertsArgs& a, const ExpertWeights& ew) {
  const auto bf16 = [](const WeightView& w) { return w.format == WeightFormat::kBF16; };
  return !a.exact && c.bf16_dot && c.k.dot_rows_bf16_x16 != nullptr && c.k.pack_bf16_x16 != nullptr &&
         c.k.swiglu_pack_x16 != nullptr && c.k.lanes_to_rows_x16 != nullptr && c.k.gemm_bf16_amx == nullptr &&
         bf16(ew.gate) && bf16(ew.down) && (a.layout != GateUpLayout::kSeparate || bf16(ew.up));
}

// Experts with kMoeRowDotMaxTokens < n <= kMoeTileMaxTokens tokens (a prefill's, or a serving step that
// mixes one in) in three passes over the pool for all of them together:
//   0. each expert's x rows gathered (weighted where input_scaling) and packed into tiles of 16 tokens;
//   1. gate and up rows of every expert in chunks of columns taken in turn by the threads, each chunk's
//      rows against all of its expert's tiles, SwiGLU fused, the activations packed into tiles straight
//      away (their K is the expert width);
//   2. down rows split by output row, each chunk over every expert in expert order, weighted into out.
// A token's sums are those gemm_bf16_few gives the same expert's matmuls (the same kernel, tiles and
// order), and it adds its experts into out in expert order as the per-expert path does; only the fork-joins
// (three per expert), the copies and the packing of each matmul are gone.
// `tiled`: such experts, ascending, all of width `inter`; the dispatch is done.
void moe_experts_tiles(const Context& c, const MoeExpertsArgs& a, Workspace& ws,
                       const std::vector<int64_t>& tiled, int64_t inter) {
  const int64_t h = a.x.cols;
  const int64_t x_words = (h + 1) / 2 * 16;        // one x tile: [pairs of hidden][16 lanes]
  const int64_t act_words = (inter + 1) / 2 * 16;  // one activation tile: [pairs of inter][16 lanes]
  // Tile j of tiled expert i is tile first[i] + j of both buffers.
  std::vector<int64_t>& first = ws.moe_tile_first;
  first.assign(tiled.size() + 1, 0);
  int64_t max_tiles = 0;
  for (size_t i = 0; i < tiled.size(); ++i) {
    const auto e = static_cast<size_t>(tiled[i]);
    const int64_t tiles = (ws.moe_start[e + 1] - ws.moe_start[e] + 15) / 16;
    first[i + 1] = first[i] + tiles;
    max_tiles = std::max(max_tiles, tiles);
  }
  const int64_t total_tiles = first.back();
  uint32_t* xt = aligned_64<uint32_t>(ws.moe_x_tiles, total_tiles * x_words);
  uint32_t* actt = aligned_64<uint32_t>(ws.moe_act_tiles, total_tiles * act_words);
  if (static_cast<int64_t>(ws.thread.size()) < c.pool.size())
    ws.thread.resize(static_cast<size_t>(c.pool.size()));
  // The tiled expert and the tile of a global tile index.
  const auto expert_of_tile = [&](int64_t tile) {
    const auto it = std::upper_bound(first.begin(), first.end(), tile);
    return static_cast<size_t>(it - first.begin() - 1);
  };
  const auto slot_range = [&](size_t i) {
    const auto e = static_cast<size_t>(tiled[i]);
    return std::pair<int64_t, int64_t>{ws.moe_start[e], ws.moe_start[e + 1]};
  };

  // Pass 0: x tiles. stage: [16][h] float32 rows of the tile's tokens.
  std::atomic<int64_t> next_tile{0};
  c.pool.run([&](int tid) {
    float* stage = grown(ws.thread[static_cast<size_t>(tid)], 16 * h);
    for (int64_t tile = next_tile.fetch_add(1); tile < total_tiles; tile = next_tile.fetch_add(1)) {
      const size_t i = expert_of_tile(tile);
      const auto [s0, s1] = slot_range(i);
      const int64_t slot0 = s0 + (tile - first[i]) * 16, rows = std::min<int64_t>(16, s1 - slot0);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t slot = slot0 + r;
        const float* src = a.x.row(ws.moe_tokens[static_cast<size_t>(slot)]);
        float* dst = stage + r * h;
        if (a.input_scaling) {
          const float wgt = ws.moe_weights[static_cast<size_t>(slot)];
          for (int64_t col = 0; col < h; ++col) dst[col] = src[col] * wgt;
        } else {
          std::copy_n(src, h, dst);
        }
      }
      c.k.pack_bf16_x16(stage, h, rows, h, xt + tile * x_words);
    }
  });

  // Pass 1: gate and up, SwiGLU, activation tiles. Columns per item: 32, 16 past 8 tiles, so that
  // gu stays 32 KiB; a multiple of 8, so items start on a pair. The sums stay in lanes: swiglu_pack_x16
  // turns a tile's columns into BF16 pairs without the transposes (and the scalar exp) of a row per token.
  const int64_t kc = max_tiles > 8 ? 16 : 32;
  const int64_t chunks = (inter + kc - 1) / kc;
  const int64_t items = static_cast<int64_t>(tiled.size()) * chunks;
  const bool interleaved = a.layout == GateUpLayout::kInterleaved;
  std::atomic<int64_t> next_item{0};
  c.pool.run([&](int tid) {
    // gu: [tiles][2 kc][16] (gate rows then up rows of the chunk; interleaved: g u g u ...); act: [16][kc]
    float* gu = grown(ws.thread[static_cast<size_t>(tid)], max_tiles * 2 * kc * 16 + 16 * kc);
    float* act = gu + max_tiles * 2 * kc * 16;
    for (int64_t item = next_item.fetch_add(1); item < items; item = next_item.fetch_add(1)) {
      const auto i = static_cast<size_t>(item / chunks);
      const ExpertWeights& ew = a.experts[static_cast<size_t>(tiled[i])];
      const int64_t c0 = item % chunks * kc, n = std::min(inter, c0 + kc) - c0;
      const int64_t tiles = first[i + 1] - first[i];
      const uint32_t* xe = xt + first[i] * x_words;
      const auto* gate = static_cast<const uint16_t*>(ew.gate.data);
      // Rows per tile in gu: 2n, gate's first then up's (or interleaved pairs of rows).
      if (interleaved) {
        c.k.dot_rows_bf16_x16(gate + 2 * c0 * h, h, 2 * n, h, xe, tiles, gu);
      } else {
        // One call per matrix writes [tiles][n][16]; the two are laid out [tiles][n] each, then merged
        // per tile below by index arithmetic rather than copies.
        const auto* up = a.layout == GateUpLayout::kSeparate
                             ? static_cast<const uint16_t*>(ew.up.data) + c0 * h
                             : gate + (inter + c0) * h;
        c.k.dot_rows_bf16_x16(gate + c0 * h, h, n, h, xe, tiles, gu);
        c.k.dot_rows_bf16_x16(up, h, n, h, xe, tiles, gu + tiles * n * 16);
      }
      const auto [s0, s1] = slot_range(i);
      for (int64_t j = 0; j < tiles; ++j) {
        const int64_t lanes = std::min<int64_t>(16, s1 - s0 - 16 * j);
        // Tile j's gate and up sums of column col, lane 0 (lanes follow at stride 1): g0 + col * ld, u0 + ...
        float* g0 = interleaved ? gu + j * 2 * n * 16 : gu + j * n * 16;
        float* u0 = interleaved ? g0 + 16 : gu + (tiles * n + j * n) * 16;
        const int64_t ld = interleaved ? 32 : 16;
        const auto add_bias = [&](float* sums, const float* bias, int64_t step) {
          for (int64_t col = 0; col < n; ++col)
            for (int64_t lane = 0; lane < 16; ++lane) sums[col * ld + lane] += bias[col * step];
        };
        if (ew.gate_bias != nullptr) {
          add_bias(g0, ew.gate_bias + (interleaved ? 2 * c0 : c0), interleaved ? 2 : 1);
          if (interleaved) add_bias(u0, ew.gate_bias + 2 * c0 + 1, 2);
          if (a.layout == GateUpLayout::kConcatenated) add_bias(u0, ew.gate_bias + inter + c0, 1);
        }
        if (a.layout == GateUpLayout::kSeparate && ew.up_bias != nullptr) add_bias(u0, ew.up_bias + c0, 1);
        uint32_t* dst = actt + (first[i] + j) * act_words + c0 / 2 * 16;
        if (!a.clamped && !a.gelu_tanh) {
          c.k.swiglu_pack_x16(g0, u0, ld, n, lanes, dst);
          continue;
        }
        for (int64_t col = 0; col < n; ++col) {
          for (int64_t lane = 0; lane < lanes; ++lane)
            act[lane * kc + col] = gated_of(a, g0[col * ld + lane], u0[col * ld + lane]);
        }
        c.k.pack_bf16_x16(act, kc, lanes, n, dst);
      }
    }
  });

  // Pass 2: down rows in chunks of 64 (out: [tiles][rows][16], up to 64 KiB at 16 tiles), experts in order
  // within each chunk. Each tile goes into its tokens' rows through lanes_to_rows_x16 (a register transpose
  // per 16 rows) rather than a strided gather and an axpy per token: with pass 1's SwiGLU into pair tiles,
  // sums stay in lanes end to end, and the tiles' kernel, not the reshuffling, is where the time goes.
  constexpr int64_t kChunkRows = 64;
  std::atomic<int64_t> next_chunk{0};
  const int64_t row_chunks = (h + kChunkRows - 1) / kChunkRows;
  c.pool.run([&](int tid) {
    float* out = grown(ws.thread[static_cast<size_t>(tid)], max_tiles * kChunkRows * 16);
    for (int64_t ch = next_chunk.fetch_add(1); ch < row_chunks; ch = next_chunk.fetch_add(1)) {
      const int64_t r0 = ch * kChunkRows, rows = std::min(kChunkRows, h - r0);
      for (size_t i = 0; i < tiled.size(); ++i) {
        const ExpertWeights& ew = a.experts[static_cast<size_t>(tiled[i])];
        const int64_t tiles = first[i + 1] - first[i];
        c.k.dot_rows_bf16_x16(static_cast<const uint16_t*>(ew.down.data) + r0 * inter, inter, rows, inter,
                              actt + first[i] * act_words, tiles, out);
        const auto [s0, s1] = slot_range(i);
        for (int64_t j = 0; j < tiles; ++j) {
          const int64_t slot0 = s0 + 16 * j, lanes = std::min<int64_t>(16, s1 - slot0);
          float w[16];
          float* rows_out[16];
          for (int64_t l = 0; l < lanes; ++l) {
            const auto slot = static_cast<size_t>(slot0 + l);
            w[l] = a.input_scaling ? 1.0f : ws.moe_weights[slot];
            rows_out[l] = a.out.row(ws.moe_tokens[slot]) + r0;
          }
          c.k.lanes_to_rows_x16(out + j * rows * 16, rows, lanes, ew.down_bias ? ew.down_bias + r0 : nullptr,
                                w, true, rows_out);
        }
      }
    }
  });
}

}  // namespace

void moe_experts(const Context& c, const MoeExpertsArgs& a) {
  check_args(a);
  const int64_t h = a.x.cols;
  const int64_t k = a.expert_ids.cols;
  if (!a.accumulate) {
    for (int64_t t = 0; t < a.out.rows; ++t) std::fill(a.out.row(t), a.out.row(t) + h, 0.0f);
  }
  // Dispatch by counting sort into the workspace (reused between calls: no allocation once warm):
  // the (token, weight) pairs of local expert e are order[start[e] .. start[e + 1]).
  Workspace local;
  Workspace& ws = c.ws ? *c.ws : local;
  const size_t n_experts = a.experts.size();  // the experts held here (all of them in one process)
  const int64_t routed = a.routed_experts();
  // The local expert a pick goes to, or -1: a zero-computation expert (an id past the real ones: its
  // weighted input is added here, not dispatched) or one another rank computes (expert parallelism).
  auto local_expert = [&](int32_t id) -> int64_t { return a.slot_of(id); };
  ws.moe_start.assign(n_experts + 1, 0);
  for (int64_t t = 0; t < a.x.rows; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t id = a.expert_ids.row(t)[j];
      if (id >= routed) c.k.axpy(a.expert_weights.row(t)[j], a.x.row(t), a.out.row(t), h);
      const int64_t e = local_expert(id);
      if (e >= 0) ++ws.moe_start[static_cast<size_t>(e) + 1];
    }
  }
  for (size_t e = 0; e < n_experts; ++e) ws.moe_start[e + 1] += ws.moe_start[e];
  ws.moe_fill.assign(ws.moe_start.begin(), ws.moe_start.end() - 1);
  ws.moe_tokens.resize(static_cast<size_t>(a.x.rows * k));
  ws.moe_weights.resize(static_cast<size_t>(a.x.rows * k));
  for (int64_t t = 0; t < a.x.rows; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = local_expert(a.expert_ids.row(t)[j]);
      if (e < 0) continue;
      const int64_t slot = ws.moe_fill[static_cast<size_t>(e)]++;
      ws.moe_tokens[static_cast<size_t>(slot)] = static_cast<int32_t>(t);
      ws.moe_weights[static_cast<size_t>(slot)] = a.expert_weights.row(t)[j];
    }
  }
  // Experts with at most kMoeRowDotMaxTokens tokens and row-dot formats take the two-pass row dots
  // together, those with up to kMoeTileMaxTokens the tiles (each group all of one width); the others run
  // their matmuls one expert at a time below.
  ws.moe_done.assign(n_experts, 0);
  // The experts with tokens that `fits(n, weights)` admits and no path took yet, ascending, of the first
  // one's width (returned; -1: none), marked done.
  const auto take = [&](std::vector<int64_t>& list, auto fits) {
    list.clear();
    int64_t inter = -1;
    for (size_t e = 0; e < n_experts; ++e) {
      const int64_t n = ws.moe_start[e + 1] - ws.moe_start[e];
      const ExpertWeights& ew = a.experts[e];
      if (n == 0 || ws.moe_done[e] != 0 || !fits(n, ew) || (inter >= 0 && inter != ew.down.cols)) continue;
      inter = ew.down.cols;
      list.push_back(static_cast<int64_t>(e));
      ws.moe_done[e] = 1;
    }
    return inter;
  };
  const int64_t small_inter = take(ws.moe_active, [&](int64_t n, const ExpertWeights& ew) {
    // A row-invariant call keeps experts of any number of tokens on these row dots: a token's output is the
    // sum of its experts' in the order this path adds them, and a one-token call adds them here.
    return !a.relu2 && (n <= kMoeRowDotMaxTokens || a.row_invariant) && plain_rows(ew.gate, a.exact) &&
           plain_rows(ew.down, a.exact) &&
           (a.layout != GateUpLayout::kSeparate || plain_rows(ew.up, a.exact));
  });
  if (!ws.moe_active.empty()) moe_experts_gemv(c, a, ws, ws.moe_active, small_inter);
  // INT8 / INT4 experts of up to kGemvMaxRows tokens (any number in a row-invariant call), where their
  // matmuls would take the row dots too (int_matmul): the same bits, with x quantized once for all of
  // them and two passes over the pool instead of three fork-joins per expert.
  const int64_t int_inter = take(ws.moe_active, [&](int64_t n, const ExpertWeights& ew) {
    return !a.relu2 && (n <= kGemvMaxRows || a.row_invariant) && int_rows(ew.gate, a.exact) &&
           int_rows(ew.down, a.exact) && (a.layout != GateUpLayout::kSeparate || int_rows(ew.up, a.exact));
  });
  if (!ws.moe_active.empty()) moe_experts_gemv(c, a, ws, ws.moe_active, int_inter);
  const int64_t tiled_inter = take(ws.moe_tiled, [&](int64_t n, const ExpertWeights& ew) {
    // The tiles round each token as a GEMM does: never in a row-invariant call (its experts took the row
    // dots above, or take their row-invariant matmuls below).
    return !a.relu2 && !a.row_invariant && n > kMoeRowDotMaxTokens && n <= kMoeTileMaxTokens &&
           tile_rows(c, a, ew);
  });
  if (!ws.moe_tiled.empty()) moe_experts_tiles(c, a, ws, ws.moe_tiled, tiled_inter);
  auto grow = [](std::vector<float>& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  };
  std::vector<float>& xe = ws.moe_x;
  std::vector<float>& gate_up = ws.moe_gate_up;
  std::vector<float>& act = ws.moe_act;
  std::vector<float>& down = ws.moe_down;
  for (size_t e = 0; e < n_experts; ++e) {
    const int64_t first = ws.moe_start[e];
    const int64_t n = ws.moe_start[e + 1] - first;
    if (n == 0 || ws.moe_done[e] != 0) continue;  // none, or done above
    const int32_t* tokens_e = ws.moe_tokens.data() + first;
    const float* weights_e = ws.moe_weights.data() + first;
    const ExpertWeights& ew = a.experts[e];
    const int64_t inter = ew.down.cols;
    grow(xe, n * h);
    for (int64_t i = 0; i < n; ++i) {
      const float* src = a.x.row(tokens_e[i]);
      float* dst = xe.data() + i * h;
      const float s = a.input_scaling ? weights_e[i] : 1.0f;
      for (int64_t col = 0; col < h; ++col) dst[col] = src[col] * s;
    }
    const ConstMatrix xm{xe.data(), n, h};
    grow(gate_up, n * 2 * inter);
    const Matrix gu{gate_up.data(), n, 2 * inter};
    if (a.relu2) {  // ungated: only the up half, relu(u)^2 below
      matmul(c, {.x = xm,
                 .w = ew.up,
                 .bias = ew.up_bias,
                 .y = gu.col_slice(inter, inter),
                 .exact = a.exact,
                 .row_invariant = a.row_invariant});
    } else if (a.layout == GateUpLayout::kSeparate) {
      matmul(c, {.x = xm,
                 .w = ew.gate,
                 .bias = ew.gate_bias,
                 .y = gu.col_slice(0, inter),
                 .exact = a.exact,
                 .row_invariant = a.row_invariant});
      matmul(c, {.x = xm,
                 .w = ew.up,
                 .bias = ew.up_bias,
                 .y = gu.col_slice(inter, inter),
                 .exact = a.exact,
                 .row_invariant = a.row_invariant});
    } else {
      matmul(c, {.x = xm,
                 .w = ew.gate,
                 .bias = ew.gate_bias,
                 .y = gu,
                 .exact = a.exact,
                 .row_invariant = a.row_invariant});
    }
    grow(act, n * inter);
    std::vector<float>& halves = ws.moe_halves;  // interleaved: [2][inter] gate then up sums of a token
    for (int64_t i = 0; i < n; ++i) {
      const float* row = gate_up.data() + i * 2 * inter;
      if (a.layout == GateUpLayout::kInterleaved) {
        grow(halves, 2 * inter);
        for (int64_t col = 0; col < inter; ++col) {
          halves[static_cast<size_t>(col)] = row[2 * col];
          halves[static_cast<size_t>(inter + col)] = row[2 * col + 1];
        }
        row = halves.data();
      }
      if (a.relu2) {
        float* out = act.data() + i * inter;
        for (int64_t col = 0; col < inter; ++col) {
          const float u = std::max(row[inter + col], 0.0f);
          out[col] = u * u;
        }
        continue;
      }
      swiglu_span(c, a, row, row + inter, inter, act.data() + i * inter);
    }
    grow(down, n * h);
    matmul(c, {.x = ConstMatrix{act.data(), n, inter},
               .w = ew.down,
               .bias = ew.down_bias,
               .y = Matrix{down.data(), n, h},
               .exact = a.exact,
               .row_invariant = a.row_invariant});
    for (int64_t i = 0; i < n; ++i) {
      const float w = a.input_scaling ? 1.0f : weights_e[i];
      c.k.axpy(w, down.data() + i * h, a.out.row(tokens_e[i]), h);
    }
  }
}

}  // namespace day0::cpu
