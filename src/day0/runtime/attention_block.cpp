// GQA attention block: projections, q/k RMSNorm per head or over all heads at once
// (under TP a sum of squares over the group), (partial) RoPE or NoPE, the weightless
// post-RoPE q/k norm and NoPE temperature tuning, cache append, then one masked paged attention call
// (causal / sliding / chunked, sinks) for every sequence of the step, output projection.
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

}  // namespace

void gqa_attention(const Context& c, int64_t layer, const AttentionWeights& w, ConstMatrix h, Matrix out) {
  const ModelSpec& s = c.spec;
  const LayerSpec& ls = s.layers[static_cast<size_t>(layer)];
  const int64_t t = h.rows, nh = s.n_heads, nkv = s.n_kv_heads, d = s.head_dim;
  Buffer q(c.arena, t, nh * d), k(c.arena, t, nkv * d), v(c.arena, t, nkv * d);  // [T, heads * head_dim]
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
  linear(c, h, w.k, k.m);
  linear(c, h, w.v, v.m);
  const float eps = static_cast<float>(s.rms_norm_eps);
  if (!w.q_norm.empty() && s.qk_norm_full_width && c.tp != nullptr && c.tp->size() > 1) {
    split_rms_norm(c, q.m, w.q_norm, eps);  // this rank's heads of one RMS over all heads
    split_rms_norm(c, k.m, w.k_norm, eps);
  } else if (!w.q_norm.empty() && s.qk_norm_full_width) {  // one RMS over all heads: [T, heads * head_dim]
    rms_norm(c, q.m, w.q_norm, eps, q.m);
    rms_norm(c, k.m, w.k_norm, eps, k.m);
  } else if (!w.q_norm.empty()) {  // per-head RMSNorm before RoPE: rows [T * heads, head_dim]
    rms_norm(c, ConstMatrix(q.data(), t * nh, d), w.q_norm, eps, Matrix(q.data(), t * nh, d));
    rms_norm(c, ConstMatrix(k.data(), t * nkv, d), w.k_norm, eps, Matrix(k.data(), t * nkv, d));
  }
  const auto rotary = static_cast<int64_t>(static_cast<double>(d) * s.partial_rotary_factor) / 2 * 2;
  if (ls.use_rope) {
    rope_rows(c, q.m, nh, d, rotary);
    rope_rows(c, k.m, nkv, d, rotary);
    round_activations(c, q.m);
    round_activations(c, k.m);
    if (s.qk_norm_weightless_after_rope) {  // weightless L2 norm on RoPE layers
      rms_norm(c, ConstMatrix(q.data(), t * nh, d), {}, eps, Matrix(q.data(), t * nh, d));
      rms_norm(c, ConstMatrix(k.data(), t * nkv, d), {}, eps, Matrix(k.data(), t * nkv, d));
    }
  } else if (s.attn_temperature_tuning) {
    scale_q_by_temperature(c, q.m);  // NoPE layers only
  }
  append_and_page(c, layer, k.m, v.m);
  Buffer attn(c.arena, t, nh * d);
  PagedAttentionArgs a;
  a.q = q.m;
  a.seqs = c.layout.paged;
  a.out = attn.m;
  a.n_heads = nh;
  a.n_kv_heads = nkv;
  a.head_dim = d;
  a.scale = static_cast<float>(s.attention_scale);
  a.mask = ls.mask;
  a.window = ls.window;
  a.sinks = w.sinks;
  c.be.paged_attention(a);
  round_activations(c, attn.m);
  if (s.attention_output_gate) {  // attn * sigmoid(gate), head-major like the heads' outputs
    c.be.sigmoid({gate.m, gate.m});
    round_activations(c, gate.m);
    c.be.mul({attn.m, gate.m, attn.m});
    round_activations(c, attn.m);
  }
  matmul(c, attn.m, w.o, out);  // [T, hidden]: this rank's heads' share under tensor parallelism
  finish_row_parallel(c, out);
}

}  // namespace day0::blocks
