// Attention over the paged KV cache on the cpu backend, every sequence of a step in one call.
// Work items are (sequence, tile of query rows, kv head, key split): the query heads of a GQA group
// and the rows of a tile share each page of keys and values once it is dequantised into the thread's
// scratch; the tile's queries (rows x heads of the group) are the lanes of one key-query dot per span
// (SimdKernels::key_query_dots: no horizontal sums, each score a fused multiply-add chain with the same
// bits whatever the tile holds) and, where the level has attend_span_lanes (AVX2, AVX-512), of the
// online softmax and value sums too (a prefill's attention then runs about a third faster than one
// query at a time); the online softmax runs over the pages (no [T, S] score matrix). When the step has fewer
// (sequence, tile, kv head) items than threads can use (decode of one long sequence), keys are split
// too and the partial softmax states (max, denominator, unnormalised output) are merged afterwards
// (flash-decoding), so one sequence keeps every core busy.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "day0/backends/cpu/cpu_ops.h"
#include "day0/core/error.h"
#include "day0/ops/kernel_checks.h"
#include "day0/ops/key_selection.h"

namespace day0::cpu {

namespace {

inline constexpr int64_t kTileRows = 8;        // query rows sharing one pass over the keys
inline constexpr int64_t kMinSplitKeys = 512;  // a key split shorter than this is not worth a merge
// Keys gathered from consecutive pages before the tile's rows go over them: each (row, head) then runs
// its dots, max, rescale, exponentials and value sums once per span rather than once per 32-key page,
// whose call overheads are as large as the arithmetic (prefill of a 64-wide head).
inline constexpr int64_t kSpanKeys = 128;

// One BF16 cache row as a one-row weight matrix, for SimdKernels::dequant_row.
WeightView bf16_row(const void* row, int64_t n) {
  WeightView w;
  w.format = WeightFormat::kBF16;
  w.rows = 1;
  w.cols = n;
  w.data = row;
  return w;
}

// SimdKernels::key_query_dots where the level has none: the same fused multiply-add chains.
void key_query_dots_portable(const float* k, int64_t ldk, int64_t n, const float* qt, int64_t ldq, int64_t d,
                             float* st) {
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < ldq; ++i) {
      float acc = 0.0f;
      for (int64_t c = 0; c < d; ++c) acc = std::fma(k[j * ldk + c], qt[c * ldq + i], acc);
      st[j * ldq + i] = acc;
    }
  }
}

void visible(AttentionMask mask, int64_t window, int64_t i, int64_t& lo, int64_t& hi) {
  hi = i;
  lo = 0;
  if (mask == AttentionMask::kSliding) lo = i - window + 1;
  if (mask == AttentionMask::kChunked) lo = (i / window) * window;
}

void check(const PagedAttentionArgs& a) {
  D0_CHECK_MSG(a.n_heads > 0 && a.n_kv_heads > 0 && a.n_heads % a.n_kv_heads == 0,
               "paged_attention: n_heads must be a positive multiple of n_kv_heads");
  const int64_t dv = a.v_head_dim > 0 ? a.v_head_dim : a.head_dim;
  D0_CHECK_MSG(a.q.cols == a.n_heads * a.head_dim && a.out.cols == a.n_heads * dv && a.out.rows == a.q.rows,
               "paged_attention: q / out shapes do not match the heads");
  D0_CHECK_MSG(a.mask == AttentionMask::kCausal || a.window > 0, "paged_attention: window must be positive");
  D0_CHECK_MSG(a.sinks.empty() || static_cast<int64_t>(a.sinks.size()) == a.n_heads,
               "paged_attention: one sink per head");
  for (const PagedSequence& s : a.seqs) {
    D0_CHECK_MSG(s.q_row0 >= 0 && s.q_rows >= 0 && s.q_row0 + s.q_rows <= a.q.rows,
                 "paged_attention: a sequence's rows are outside q");
    // Rows at least as wide as this call's heads: a pool shared with layers of more KV heads is wider.
    D0_CHECK_MSG(s.kv.first_width >= a.n_kv_heads * a.head_dim && s.kv.second_width >= a.n_kv_heads * dv,
                 "paged_attention: cache rows narrower than the heads");
    D0_CHECK_MSG(s.kv.length <= static_cast<int64_t>(s.kv.table.size()) * s.kv.block_tokens,
                 "paged_attention: length past the block table");
  }
}

}  // namespace

namespace {

// One query head's output from the partial softmax states of its key splits (split sp's at states + sp *
// stride: acc [dv], max, sum), each rescaled to their common maximum, then normalised; zeros where no
// split saw a key (and there is no sink).
void merge_splits(const float* states, int64_t stride, int64_t splits, int64_t dv, float* out,
                  const SimdKernels& k) {
  float m = -INFINITY;
  for (int64_t sp = 0; sp < splits; ++sp) m = std::max(m, states[sp * stride + dv]);
  std::fill(out, out + dv, 0.0f);
  if (std::isinf(m) && m < 0) return;
  float sum = 0.0f;
  for (int64_t sp = 0; sp < splits; ++sp) {
    const float* x = states + sp * stride;
    if (x[dv + 1] == 0.0f) continue;
    const float w = std::exp(x[dv] - m);
    sum += w * x[dv + 1];
    k.axpy(w, x, out, dv);
  }
  if (sum > 0.0f) k.scale(1.0f / sum, out, dv);
}

}  // namespace

namespace {

// Block-sparse attention (a.selection): one work item per (query row, kv head). The query heads of the
// head that share a selection group read the keys of its selected blocks only, each key row dequantised
// once for all of them: a decode step touches at most its top-k blocks of the cache, however long.
void paged_block_sparse_attention(const Context& c, const PagedAttentionArgs& a) {
  const int64_t d = a.head_dim, dv = a.v_head_dim > 0 ? a.v_head_dim : a.head_dim;
  const int64_t group = a.n_heads / a.n_kv_heads, per_group = a.n_heads / a.selection.groups;
  const int64_t bs = a.selection.block_size;
  const float scale = a.scale > 0.0f ? a.scale : 1.0f / std::sqrt(static_cast<float>(d));
  std::vector<int32_t> seq_of_row(static_cast<size_t>(a.q.rows), -1);
  for (size_t si = 0; si < a.seqs.size(); ++si) {
    for (int64_t r = 0; r < a.seqs[si].q_rows; ++r)
      seq_of_row[static_cast<size_t>(a.seqs[si].q_row0 + r)] = static_cast<int32_t>(si);
  }
  c.pool.parallel_for(a.q.rows * a.n_kv_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> keys(static_cast<size_t>(bs * d)), values(static_cast<size_t>(bs * dv));
    std::vector<float> scores(static_cast<size_t>(bs)), acc(static_cast<size_t>(group * dv));
    std::vector<float> m(static_cast<size_t>(group)), sum(static_cast<size_t>(group));
    std::vector<int64_t> blocks;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / a.n_kv_heads, g = item % a.n_kv_heads;
      const int32_t si = seq_of_row[static_cast<size_t>(t)];
      if (si < 0) continue;  // a row no sequence owns
      const PagedSequence& s = a.seqs[static_cast<size_t>(si)];
      const KvPages& kv = s.kv;
      int64_t lo = 0, hi = 0;
      visible(a.mask, a.window, s.q_pos0 + (t - s.q_row0), lo, hi);
      lo = std::max(lo, kv.pos0);
      hi = std::min(hi, kv.pos0 + kv.length - 1);
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t h = 0; h < group; ++h) {
        const bool sink = !a.sinks.empty();
        m[static_cast<size_t>(h)] = sink ? a.sinks[static_cast<size_t>(g * group + h)] : -INFINITY;
        sum[static_cast<size_t>(h)] = sink ? 1.0f : 0.0f;
      }
      // Runs of the group's heads with one selection group each.
      for (int64_t h0 = 0; h0 < group;) {
        const int64_t sel = (g * group + h0) / per_group;
        int64_t h1 = h0 + 1;
        while (h1 < group && (g * group + h1) / per_group == sel) ++h1;
        selected_block_list(a.selection, t, g * group + h0, a.n_heads, blocks);
        for (int64_t b : blocks) {
          const int64_t k0 = std::max(b * bs, lo), k1 = std::min((b + 1) * bs - 1, hi);
          const int64_t n = k1 - k0 + 1;
          if (n <= 0) continue;
          for (int64_t j = 0; j < n; ++j) {  // head g's key and value rows of the block, float32
            const int64_t rel = k0 + j - kv.pos0;
            const auto* kr = static_cast<const unsigned char*>(kv.first_row(rel));
            const auto* vr = static_cast<const unsigned char*>(kv.second_row(rel));
            const int64_t elem = kv_dtype_bytes(kv.dtype);
            if (kv.dtype == KvDtype::kBF16) {  // the level's widening (the same values as kv_row_to_f32)
              c.k.dequant_row(bf16_row(kr + g * d * elem, d), 0, 0, d, keys.data() + j * d);
              c.k.dequant_row(bf16_row(vr + g * dv * elem, dv), 0, 0, dv, values.data() + j * dv);
            } else {
              kv_row_to_f32(kv.dtype, kr + g * d * elem, d, keys.data() + j * d);
              kv_row_to_f32(kv.dtype, vr + g * dv * elem, dv, values.data() + j * dv);
            }
          }
          for (int64_t h = h0; h < h1; ++h) {
            const float* q = a.q.row(t) + (g * group + h) * d;
            float block_max = -INFINITY;
            for (int64_t j = 0; j < n; ++j) {
              scores[static_cast<size_t>(j)] = c.k.dot(q, keys.data() + j * d, d) * scale;
              block_max = std::max(block_max, scores[static_cast<size_t>(j)]);
            }
            float& mh = m[static_cast<size_t>(h)];
            float& sh = sum[static_cast<size_t>(h)];
            float* x = acc.data() + h * dv;
            if (block_max > mh) {
              const float factor = std::isinf(mh) ? 0.0f : std::exp(mh - block_max);
              sh *= factor;
              c.k.scale(factor, x, dv);
              mh = block_max;
            }
            sh += c.k.exp_sum(scores.data(), n, mh);
            for (int64_t j = 0; j < n; ++j)
              c.k.axpy(scores[static_cast<size_t>(j)], values.data() + j * dv, x, dv);
          }
        }
        h0 = h1;
      }
      for (int64_t h = 0; h < group; ++h) {
        const float sh = sum[static_cast<size_t>(h)];
        float* out = a.out.row(t) + (g * group + h) * dv;
        const float* x = acc.data() + h * dv;
        const float inv = sh > 0.0f ? 1.0f / sh : 0.0f;
        for (int64_t i = 0; i < dv; ++i) out[i] = x[i] * inv;
      }
    }
  });
}

}  // namespace

void paged_attention(const Context& c, const PagedAttentionArgs& a) {
  check(a);
  check_selection(a.selection, a.q.rows, a.n_heads, "paged_attention");
  if (!a.selection.empty()) return paged_block_sparse_attention(c, a);
  Workspace local;
  Workspace& ws = c.ws ? *c.ws : local;
  const int64_t d = a.head_dim;
  const int64_t dv = a.v_head_dim > 0 ? a.v_head_dim : a.head_dim;
  const int64_t group = a.n_heads / a.n_kv_heads;
  const float scale = a.scale > 0.0f ? a.scale : 1.0f / std::sqrt(static_cast<float>(d));
  const int64_t state = dv + 2;  // per (row, head): acc[dv], max, sum

  // (sequence, tile, kv head) items and the widest key range any of them reads.
  int64_t base = 0;
  int64_t widest = 0;
  for (const PagedSequence& s : a.seqs) {
    base += (s.q_rows + kTileRows - 1) / kTileRows * a.n_kv_heads;
    widest = std::max(widest, s.kv.length);
  }
  if (base == 0) return;
  const int64_t want = 4 * static_cast<int64_t>(c.pool.size());
  const int64_t splits =
      std::clamp<int64_t>((want + base - 1) / base, 1, std::max<int64_t>(1, widest / kMinSplitKeys));

  ws.items.clear();
  for (size_t si = 0; si < a.seqs.size(); ++si) {
    const PagedSequence& s = a.seqs[si];
    for (int64_t t0 = 0; t0 < s.q_rows; t0 += kTileRows) {
      for (int64_t g = 0; g < a.n_kv_heads; ++g) {
        for (int64_t sp = 0; sp < splits; ++sp) ws.items.push_back({static_cast<int32_t>(si), t0, g, sp});
      }
    }
  }
  const auto n_items = static_cast<int64_t>(ws.items.size());
  const int64_t per_item = kTileRows * group * state;
  if (static_cast<int64_t>(ws.partial.size()) < n_items * per_item)
    ws.partial.resize(static_cast<size_t>(n_items * per_item));
  if (ws.thread.size() < static_cast<size_t>(c.pool.size()))
    ws.thread.resize(static_cast<size_t>(c.pool.size()));
  if (ws.lane_bounds.size() < static_cast<size_t>(c.pool.size()))
    ws.lane_bounds.resize(static_cast<size_t>(c.pool.size()));

  c.pool.run([&](int tid) {
    const int64_t i_begin = n_items * tid / c.pool.size();
    const int64_t i_end = n_items * (tid + 1) / c.pool.size();
    if (i_begin >= i_end) return;
    std::vector<float>& buf = ws.thread[static_cast<size_t>(tid)];
    int64_t cap = kSpanKeys;  // keys a span holds: kSpanKeys, or one page where pages are longer
    for (const PagedSequence& s : a.seqs) cap = std::max(cap, s.kv.block_tokens);
    // Lanes of the widest tile; an item's own (ldq below) cover just its rows (a decode step's one row).
    const int64_t ldq_max = (kTileRows * group + 7) / 8 * 8;
    const auto need = static_cast<size_t>(cap * (d + dv) + cap + d * ldq_max + cap * ldq_max);
    if (buf.size() < need) buf.resize(need);
    float* kbuf = buf.data();         // [cap, d] dequantised keys of head g
    float* vbuf = kbuf + cap * d;     // [cap, dv] values
    float* scores = vbuf + cap * dv;  // [cap] one query's scores
    float* qt = scores + cap;         // [d, ldq] queries transposed: qt[c][r * group + h], zero past them
    float* st = qt + d * ldq_max;     // [cap, ldq] the span's scores, unscaled
    const auto key_query_dots = c.k.key_query_dots ? c.k.key_query_dots : key_query_dots_portable;
    // Lanes' visible key positions [lo, hi] for attend_span_lanes; none past the tile's queries.
    std::vector<int32_t>& bounds = ws.lane_bounds[static_cast<size_t>(tid)];
    const bool in_lanes = c.k.attend_span_lanes != nullptr && ldq_max <= kMaxAttentionLanes;
    if (in_lanes) bounds.resize(static_cast<size_t>(2 * ldq_max));
    int32_t* lane_lo = bounds.data();
    int32_t* lane_hi = lane_lo + ldq_max;
    for (int64_t it = i_begin; it < i_end; ++it) {
      const PagedItem& item = ws.items[static_cast<size_t>(it)];
      const PagedSequence& s = a.seqs[static_cast<size_t>(item.seq)];
      const KvPages& kv = s.kv;
      const int64_t rows = std::min(kTileRows, s.q_rows - item.t0);
      const int64_t ldq = (rows * group + 7) / 8 * 8;
      float* state_of = ws.partial.data() + it * per_item;  // [rows][group][acc dv, m, sum]
      // Key positions the tile can see, then this split's share of them.
      int64_t lo_first = 0, hi_first = 0, lo_last = 0, hi_last = 0;
      visible(a.mask, a.window, s.q_pos0 + item.t0, lo_first, hi_first);
      visible(a.mask, a.window, s.q_pos0 + item.t0 + rows - 1, lo_last, hi_last);
      const int64_t k_lo = std::max(kv.pos0, lo_first);
      const int64_t k_hi = std::min(kv.pos0 + kv.length, hi_last + 1);  // exclusive
      const int64_t span = std::max<int64_t>(0, k_hi - k_lo);
      const int64_t j0 = k_lo + span * item.split / splits;
      const int64_t j1 = k_lo + span * (item.split + 1) / splits;
      if (in_lanes) {
        for (int64_t i = 0; i < ldq; ++i) {
          int64_t lo = 1, hi = 0;  // padding lanes see nothing
          if (i < rows * group) visible(a.mask, a.window, s.q_pos0 + item.t0 + i / group, lo, hi);
          lane_lo[i] = static_cast<int32_t>(std::clamp<int64_t>(lo, INT32_MIN, INT32_MAX));
          lane_hi[i] = static_cast<int32_t>(std::clamp<int64_t>(hi, INT32_MIN, INT32_MAX));
        }
      }
      std::fill(qt, qt + d * ldq, 0.0f);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t h = 0; h < group; ++h) {
          const float* q = a.q.row(s.q_row0 + item.t0 + r) + (item.g * group + h) * d;
          for (int64_t cc = 0; cc < d; ++cc) qt[cc * ldq + r * group + h] = q[cc];
        }
      }
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t h = 0; h < group; ++h) {
          float* x = state_of + (r * group + h) * state;
          std::fill(x, x + dv, 0.0f);
          const bool sink = !a.sinks.empty() && item.split == 0;
          x[dv] = sink ? a.sinks[static_cast<size_t>(item.g * group + h)] : -INFINITY;
          x[dv + 1] = sink ? 1.0f : 0.0f;
        }
      }
      const int64_t bt = kv.block_tokens;
      for (int64_t p = j0; p < j1;) {
        const int64_t rel = p - kv.pos0;
        // The keys [p, p + in_block) this pass covers: one page's rows in range for an F32 cache (read in
        // place), else whole pages' rows dequantised (head g only) into the scratch up to `cap` keys, once
        // for every row and head of the tile.
        int64_t in_block = std::min(bt - rel % bt, j1 - p);
        const float* kr;
        const float* vr;
        int64_t k_stride = d, v_stride = dv;
        if (kv.dtype == KvDtype::kF32) {
          kr = static_cast<const float*>(kv.first_row(rel)) + item.g * d;
          vr = static_cast<const float*>(kv.second_row(rel)) + item.g * dv;
          k_stride = kv.first_width;
          v_stride = kv.second_width;
        } else {
          const int64_t elem = kv_dtype_bytes(kv.dtype);
          in_block = 0;
          while (p + in_block < j1) {
            const int64_t page_rel = rel + in_block;
            const int64_t take = std::min(bt - page_rel % bt, j1 - p - in_block);
            if (in_block > 0 && in_block + take > cap) break;
            if (kv.dtype == KvDtype::kBF16 && c.k.widen_bf16_rows != nullptr) {
              // The page's rows of head g, `width` apart: one call each for keys and values.
              const auto* k0 = static_cast<const uint16_t*>(kv.first_row(page_rel)) + item.g * d;
              const auto* v0 = static_cast<const uint16_t*>(kv.second_row(page_rel)) + item.g * dv;
              c.k.widen_bf16_rows(k0, kv.first_width, take, d, kbuf + in_block * d);
              c.k.widen_bf16_rows(v0, kv.second_width, take, dv, vbuf + in_block * dv);
              in_block += take;
              continue;
            }
            for (int64_t j = 0; j < take; ++j) {
              const auto* krow =
                  static_cast<const unsigned char*>(kv.first_row(page_rel + j)) + item.g * d * elem;
              const auto* vrow =
                  static_cast<const unsigned char*>(kv.second_row(page_rel + j)) + item.g * dv * elem;
              if (kv.dtype == KvDtype::kBF16) {  // the level's widening (the same values as kv_row_to_f32)
                c.k.dequant_row(bf16_row(krow, d), 0, 0, d, kbuf + (in_block + j) * d);
                c.k.dequant_row(bf16_row(vrow, dv), 0, 0, dv, vbuf + (in_block + j) * dv);
              } else {
                kv_row_to_f32(kv.dtype, krow, d, kbuf + (in_block + j) * d);
                kv_row_to_f32(kv.dtype, vrow, dv, vbuf + (in_block + j) * dv);
              }
            }
            in_block += take;
          }
          kr = kbuf;
          vr = vbuf;
        }
        key_query_dots(kr, k_stride, in_block, qt, ldq, d, st);
        if (in_lanes) {
          c.k.attend_span_lanes(st, ldq, rows * group, in_block, p, lane_lo, lane_hi, scale, vr, v_stride, dv,
                                state_of, state);
          p += in_block;
          continue;
        }
        for (int64_t r = 0; r < rows; ++r) {
          int64_t lo = 0, hi = 0;
          visible(a.mask, a.window, s.q_pos0 + item.t0 + r, lo, hi);
          const int64_t a0 = std::max(p, lo), a1 = std::min(p + in_block, hi + 1);
          if (a0 >= a1) continue;
          for (int64_t h = 0; h < group; ++h) {
            float* x = state_of + (r * group + h) * state;
            const int64_t n = a1 - a0;
            const float* lane = st + (a0 - p) * ldq + r * group + h;
            // One pass: this query's scores out of the lanes, scaled, and their largest (as max_element).
            float block_max = lane[0] * scale;
            scores[0] = block_max;
            for (int64_t j = 1; j < n; ++j) {
              const float v = lane[j * ldq] * scale;
              scores[j] = v;
              if (block_max < v) block_max = v;
            }
            float& m = x[dv];
            float& sum = x[dv + 1];
            if (block_max > m) {
              const float factor = std::isinf(m) ? 0.0f : std::exp(m - block_max);
              sum *= factor;
              c.k.scale(factor, x, dv);
              m = block_max;
            }
            sum += c.k.exp_sum(scores, n, m);
            if (c.k.axpy_rows != nullptr) {
              c.k.axpy_rows(scores, vr + (a0 - p) * v_stride, v_stride, n, x, dv);
            } else {
              for (int64_t j = 0; j < n; ++j) c.k.axpy(scores[j], vr + (a0 - p + j) * v_stride, x, dv);
            }
          }
        }
        p += in_block;
      }
      if (splits == 1) {  // the tile's only split: its rows are done here, without a second pool pass
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t h = 0; h < group; ++h)
            merge_splits(state_of + (r * group + h) * state, 0, 1, dv,
                         a.out.row(s.q_row0 + item.t0 + r) + (item.g * group + h) * dv, c.k);
        }
      }
    }
  });
  if (splits == 1) return;

  // Merge the key splits of each (sequence, tile, kv head) and normalise.
  const int64_t groups = n_items / splits;
  c.pool.parallel_for(groups, 1, [&](int64_t begin, int64_t end) {
    for (int64_t gi = begin; gi < end; ++gi) {
      const PagedItem& first = ws.items[static_cast<size_t>(gi * splits)];
      const PagedSequence& s = a.seqs[static_cast<size_t>(first.seq)];
      const int64_t rows = std::min(kTileRows, s.q_rows - first.t0);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t h = 0; h < group; ++h)
          merge_splits(ws.partial.data() + gi * splits * per_item + (r * group + h) * state, per_item, splits,
                       dv, a.out.row(s.q_row0 + first.t0 + r) + (first.g * group + h) * dv, c.k);
      }
    }
  });
}

void paged_mla_absorbed(const Context& c, const PagedMlaArgs& a) {
  D0_CHECK_MSG(a.n_heads > 0 && a.kv_lora_rank > 0 && a.scale > 0.0f, "paged_mla_attention: bad sizes");
  D0_CHECK_MSG(a.q.cols == a.n_heads * (a.d_nope + a.d_rope) && a.out.cols == a.n_heads * a.d_v,
               "paged_mla_attention: q / out shapes do not match the heads");
  D0_CHECK_MSG(a.w_kv_b.rows == a.n_heads * (a.d_nope + a.d_v) && a.w_kv_b.cols == a.kv_lora_rank,
               "paged_mla_attention: kv_b_proj shape");
  Workspace local;
  Workspace& ws = c.ws ? *c.ws : local;
  const int64_t r = a.kv_lora_rank;
  const int64_t per_head = a.d_nope + a.d_v;
  const int64_t dqk = a.d_nope + a.d_rope;
  const bool mx = a.w_kv_b.format == WeightFormat::kMxfp4;
  ws.items.clear();
  for (size_t si = 0; si < a.seqs.size(); ++si) {
    const PagedSequence& s = a.seqs[si];
    // k_pe leads the second tensor; the lightning indexer's key, if any, follows it in the same rows.
    D0_CHECK_MSG(s.kv.first_width == r && s.kv.second_width >= a.d_rope, "paged_mla_attention: cache widths");
    D0_CHECK_MSG(s.kv.pos0 == 0, "paged_mla_attention: MLA layers keep every position");
    for (int64_t t = 0; t < s.q_rows; ++t)
      for (int64_t h = 0; h < a.n_heads; ++h) ws.items.push_back({static_cast<int32_t>(si), t, h, 0});
  }
  const auto n_items = static_cast<int64_t>(ws.items.size());
  if (ws.thread.size() < static_cast<size_t>(c.pool.size()))
    ws.thread.resize(static_cast<size_t>(c.pool.size()));
  c.pool.run([&](int tid) {
    const int64_t i_begin = n_items * tid / c.pool.size();
    const int64_t i_end = n_items * (tid + 1) / c.pool.size();
    if (i_begin >= i_end) return;
    std::vector<float>& buf = ws.thread[static_cast<size_t>(tid)];
    const auto need = static_cast<size_t>(5 * r + a.d_rope + 256);
    if (buf.size() < need) buf.resize(need);
    float* q_abs = buf.data();
    float* latent = q_abs + r;
    float* prepared = latent + r;
    float* w_row = prepared + r;
    float* key = w_row + r;              // [r + d_rope] one dequantised cache row
    float* scores = key + r + a.d_rope;  // [256]
    std::vector<char> keep;
    std::vector<int64_t> keys;  // the keys the row attends to: every causal one, or its sparse selection
    for (int64_t it = i_begin; it < i_end; ++it) {
      const PagedItem& item = ws.items[static_cast<size_t>(it)];
      const PagedSequence& s = a.seqs[static_cast<size_t>(item.seq)];
      const int64_t t = s.q_row0 + item.t0;
      const int64_t h = item.g;
      const float* q_nope = a.q.row(t) + h * dqk;
      const float* q_pe = q_nope + a.d_nope;
      std::fill(q_abs, q_abs + r, 0.0f);
      for (int64_t dd = 0; dd < a.d_nope; ++dd) {
        c.k.dequant_row(a.w_kv_b, h * per_head + dd, 0, r, w_row);
        c.k.axpy(q_nope[dd], w_row, q_abs, r);
      }
      const int64_t causal_keys = std::min<int64_t>(s.kv.length, s.q_pos0 + item.t0 + 1);
      // Dense: every causal key, nothing allocated (decode must not touch the heap).
      const bool sparse = a.selected.rows > 0;
      if (sparse) selected_key_list(a.selected, t, causal_keys, keep, keys);
      const int64_t n_keys = sparse ? static_cast<int64_t>(keys.size()) : causal_keys;
      auto key_at = [&](int64_t i) { return sparse ? keys[static_cast<size_t>(i)] : i; };
      float m = -INFINITY, sum = 0.0f;
      std::fill(latent, latent + r, 0.0f);
      for (int64_t jb = 0; jb < n_keys; jb += 256) {
        const int64_t nb = std::min<int64_t>(256, n_keys - jb);
        for (int64_t j = 0; j < nb; ++j) {
          const int64_t row = key_at(jb + j);
          const float* ck;
          const float* kp;
          if (s.kv.dtype == KvDtype::kF32) {
            ck = static_cast<const float*>(s.kv.first_row(row));
            kp = static_cast<const float*>(s.kv.second_row(row));
          } else {
            kv_row_to_f32(s.kv.dtype, s.kv.first_row(row), r, key);
            kv_row_to_f32(s.kv.dtype, s.kv.second_row(row), a.d_rope, key + r);
            ck = key;
            kp = key + r;
          }
          scores[j] = (c.k.dot(q_abs, ck, r) + c.k.dot(q_pe, kp, a.d_rope)) * a.scale;
        }
        const float block_max = *std::max_element(scores, scores + nb);
        if (block_max > m) {
          const float factor = std::isinf(m) ? 0.0f : std::exp(m - block_max);
          sum *= factor;
          c.k.scale(factor, latent, r);
          m = block_max;
        }
        sum += c.k.exp_sum(scores, nb, m);
        for (int64_t j = 0; j < nb; ++j) {
          const int64_t row = key_at(jb + j);
          const float* ck =
              s.kv.dtype == KvDtype::kF32 ? static_cast<const float*>(s.kv.first_row(row)) : key;
          if (s.kv.dtype != KvDtype::kF32) kv_row_to_f32(s.kv.dtype, s.kv.first_row(row), r, key);
          c.k.axpy(scores[j], ck, latent, r);
        }
      }
      if (n_keys > 0) c.k.scale(1.0f / sum, latent, r);
      const float* x = latent;
      if (mx) {
        prepare_mxfp4_x(latent, r, prepared);
        x = prepared;
      }
      c.k.dot_rows(a.w_kv_b, h * per_head + a.d_nope, h * per_head + per_head, x, a.out.row(t) + h * a.d_v);
    }
  });
}

void indexer_topk(const Context& c, const IndexerTopkArgs& a) {
  check_args(a);
  const int64_t k = a.selected.cols, d = a.head_dim;
  for (const PagedSequence& s : a.seqs) {
    if (s.q_rows == 0) continue;
    D0_CHECK_MSG(s.kv.pos0 == 0, "indexer_topk: indexed layers keep every position");
    c.pool.parallel_for(s.q_rows, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> key(static_cast<size_t>(s.kv.second_width));  // one dequantised cache row
      std::vector<float> scores;                                       // [keys] of the row
      std::vector<int32_t> order;
      for (int64_t i = begin; i < end; ++i) {
        const int64_t t = s.q_row0 + i;
        const int64_t n_keys = a.visible_keys(s.q_pos0 + i, s.kv.length);
        scores.assign(static_cast<size_t>(n_keys), 0.0f);
        for (int64_t j = 0; j < n_keys; ++j) {
          const float* kr;
          if (s.kv.dtype == KvDtype::kF32) {
            kr = static_cast<const float*>(s.kv.second_row(j)) + a.key_col0;
          } else {
            kv_row_to_f32(s.kv.dtype, s.kv.second_row(j), s.kv.second_width, key.data());
            kr = key.data() + a.key_col0;
          }
          float score = 0.0f;
          for (int64_t h = 0; h < a.n_heads; ++h) {
            const float dot = c.k.dot(a.q.row(t) + h * d, kr, d) * a.scale;
            score += a.weights.row(t)[h] * std::max(0.0f, dot);
          }
          scores[static_cast<size_t>(j)] = score;
        }
        // The n highest scores, highest first; ties to the lower key (the reference's order).
        const int64_t n = std::min(k, n_keys);
        order.resize(static_cast<size_t>(n_keys));
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + n, order.end(), [&](int32_t x, int32_t y) {
          const float sx = scores[static_cast<size_t>(x)], sy = scores[static_cast<size_t>(y)];
          return sx > sy || (sx == sy && x < y);
        });
        int32_t* out = a.selected.row(t);
        for (int64_t j = 0; j < k; ++j) out[j] = j < n ? order[static_cast<size_t>(j)] : -1;
        if (!a.ambiguous.empty()) {  // a tie across the cut: the n-th and the best left out score alike
          bool tie = false;
          const float last = n > 0 ? scores[static_cast<size_t>(order[static_cast<size_t>(n - 1)])] : 0.0f;
          for (int64_t j = n; j < n_keys && !tie; ++j)
            tie = scores[static_cast<size_t>(order[static_cast<size_t>(j)])] == last;
          a.ambiguous[static_cast<size_t>(t)] = tie;
        }
      }
    });
  }
}

void block_indexer_topk(const Context& c, const BlockIndexerTopkArgs& a) {
  check_args(a);
  const int64_t k = a.selected.cols / a.n_heads, d = a.head_dim, bs = a.block_size;
  for (const PagedSequence& s : a.seqs) {
    if (s.q_rows == 0) continue;
    D0_CHECK_MSG(s.kv.pos0 == 0, "block_indexer_topk: block-sparse layers keep every position");
    c.pool.parallel_for(s.q_rows, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> key(static_cast<size_t>(s.kv.second_width));  // one dequantised cache row
      std::vector<float> best;                                         // [heads, blocks] of the row
      std::vector<int32_t> order;
      for (int64_t i = begin; i < end; ++i) {
        const int64_t t = s.q_row0 + i, p = s.q_pos0 + i;
        const int64_t n_keys = std::min<int64_t>(s.kv.length, p + 1), n_blocks = p / bs + 1;
        best.assign(static_cast<size_t>(a.n_heads * n_blocks), -INFINITY);
        // Each key row once, scored by every head: a block's score is its best key's.
        for (int64_t j = 0; j < n_keys; ++j) {
          const float* kr;
          if (s.kv.dtype == KvDtype::kF32) {
            kr = static_cast<const float*>(s.kv.second_row(j)) + a.key_col0;
          } else {
            kv_row_to_f32(s.kv.dtype, s.kv.second_row(j), s.kv.second_width, key.data());
            kr = key.data() + a.key_col0;
          }
          for (int64_t h = 0; h < a.n_heads; ++h) {
            float& b = best[static_cast<size_t>(h * n_blocks + j / bs)];
            b = std::max(b, c.k.dot(a.q.row(t) + h * d, kr, d));
          }
        }
        const int64_t n = std::min(k, n_blocks);
        for (int64_t h = 0; h < a.n_heads; ++h) {
          float* score = best.data() + h * n_blocks;
          for (int64_t l = 0; l < a.local_blocks; ++l) score[std::max<int64_t>(0, p / bs - l)] = INFINITY;
          // The n best blocks, best first; ties to the lower block (the reference's order).
          order.resize(static_cast<size_t>(n_blocks));
          std::iota(order.begin(), order.end(), 0);
          std::partial_sort(order.begin(), order.begin() + n, order.end(), [&](int32_t x, int32_t y) {
            return score[x] > score[y] || (score[x] == score[y] && x < y);
          });
          int32_t* out = a.selected.row(t) + h * k;
          for (int64_t j = 0; j < k; ++j) out[j] = j < n ? order[static_cast<size_t>(j)] : -1;
        }
      }
    });
  }
}

}  // namespace day0::cpu
