// Multi-head latent attention (MLA). The cache holds only the normed
// latent c_kv and the roped shared key k_pe; the kernel expands them per head (naive form) or absorbs W_UK /
// W_UV into the query and output (absorbed form). Both read the same paged cache, one call per layer for
// every sequence of the step. A lightning indexer (sparse attention) has its key cached in the same
// rows after k_pe, and MLA attends to the top index_topk keys it selects.
//
// Tensor parallelism splits by heads: each rank holds its heads' rows of q_b (or q) and kv_b and their
// columns of o_proj, and sums its o_proj share over the TP group. The down projections q_a / kv_a, their
// norms and the indexer are replicated, so every rank computes and caches the same whole c_kv and k_pe:
// the latent belongs to the token, not to a head, and splitting it would need a gather every layer.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "day0/runtime/blocks.h"

namespace day0::blocks {
namespace {

// Copies columns [col0, col0 + width) of each of `groups` consecutive groups of `group_width` columns
// into (to_dense) or back from (!to_dense) a dense [rows, groups * width] matrix.
void gather_heads(const Context& c, Matrix wide, int64_t groups, int64_t group_width, int64_t col0,
                  int64_t width, Matrix dense, bool to_dense) {
  if (to_dense) {
    c.be.copy_columns({.x = wide,
                       .y = dense,
                       .groups = groups,
                       .width = width,
                       .x_col0 = col0,
                       .x_stride = group_width,
                       .y_col0 = 0,
                       .y_stride = width});
  } else {
    c.be.copy_columns({.x = dense,
                       .y = wide,
                       .groups = groups,
                       .width = width,
                       .x_col0 = 0,
                       .x_stride = width,
                       .y_col0 = col0,
                       .y_stride = group_width});
  }
}

// The lightning indexer for the step's rows: queries [T, n_I * d_I] and per-head weights
// [T, n_I] (times n_I^-1/2, float32) to score with, and the key [T, d_I] to cache.
struct Indexer {
  Buffer q, weights, key;
};

Indexer index_queries_and_key(const Context& c, const AttentionWeights& w, ConstMatrix h, ConstMatrix cq) {
  const ModelSpec& s = c.spec;
  const IndexerSpec& ix = *s.indexer;
  const int64_t t = h.rows, dr = s.mla->qk_rope_head_dim;
  constexpr float kKeyNormEps = 1e-6f;  // HF builds k_norm as LayerNorm(d_I, eps=1e-6)
  Indexer out{Buffer(c.arena, t, ix.n_heads * ix.head_dim), Buffer(c.arena, t, ix.n_heads),
              Buffer(c.arena, t, ix.head_dim)};
  linear(c, cq, w.index_q, out.q.m);
  // RoPE on the first d_rope dims of every head, in the indexer's own layout (MLA rotates its last).
  rope_rows(c, out.q.m, ix.n_heads, ix.head_dim, dr, ix.rope_layout);
  round_activations(c, out.q.m);
  linear(c, h, w.index_k, out.key.m);
  c.be.layer_norm({out.key.m, w.index_k_norm, w.index_k_norm_bias, kKeyNormEps, out.key.m});
  round_activations(c, out.key.m);
  rope_rows(c, out.key.m, 1, ix.head_dim, dr, ix.rope_layout);
  round_activations(c, out.key.m);
  linear(c, h, w.index_weights, out.weights.m);  // in the activation dtype, then scaled in float32
  c.be.scale({.x = out.weights.m,
              .y = out.weights.m,
              .scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(ix.n_heads)))});
  return out;
}

// The top-index_topk keys of every row over the layer's paged cache (the indexer keys after k_pe), as
// paged_mla_attention's selection. Its width is index_topk, or the longest visible length when shorter.
// Kept in the step's layout (not the layer's arena) for the later layers that share it.
MatrixView<const int32_t> select_keys(const Context& c, const Indexer& ix, int64_t key_col0) {
  const IndexerSpec& spec = *c.spec.indexer;
  const int64_t t = ix.q.m.rows;
  int64_t longest = 1;
  for (const PagedSequence& p : c.layout.paged) longest = std::max(longest, p.q_pos0 + p.q_rows);
  const int64_t k = std::min(spec.topk, longest);
  c.layout.key_selection.assign(static_cast<size_t>(t * k), -1);
  c.layout.key_selection_cols = k;
  int32_t* ids = c.layout.key_selection.data();  // [T, k]
  c.be.indexer_topk({.q = ix.q.m,
                     .weights = ix.weights.m,
                     .seqs = c.layout.paged,
                     .selected = MatrixView<int32_t>(ids, t, k),
                     .n_heads = spec.n_heads,
                     .head_dim = spec.head_dim,
                     .key_col0 = key_col0,
                     .scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(spec.head_dim))),
                     .ambiguous = c.layout.selection_flags()});
  if (c.layout.want_selection_ties) {
    c.be.synchronize();  // the tie flags are read on the host
    c.layout.merge_selection_flags();
  }
  return MatrixView<const int32_t>(ids, t, k);
}

}  // namespace

void mla_attention(const Context& c, int64_t layer, const AttentionWeights& w, ConstMatrix h, Matrix out) {
  const ModelSpec& s = c.spec;
  const MlaSpec& m = *s.mla;
  const int64_t t = h.rows, nh = s.n_heads, dn = m.qk_nope_head_dim, dr = m.qk_rope_head_dim,
                dv = m.v_head_dim;
  const int64_t r = m.kv_lora_rank, dqk = dn + dr;
  constexpr float kLatentEps = 1e-6f;  // HF builds q_a/kv_a layernorms without rms_norm_eps

  Buffer q(c.arena, t, nh * dqk);  // [T, heads * (d_nope + d_rope)]
  Buffer cq;                       // [T, q_lora_rank] the normed q latent (the indexer reads it too)
  if (w.q_a.present()) {
    cq = Buffer(c.arena, t, m.q_lora_rank);
    linear(c, h, w.q_a, cq.m);
    rms_norm(c, cq.m, w.q_a_norm, kLatentEps, cq.m);
    linear(c, cq.m, w.q_b, q.m);
  } else {
    linear(c, h, w.q, q.m);
  }
  if (m.q_scale != 1.0) {  // LoRA rescaling, nope and rope parts alike
    c.be.scale({.x = q.m, .y = q.m, .scale = static_cast<float>(m.q_scale)});
    round_activations(c, q.m);
  }
  Buffer kv(c.arena, t, r + dr);  // [T, kv_lora_rank + d_rope]
  linear(c, h, w.kv_a, kv.m);
  Buffer ckv(c.arena, t, r), kpe(c.arena, t, dr);
  gather_heads(c, kv.m, 1, r + dr, 0, r, ckv.m, true);
  gather_heads(c, kv.m, 1, r + dr, r, dr, kpe.m, true);
  rms_norm(c, ckv.m, w.kv_a_norm, kLatentEps, ckv.m);
  if (m.latent_scale != 1.0) {  // LoRA rescaling: the normed latent (cached so), not k_pe
    c.be.scale({.x = ckv.m, .y = ckv.m, .scale = static_cast<float>(m.latent_scale)});
    round_activations(c, ckv.m);
  }

  double scale = s.attention_scale;
  if (scale <= 0) scale = 1.0 / std::sqrt(static_cast<double>(dqk));
  Buffer qpe(c.arena, t, nh * dr);  // the rope parts of every head, dense for the rope kernel
  gather_heads(c, q.m, nh, dqk, dn, dr, qpe.m, true);
  rope_rows(c, qpe.m, nh, dr, dr);
  round_activations(c, qpe.m);
  gather_heads(c, q.m, nh, dqk, dn, dr, qpe.m, false);
  if (s.attn_temperature_tuning) scale_q_by_temperature(c, q.m);  // every MLA layer, nope and rope parts
  rope_rows(c, kpe.m, 1, dr, dr);
  round_activations(c, kpe.m);
  Indexer indexer;
  // IndexShare: no indexer here; the key slot of its cache rows stays zero, never read.
  const bool shared = s.indexer && s.layers[static_cast<size_t>(layer)].shared_key_selection;
  if (s.indexer) {
    // One cache row: k_pe, then the indexer key (paged by the same block table).
    Buffer second(c.arena, t, dr + s.indexer->head_dim);  // [T, d_rope + index_head_dim]
    gather_heads(c, second.m, 1, dr + s.indexer->head_dim, 0, dr, kpe.m, false);
    if (!shared) {
      D0_CHECK_MSG(cq.data() != nullptr, "mla_attention: the indexer needs the q-LoRA latent");
      indexer = index_queries_and_key(c, w, h, cq.m);
      gather_heads(c, second.m, 1, dr + s.indexer->head_dim, dr, s.indexer->head_dim, indexer.key.m, false);
    }
    append_and_page(c, layer, ckv.m, second.m);
  } else {
    append_and_page(c, layer, ckv.m, kpe.m);
  }

  watch_finite(c, q.m);  // attention's running max would drop a NaN score
  watch_finite(c, ckv.m);
  watch_finite(c, kpe.m);
  Buffer attn(c.arena, t, nh * dv);
  PagedMlaArgs a;
  a.q = q.m;
  a.seqs = c.layout.paged;
  a.w_kv_b = w.kv_b.w;
  a.out = attn.m;
  a.n_heads = nh;
  a.d_nope = dn;
  a.d_rope = dr;
  a.d_v = dv;
  a.kv_lora_rank = r;
  a.scale = static_cast<float>(scale);
  if (s.indexer && !shared) a.selected = select_keys(c, indexer, dr);
  if (shared) {
    D0_CHECK_MSG(c.layout.key_selection_cols > 0 &&
                     static_cast<int64_t>(c.layout.key_selection.size()) == t * c.layout.key_selection_cols,
                 "mla_attention: a layer sharing the sparse key selection runs before any indexer layer");
    a.selected = MatrixView<const int32_t>(c.layout.key_selection.data(), t, c.layout.key_selection_cols);
  }
  if (s.indexer) a.reach = key_reach(s, s.layers[static_cast<size_t>(layer)]);  // index_topk, for costs
  bool multi_token = false;
  for (const PagedSequence& p : c.layout.paged) multi_token = multi_token || p.q_rows > 1;
  switch (c.options.mla) {
    case MlaMode::kNaive:
      a.form = MlaForm::kNaive;
      break;
    case MlaMode::kAbsorbed:
      a.form = MlaForm::kAbsorbed;
      break;
    case MlaMode::kAuto:
      // The expanded form is cheaper for multi-token steps (its kv_b expansion is one GEMM).
      a.form = multi_token ? MlaForm::kNaive : MlaForm::kAbsorbed;
      break;
  }
  c.be.paged_mla_attention(a);
  round_activations(c, attn.m);
  matmul(c, attn.m, w.o, out);  // [T, hidden]: this rank's heads' share under tensor parallelism
  finish_row_parallel(c, out);
}

}  // namespace day0::blocks
