// GQA attention block: projections, q/k RMSNorm per head or over all heads at once
// (under TP a sum of squares over the group), (partial) RoPE or NoPE, the weightless
// post-RoPE q/k norm and NoPE temperature tuning, cache append, then one masked paged attention call
// (causal / sliding / chunked, sinks) for every sequence of the step, output projection. Block-sparse
// layers first pick each query's key blocks with their indexer (its key cached after V, paged with it).
// Per layer: its own query / KV heads and head width (the pool's rows sized for the widest), sliding layers'
// own RoPE; values narrower than keys and scaled, values equal to the keys (before their norm and RoPE) and
// normed without a gain; KV shared across layers (a layer attending to an earlier layer's cache, computing
// queries only); an output gate from q_proj or from a projection of its own (sigmoid / softplus, per element
// or per head).
#include <algorithm>
#include <cmath>

#include "day0/dist/communicator.h"
#include "day0/runtime/blocks.h"

namespace day0::blocks {
namespace {

// RMSNorm of rows whose columns are split over the TP group (the q / k norm over all heads,
// x [T, this rank's heads * head_dim]): each rank's sum of squares, summed over the group ([T] floats),
// then this rank's columns scaled and weighted as rms_norm() does. KV heads copied over ranks count
// once a copy: over tp ranks of `x.cols` columns either way.
void split_rms_norm(const Context& c, Matrix x, std::span<const float> weight, float eps) {
  const int64_t t = x.rows;
  const int ranks = c.tp->size();
  Buffer sq(c.arena, t, x.cols);  // [T, local width] x^2
  c.be.mul({x, x, sq.m});
  Buffer factor(c.arena, t, 1);  // [T, 1] the mean of this rank's squares, then the row's 1 / RMS
  c.be.row_mean({.x = sq.m, .y = factor.m});
  c.be.synchronize();
  std::span<float> sums(factor.data(), static_cast<size_t>(t));
  for (float& f : sums) f *= static_cast<float>(x.cols);
  dist::check_comm(c.tp->all_reduce_sum(sums));
  for (float& f : sums) f = 1.0f / std::sqrt(f / static_cast<float>(ranks * x.cols) + eps);
  c.be.mul({x, factor.m, x});
  // As rms_norm(): BF16 norms without norm_gain_f32 round the normed row before the weight.
  if (c.bf16() && !c.spec.norm_gain_f32) round_activations(c, x);
  c.be.mul({x, ConstMatrix(weight.data(), 1, static_cast<int64_t>(weight.size())), x});
  round_activations(c, x);
}

// The rows [T, heads * width] of k or v as the KV pool stores them: `x` itself, or a copy padded with
// zeros to the pool's row when this layer has fewer KV heads than the widest layer.
ConstMatrix kv_pool_rows(const Context& c, ConstMatrix x, int64_t pool_width) {
  if (x.cols == pool_width) return x;
  Buffer padded(c.arena, x.rows, pool_width);  // [T, pool width], zeros past x's columns
  c.be.copy_columns(
      {.x = x, .y = padded.m, .groups = 1, .width = x.cols, .x_stride = x.cols, .y_stride = x.cols});
  return padded.m;
}

// Block-sparse attention's indexer for the step's rows: its queries [T, n_I * d_I] and the token's
// index key [T, d_I], each through its per-head RMSNorm and the layer's RoPE (the first `rotary` dims),
// rounded like the activations.
struct BlockIndex {
  Buffer q, key;
};

BlockIndex block_index_queries_and_key(const Context& c, const AttentionWeights& w, ConstMatrix h,
                                       int64_t rotary) {
  const BlockIndexerSpec& ix = *c.spec.block_indexer;
  const int64_t t = h.rows, n = ix.n_heads, di = ix.head_dim;
  const auto eps = static_cast<float>(c.spec.rms_norm_eps);
  BlockIndex out{Buffer(c.arena, t, n * di), Buffer(c.arena, t, di)};
  linear(c, h, w.index_q, out.q.m);
  rms_norm(c, ConstMatrix(out.q.data(), t * n, di), w.index_q_norm, eps, Matrix(out.q.data(), t * n, di));
  linear(c, h, w.index_k, out.key.m);
  rms_norm(c, out.key.m, w.index_k_norm, eps, out.key.m);
  rope_rows(c, out.q.m, n, di, rotary);
  rope_rows(c, out.key.m, 1, di, rotary);
  round_activations(c, out.q.m);
  round_activations(c, out.key.m);
  return out;
}

// The second tensor's rows of a model with block-sparse layers: v in the first columns (zeros up to
// `v_width`, the pool's V part), then the index key, or zeros on a layer without the indexer.
ConstMatrix with_index_key(const Context& c, ConstMatrix v, int64_t v_width, const BlockIndex& index) {
  const int64_t di = c.spec.block_indexer->head_dim;
  Buffer rows(c.arena, v.rows, v_width + di);  // [T, V part + d_I]
  c.be.copy_columns(
      {.x = v, .y = rows.m, .groups = 1, .width = v.cols, .x_stride = v.cols, .y_stride = v.cols});
  if (index.key.data() != nullptr) {
    c.be.copy_columns({.x = index.key.m,
                       .y = rows.m,
                       .groups = 1,
                       .width = di,
                       .x_stride = di,
                       .y_col0 = v_width,
                       .y_stride = di});
  }
  return rows.m;
}

// Paged attention one query row at a time, each over the keys up to its own position, as the one-token
// step that fed that row would run it: the backend's work split (key splits, tiles of query rows, the
// spans of its online softmax) depends on the rows and keys of a call, and with it the rounding.
void paged_attention_by_row(const Context& c, const PagedAttentionArgs& all) {
  for (const PagedSequence& s : all.seqs) {
    for (int64_t r = 0; r < s.q_rows; ++r) {
      PagedSequence one = s;
      one.q_row0 = s.q_row0 + r;
      one.q_rows = 1;
      one.q_pos0 = s.q_pos0 + r;
      // The cache as it stood after that row's token was appended.
      one.kv.length = std::clamp<int64_t>(one.q_pos0 + 1 - s.kv.pos0, 0, s.kv.length);
      PagedAttentionArgs a = all;
      a.seqs = std::span<const PagedSequence>(&one, 1);
      c.be.paged_attention(a);
    }
  }
}

// The top blocks of every row and index head over the layer's paged cache (index keys after the V
// part, `key_col0`), as this rank's `n_heads` query heads read them: all index heads in one process,
// under tensor parallelism the columns of the index heads its query heads belong to.
BlockSelection select_blocks(const Context& c, const BlockIndex& index, int64_t key_col0, int64_t n_heads) {
  const BlockIndexerSpec& ix = *c.spec.block_indexer;
  const int64_t t = index.q.m.rows, bs = ix.block_size;
  int64_t longest = 1;
  for (const PagedSequence& p : c.layout.paged) longest = std::max(longest, p.q_pos0 + p.q_rows);
  // Width: top-k, or every block the longest sequence has when fewer (never under the local blocks).
  const int64_t k = std::min(ix.topk_blocks, std::max((longest + bs - 1) / bs, ix.local_blocks));
  auto* ids = reinterpret_cast<int32_t*>(c.arena.take(t * ix.n_heads * k));  // [T, n_I * k] (4-byte slots)
  c.be.block_indexer_topk({.q = index.q.m,
                           .seqs = c.layout.paged,
                           .selected = MatrixView<int32_t>(ids, t, ix.n_heads * k),
                           .n_heads = ix.n_heads,
                           .head_dim = ix.head_dim,
                           .key_col0 = key_col0,
                           .block_size = bs,
                           .local_blocks = ix.local_blocks});
  const MatrixView<const int32_t> all(ids, t, ix.n_heads * k);
  const int ranks = c.tp != nullptr ? c.tp->size() : 1;
  if (ranks == 1) return {all, bs, ix.n_heads};
  // Global query head h reads index head h / (heads / n_I); this rank holds heads [rank * n_heads, ...).
  const int64_t per_index_head = n_heads * ranks / ix.n_heads;
  const int64_t first = c.tp->rank() * n_heads / per_index_head;
  const int64_t groups = std::max<int64_t>(1, n_heads / per_index_head);
  return {all.col_slice(first * k, groups * k), bs, groups};
}

}  // namespace

void gqa_attention(const Context& c, int64_t layer, const AttentionWeights& w, ConstMatrix h, Matrix out) {
  const ModelSpec& s = c.spec;
  const LayerSpec& ls = s.layers[static_cast<size_t>(layer)];
  const int64_t t = h.rows, nh = layer_heads(s, ls), nkv = layer_kv_heads(s, ls), d = layer_head_dim(s, ls);
  const int64_t dv = layer_value_head_dim(s, ls);
  const bool own_kv = ls.kv_source < 0;  // else the layer attends to an earlier layer's cached K / V
  // [T, heads * head_dim]; v [T, KV heads * value head dim]
  Buffer q(c.arena, t, nh * d), k(c.arena, t, nkv * d), v(c.arena, t, nkv * dv);
  Buffer gate;  // [T, heads * head_dim] the output gate (attention_output_gate), before its sigmoid
  if (s.attention_output_gate) {
    // q_proj gives per head [query (d) | gate (d)]: split into two dense matrices.
    Buffer qg(c.arena, t, 2 * nh * d);  // [T, heads * 2 * head_dim]
    gate = Buffer(c.arena, t, nh * d);
    linear(c, h, w.q, qg.m);
    c.be.copy_columns({.x = qg.m, .y = q.m, .groups = nh, .width = d, .x_stride = 2 * d, .y_stride = d});
    c.be.copy_columns(
        {.x = qg.m, .y = gate.m, .groups = nh, .width = d, .x_col0 = d, .x_stride = 2 * d, .y_stride = d});
  } else {
    linear(c, h, w.q, q.m);
  }
  if (own_kv) linear(c, h, w.k, k.m);
  if (own_kv && ls.values_from_keys) {  // the key projection's output, before its norm and RoPE
    c.be.copy_columns(
        {.x = k.m, .y = v.m, .groups = 1, .width = k.m.cols, .x_stride = k.m.cols, .y_stride = v.m.cols});
  } else if (own_kv) {
    linear(c, h, w.v, v.m);
  }
  if (own_kv && s.value_norm) {  // a weightless RMSNorm per value head
    const Matrix heads(v.data(), t * nkv, dv);
    rms_norm(c, heads, {}, static_cast<float>(s.rms_norm_eps), heads);
  }
  if (own_kv && s.value_scale != 1.0) {  // attention_value_scale, rounded like the product it is
    c.be.scale({.x = v.m, .y = v.m, .scale = static_cast<float>(s.value_scale)});
    round_activations(c, v.m);
  }
  // The output gate's own projection (output_gate): [T, heads] or [T, heads * value head dim].
  Buffer own_gate;
  if (s.output_gate != OutputGate::kNone) {
    own_gate = Buffer(c.arena, t, s.output_gate_per_head ? nh : nh * dv);
    linear(c, h, w.gate, own_gate.m);
  }
  const float eps = static_cast<float>(s.rms_norm_eps);
  if (!w.q_norm.empty() && s.qk_norm_full_width && c.tp != nullptr && c.tp->size() > 1) {
    split_rms_norm(c, q.m, w.q_norm, eps);  // this rank's heads of one RMS over all heads
    split_rms_norm(c, k.m, w.k_norm, eps);
  } else if (!w.q_norm.empty() && s.qk_norm_full_width) {  // one RMS over all heads: [T, heads * head_dim]
    rms_norm(c, q.m, w.q_norm, eps, q.m);
    rms_norm(c, k.m, w.k_norm, eps, k.m);
  } else if (!w.q_norm.empty()) {  // per-head RMSNorm before RoPE: rows [T * heads, head_dim]
    rms_norm(c, ConstMatrix(q.data(), t * nh, d), w.q_norm, eps, Matrix(q.data(), t * nh, d));
    if (own_kv) rms_norm(c, ConstMatrix(k.data(), t * nkv, d), w.k_norm, eps, Matrix(k.data(), t * nkv, d));
  }
  // Sliding layers rotate with their own frequencies when the model gives them some (sliding_rope).
  const bool own_rope = ls.mask == AttentionMask::kSliding && s.sliding_rope && c.sliding_rope != nullptr;
  const int64_t rotary =
      rotary_dims(d, own_rope ? s.sliding_rope->partial_rotary_factor : s.partial_rotary_factor);
  if (ls.use_rope) {
    const RopeFrequencies* freqs = own_rope ? c.sliding_rope : nullptr;
    rope_rows(c, q.m, nh, d, rotary, std::nullopt, freqs);
    if (own_kv) rope_rows(c, k.m, nkv, d, rotary, std::nullopt, freqs);
    round_activations(c, q.m);
    round_activations(c, k.m);
    if (s.qk_norm_weightless_after_rope) {  // weightless L2 norm on RoPE layers
      rms_norm(c, ConstMatrix(q.data(), t * nh, d), {}, eps, Matrix(q.data(), t * nh, d));
      rms_norm(c, ConstMatrix(k.data(), t * nkv, d), {}, eps, Matrix(k.data(), t * nkv, d));
    }
  } else if (s.attn_temperature_tuning) {
    scale_q_by_temperature(c, q.m);  // NoPE layers only
  }
  watch_finite(c, q.m);  // attention's running max would drop a NaN score
  watch_finite(c, k.m);
  // The pool's rows hold the widest layer's keys and values; a layer with fewer KV heads or narrower heads
  // fills their first columns.
  const int64_t pool_k = max_key_width(s), pool_v = max_value_width(s);
  BlockIndex index;  // block-sparse attention's index queries and key
  if (ls.block_sparse) index = block_index_queries_and_key(c, w, h, rotary);
  if (!own_kv) {
    page_layer(c, ls.kv_source);  // the source layer appended this step's rows already
  } else if (s.block_indexer) {   // V, then the token's index key (zeros on layers without the indexer)
    append_and_page(c, layer, kv_pool_rows(c, k.m, pool_k), with_index_key(c, v.m, pool_v, index));
  } else {
    append_and_page(c, layer, kv_pool_rows(c, k.m, pool_k), kv_pool_rows(c, v.m, pool_v));
  }
  Buffer attn(c.arena, t, nh * dv);
  PagedAttentionArgs a;
  a.q = q.m;
  a.seqs = c.layout.paged;
  a.out = attn.m;
  a.n_heads = nh;
  a.n_kv_heads = nkv;
  a.head_dim = d;
  a.v_head_dim = dv;
  a.scale = static_cast<float>(s.attention_scale);
  a.mask = ls.mask;
  a.window = ls.window;
  a.sinks = w.sinks;
  if (ls.block_sparse) {
    a.selection = select_blocks(c, index, pool_v, nh);
    a.reach = key_reach(s, ls);  // index_topk_blocks, for costs
  }
  if (c.row_invariant && a.selection.empty()) {
    paged_attention_by_row(c, a);
  } else {
    c.be.paged_attention(a);
  }
  round_activations(c, attn.m);
  if (s.attention_output_gate) {  // attn * sigmoid(gate), head-major like the heads' outputs
    c.be.sigmoid({gate.m, gate.m});
    round_activations(c, gate.m);
    c.be.mul({attn.m, gate.m, attn.m});
    round_activations(c, attn.m);
  }
  if (s.output_gate != OutputGate::kNone) {  // attn * act(x W_g), per element or broadcast over a head
    if (s.output_gate == OutputGate::kSigmoid) {
      c.be.sigmoid({own_gate.m, own_gate.m});
    } else {
      c.be.softplus({own_gate.m, own_gate.m});
    }
    round_activations(c, own_gate.m);
    if (s.output_gate_per_head) {  // rows [T * heads, value head dim] times [T * heads, 1]
      const Matrix per_head(attn.data(), t * nh, dv);
      c.be.mul({per_head, ConstMatrix(own_gate.data(), t * nh, 1), per_head});
    } else {
      c.be.mul({attn.m, own_gate.m, attn.m});
    }
    round_activations(c, attn.m);
  }
  matmul(c, attn.m, w.o, out);  // [T, hidden]: this rank's heads' share under tensor parallelism
  finish_row_parallel(c, out);
}

}  // namespace day0::blocks
