// Shared key = value attention with low-rank queries (ModelSpec::shared_kv_low_rank) on its three layer
// kinds: sliding window only, compressed sparse and heavily compressed (LayerSpec::kv_compress_ratio m,
// compressed_sparse; CompressedKvSpec).
//  - Queries: q_a, its RMSNorm, q_b, a weightless RMSNorm per head, RoPE on each head's last rotary dims
//    (interleaved pairs, rotary_col0) at the row's position.
//  - The one key = value head: kv, its RMSNorm, the same RoPE; appended to the layer's paged cache, which
//    keeps the sliding window of raw rows (the pool's second tensor is empty: the key is the value).
//  - Compressed layers: every complete window of m tokens pools into one entry (kv_compress over the
//    compressor's kv / gate projections, overlapping windows of 2m on sparse layers), RMS-normed and
//    RoPE'd at the window's first position. The entries go to the layer's entry tables in the sequence's
//    KvCache (pool blocks), what a partial window needs (its rows' projections, the last window's first
//    halves) to its KvCache::compressed() part of the state block; a step that saves a snapshot there
//    (KvCache::plan_snapshot) pools its rows in two parts around it. Heavily
//    compressed layers attend to every entry a row can see (j < (p + 1) / m); compressed sparse layers to
//    the index_topk entries their lightning indexer picks (its own compressor at index_head_dim, queries
//    from the q latent, indexer_topk with key_ratio m).
//  - RoPE: sliding layers rotate queries and key with the model's frequencies, compressed layers with the
//    compressed ones (CompressedKvSpec::rope, YaRN); entries and the indexer always with the compressed.
//  - Each row attends to its window's raw rows then its entries in one softmax with the head's sink; the
//    output's rotary dims are rotated back at the row's position; then the grouped output projection o_a
//    (grouped_matmul) and o_b.
//
// Tensor parallelism splits by heads with their output groups (Context::spec is the rank's part): each rank
// holds its heads' rows of q_b and sinks, its groups' rows of o_a and their columns of o_b, and sums its
// o_b share over the TP group. The one key = value head, the compressors and the indexer belong to the
// token, not to a head: they are replicated, so every rank caches the same window rows and compressed
// entries and its indexer picks the same entries.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "day0/runtime/blocks.h"

namespace day0::blocks {
namespace {

// RoPE on the last `rotary` dims of each of the `heads` heads of x [T, heads * width], in place.
void rope_trailing(const Context& c, Matrix x, std::span<const int64_t> positions, int64_t heads,
                   int64_t width, int64_t rotary, const RopeFrequencies& f) {
  c.be.rope({.x = x,
             .positions = positions,
             .n_heads = heads,
             .head_dim = width,
             .rotary_dim = rotary,
             .layout = RopeLayout::kInterleaved,
             .inv_freq = f.inv_freq,
             .attention_factor = f.attention_factor,
             .rotary_col0 = width - rotary});
}

// One compressor over one sequence's new rows.
struct CompressorCall {
  const CompressorWeights& w;
  int64_t ratio = 0;
  int64_t width = 0;     // an entry's width (the projections are twice it where windows overlap)
  bool overlap = false;  // compressed sparse layers' windows of 2m
  int64_t rotary = 0;
  const RopeFrequencies& rope;
  KvDtype dtype = KvDtype::kF32;  // the entries' storage
};

// Pools the held partial group of `st` (after `tokens` tokens) and the sequence's new projections kv /
// gate [n, C] (values on the host) into every window they complete: the entries (normed, RoPE'd at their
// windows' first positions) appended to table `which` of the layer in `cache`, in its dtype; the rows past
// the last window kept as the new tail and, with overlapping windows, the last window's first halves kept
// for the next.
void compress_rows(const Context& c, const CompressorCall& call, ConstMatrix kv, ConstMatrix gate,
                   const CompressorState& st, int64_t tokens, KvCache& cache, int64_t layer,
                   CompressedEntries which) {
  const int64_t m = call.ratio, cw = kv.cols, d = call.width;
  const int64_t held = tokens % m, n_entries = tokens / m;
  const int64_t total = held + kv.rows, windows = total / m, usable = windows * m;
  const StepArena::Mark mark = c.arena.mark();
  Buffer rows_kv(c.arena, total, cw), rows_gate(c.arena, total, cw);  // [tail + n, C] held rows first
  std::copy(st.tail_kv, st.tail_kv + held * cw, rows_kv.data());
  std::copy(st.tail_gate, st.tail_gate + held * cw, rows_gate.data());
  for (int64_t r = 0; r < kv.rows; ++r) {
    std::copy(kv.row(r), kv.row(r) + cw, rows_kv.m.row(held + r));
    std::copy(gate.row(r), gate.row(r) + cw, rows_gate.m.row(held + r));
  }
  if (windows > 0) {
    const bool prior = call.overlap && n_entries > 0;
    Buffer pooled(c.arena, windows, d);  // [W, width]
    c.be.kv_compress({.kv = rows_kv.m.row_slice(0, usable),
                      .gate = rows_gate.m.row_slice(0, usable),
                      .position_bias = ConstMatrix(call.w.position_bias.data(), m, cw),
                      .prior_kv = prior ? ConstMatrix(st.prior_kv, m, d) : ConstMatrix{},
                      .prior_gate = prior ? ConstMatrix(st.prior_gate, m, d) : ConstMatrix{},
                      .ratio = m,
                      .overlap = call.overlap,
                      .out = pooled.m,
                      .bf16_steps = c.bf16()});
    round_activations(c, pooled.m);
    rms_norm(c, pooled.m, call.w.norm, static_cast<float>(c.spec.rms_norm_eps), pooled.m);
    std::vector<int64_t> positions(static_cast<size_t>(windows));  // each window's first position
    for (int64_t i = 0; i < windows; ++i) positions[static_cast<size_t>(i)] = (n_entries + i) * m;
    rope_trailing(c, pooled.m, positions, 1, d, call.rotary, call.rope);
    round_activations(c, pooled.m);
    c.be.synchronize();  // the entries and the rows are read on the host
    for (int64_t i = 0; i < windows; ++i)
      kv_row_from_f32(call.dtype, pooled.m.row(i), d, cache.append_entry(layer, which));
    if (call.overlap) {  // the last window's first halves, its gate with the bias, for the next window
      // The bias is added by kernels: the host reads only the step's buffers, never a weight (a
      // shape-only binding, as the operator list records, has no readable bytes).
      Buffer gate_first(c.arena, m, d), bias_first(c.arena, m, d);  // [m, d]
      c.be.copy_columns({.x = rows_gate.m.row_slice(usable - m, m),
                         .y = gate_first.m,
                         .groups = 1,
                         .width = d,
                         .x_stride = d,
                         .y_stride = d});
      c.be.copy_columns({.x = ConstMatrix(call.w.position_bias.data(), m, cw),
                         .y = bias_first.m,
                         .groups = 1,
                         .width = d,
                         .x_stride = d,
                         .y_stride = d});
      c.be.add({gate_first.m, bias_first.m, gate_first.m});
      c.be.synchronize();
      for (int64_t i = 0; i < m; ++i) {
        const float* k = rows_kv.m.row(usable - m + i);
        std::copy(k, k + d, st.prior_kv + i * d);
      }
      std::copy(gate_first.data(), gate_first.data() + m * d, st.prior_gate);
    }
  }
  std::copy(rows_kv.data() + usable * cw, rows_kv.data() + total * cw, st.tail_kv);
  std::copy(rows_gate.data() + usable * cw, rows_gate.data() + total * cw, st.tail_gate);
  c.arena.release(mark);
}

}  // namespace

void shared_kv_attention(const Context& c, int64_t layer, const AttentionWeights& w, ConstMatrix h,
                         Matrix out) {
  const ModelSpec& s = c.spec;
  const LayerSpec& ls = s.layers[static_cast<size_t>(layer)];
  const SharedKvLowRankAttentionSpec& a = *s.shared_kv_low_rank;
  const int64_t t = h.rows, nh = s.n_heads, d = s.head_dim, m = ls.kv_compress_ratio;
  const bool compressed = m > 0, sparse = compressed && ls.compressed_sparse;
  const float eps = static_cast<float>(s.rms_norm_eps);
  const int64_t rotary = rotary_dims(d, s.partial_rotary_factor);
  D0_CHECK_MSG(!compressed || s.compressed_kv.has_value(),
               "shared_kv_attention: a compressed layer without its sizes");
  // The compressed layers' frequencies (a few floats: built here rather than kept by the engine).
  std::optional<RopeFrequencies> compressed_rope;
  if (s.compressed_kv) {
    const LayerRope& r = s.compressed_kv->rope;
    Result<RopeFrequencies> f = rope_frequencies(r.theta, rotary_dims(d, r.partial_rotary_factor), r.scaling,
                                                 s.max_position_embeddings, s.max_position_embeddings);
    D0_CHECK_MSG(f.is_ok(), f.status().to_string());
    compressed_rope = std::move(*f);
  }
  const RopeFrequencies& rope = compressed ? *compressed_rope : c.rope;
  const std::span<const int64_t> positions = c.layout.positions;

  // Queries from the low-rank latent: [T, q_lora_rank] -> [T, heads * head_dim].
  Buffer latent(c.arena, t, a.q_lora_rank);
  linear(c, h, w.q_a, latent.m);
  rms_norm(c, latent.m, w.q_a_norm, eps, latent.m);
  Buffer q(c.arena, t, nh * d);
  linear(c, latent.m, w.q_b, q.m);
  const Matrix q_heads(q.data(), t * nh, d);  // [T * heads, head_dim] the weightless norm per head
  rms_norm(c, q_heads, {}, eps, q_heads);
  rope_trailing(c, q.m, positions, nh, d, rotary, rope);
  round_activations(c, q.m);
  // The key = value row [T, head_dim], into the paged window.
  Buffer kv(c.arena, t, d);
  linear(c, h, w.kv, kv.m);
  rms_norm(c, kv.m, w.kv_norm, eps, kv.m);
  rope_trailing(c, kv.m, positions, 1, d, rotary, rope);
  round_activations(c, kv.m);
  watch_finite(c, q.m);  // attention's running max would drop a NaN score
  watch_finite(c, kv.m);
  append_and_page(c, layer, kv.m, ConstMatrix(kv.data(), t, 0));

  // Compressed entries: the step's projections, then each sequence's windows on the host.
  const int64_t cw = sparse ? 2 * d : d;  // [series a | series b] where windows overlap
  Buffer comp_kv, comp_gate;              // [T, C]
  Buffer index_q, index_w, index_kv, index_gate;
  const int64_t n_i = sparse ? s.compressed_kv->index_n_heads : 0,
                d_i = sparse ? s.compressed_kv->index_head_dim : 0;
  if (compressed) {
    comp_kv = Buffer(c.arena, t, cw);
    comp_gate = Buffer(c.arena, t, cw);
    linear(c, h, w.compressor.kv, comp_kv.m);
    linear(c, h, w.compressor.gate, comp_gate.m);
  }
  if (sparse) {
    index_kv = Buffer(c.arena, t, 2 * d_i);  // [T, 2 d_I]
    index_gate = Buffer(c.arena, t, 2 * d_i);
    linear(c, h, w.index_compressor.kv, index_kv.m);
    linear(c, h, w.index_compressor.gate, index_gate.m);
    index_q = Buffer(c.arena, t, n_i * d_i);  // [T, n_I * d_I] from the q latent
    linear(c, latent.m, w.index_q, index_q.m);
    rope_trailing(c, index_q.m, positions, n_i, d_i, rotary, *compressed_rope);
    round_activations(c, index_q.m);
    index_w = Buffer(c.arena, t, n_i);  // [T, n_I] the heads' weights, times n_I^-1/2 in float32
    linear(c, h, w.index_weights, index_w.m);
    c.be.scale({.x = index_w.m, .y = index_w.m, .scale = 1.0f / std::sqrt(static_cast<float>(n_i))});
  }
  StepLayout& l = c.layout;
  const auto n_seq = l.caches.size();
  if (compressed) {
    c.be.synchronize();  // the projections are read on the host
    for (size_t sq = 0; sq < n_seq; ++sq) {
      KvCache& cache = *l.caches[sq];
      const CompressedKvLayerState st = cache.compressed(layer);
      D0_CHECK_MSG(st.tokens != nullptr,
                   fmt::format("shared_kv_attention: layer {} has no compressed KV state", layer));
      D0_CHECK_MSG(*st.tokens == l.pos0[sq],
                   *st.tokens < 0
                       ? fmt::format("shared_kv_attention: layer {}'s compressed KV state was lost by "
                                     "a failed step; the sequence must restart",
                                     layer)
                       : fmt::format("shared_kv_attention: layer {}'s compressed KV state holds {} "
                                     "tokens, the sequence {}",
                                     layer, *st.tokens, l.pos0[sq]));
      const KvDtype dtype = cache.pool().options().dtype;
      const int64_t r0 = l.row0[sq], rn = l.rows[sq];
      const auto absorb = [&](int64_t from, int64_t n) {
        compress_rows(c, {w.compressor, m, d, sparse, rotary, *compressed_rope, dtype},
                      comp_kv.m.row_slice(r0 + from, n), comp_gate.m.row_slice(r0 + from, n), st.compressor,
                      *st.tokens, cache, layer, CompressedEntries::kCompressor);
        if (sparse) {
          compress_rows(c, {w.index_compressor, m, d_i, true, rotary, *compressed_rope, dtype},
                        index_kv.m.row_slice(r0 + from, n), index_gate.m.row_slice(r0 + from, n), st.indexer,
                        *st.tokens, cache, layer, CompressedEntries::kIndexer);
        }
        *st.tokens += n;
      };
      // A snapshot planned inside the step holds the partial groups after its first `at` rows.
      const int64_t at = sq < l.snapshot_at.size() ? l.snapshot_at[sq] : 0;
      if (at > 0) {
        absorb(0, at);
        cache.snapshot_compressed(layer);
        if (at < rn) absorb(at, rn - at);
      } else {
        absorb(0, rn);
      }
    }
  }
  // Compressed sparse layers: each row's index_topk entries (-1: fewer visible).
  MatrixView<int32_t> picked;
  if (sparse) {
    const int64_t k = s.compressed_kv->index_topk;
    picked =
        MatrixView<int32_t>(reinterpret_cast<int32_t*>(c.arena.take(t * k)), t, k);  // [T, k] 4-byte slots
    std::vector<PagedSequence> seqs(n_seq);
    for (size_t sq = 0; sq < n_seq; ++sq) {
      seqs[sq] = PagedSequence{l.row0[sq], l.rows[sq], l.pos0[sq],
                               l.caches[sq]->entry_pages(layer, CompressedEntries::kIndexer)};
    }
    c.be.indexer_topk({.q = index_q.m,
                       .weights = index_w.m,
                       .seqs = seqs,
                       .selected = picked,
                       .n_heads = n_i,
                       .head_dim = d_i,
                       .key_col0 = 0,
                       .scale = 1.0f / std::sqrt(static_cast<float>(d_i)),
                       .key_ratio = m,
                       .ambiguous = l.selection_flags()});
    c.be.synchronize();  // the picks (and the tie flags) are read on the host
    l.merge_selection_flags();
  }

  // Each row over its window's raw rows, then its entries: one attention call of one query row.
  Buffer attn(c.arena, t, nh * d);  // [T, heads * head_dim]
  const int64_t window = ls.window, most_entries = sparse ? s.compressed_kv->index_topk : 0;
  const KeyReach reach = key_reach(s, ls);  // what the rows gather below, for a recorder's costs
  for (size_t sq = 0; sq < n_seq; ++sq) {
    // Views taken again: the entries' blocks may have grown the pool since append_and_page.
    const KvPages pages = l.caches[sq]->pages(layer);
    const KvDtype dtype = pages.dtype;
    const KvPages entries = l.caches[sq]->entry_pages(layer, CompressedEntries::kCompressor);
    const int64_t visible_max = sparse ? most_entries : entries.length;
    const StepArena::Mark mark = c.arena.mark();
    Buffer keys(c.arena, window + visible_max, d);  // [keys of one row, head_dim]: both key and value
    for (int64_t r = 0; r < l.rows[sq]; ++r) {
      const int64_t row = l.row0[sq] + r, p = l.pos0[sq] + r;
      const int64_t first = std::max<int64_t>(0, p - window + 1);
      D0_CHECK_MSG(first >= pages.pos0 && p < pages.pos0 + pages.length,
                   "shared_kv_attention: the window's rows are not in the cache");
      c.be.synchronize();  // the previous row's call has read `keys`
      int64_t n = 0;
      for (int64_t pos = first; pos <= p; ++pos)
        kv_row_to_f32(dtype, pages.first_row(pos - pages.pos0), d, keys.m.row(n++));
      if (sparse) {
        for (int64_t i = 0; i < picked.cols; ++i) {
          const int32_t j = picked.row(row)[i];  // -1: fewer visible entries than index_topk
          if (j >= 0 && j < entries.length) kv_row_to_f32(dtype, entries.second_row(j), d, keys.m.row(n++));
        }
      } else if (compressed) {
        const int64_t visible = std::min(entries.length, (p + 1) / m);
        for (int64_t j = 0; j < visible; ++j) kv_row_to_f32(dtype, entries.second_row(j), d, keys.m.row(n++));
      }
      const ConstMatrix k = keys.m.row_slice(0, n);
      // Every key listed is visible: the row sits at the last position of a causal call.
      c.be.attention({.q = q.m.row_slice(row, 1),
                      .k = k,
                      .v = k,
                      .out = attn.m.row_slice(row, 1),
                      .n_heads = nh,
                      .n_kv_heads = 1,
                      .head_dim = d,
                      .v_head_dim = d,
                      .q_pos0 = n - 1,
                      .k_pos0 = 0,
                      .scale = static_cast<float>(s.attention_scale),
                      .mask = AttentionMask::kCausal,
                      .sinks = w.sinks,
                      .reach = reach});
    }
    c.be.synchronize();
    c.arena.release(mark);
  }
  round_activations(c, attn.m);
  // The values carried their keys' rotation: rotated back at the row's own position.
  std::vector<int64_t> back(positions.begin(), positions.end());
  for (int64_t& p : back) p = -p;
  rope_trailing(c, attn.m, back, nh, d, rotary, rope);
  round_activations(c, attn.m);
  Buffer grouped(c.arena, t, a.out_groups * a.out_rank);  // [T, groups * o_rank]
  c.be.grouped_matmul({.x = attn.m,
                       .w = w.o_a.w,
                       .y = grouped.m,
                       .groups = a.out_groups,
                       .exact = c.exact(),
                       .row_invariant = c.row_invariant});
  round_activations(c, grouped.m);
  matmul(c, grouped.m, w.o_b, out);  // [T, hidden]
  finish_row_parallel(c, out);
}

}  // namespace day0::blocks
