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

// The rows [T, heads * width] of k or v as the KV pool stores them: `x` itself, or a copy padded with
// zeros to the pool's row when this layer has fewer KV heads than the widest layer.
ConstMatrix kv_pool_rows(const Context& c, ConstMatrix x, int64_t pool_width) {
  if (x.cols == pool_width) return x;
  Buffer padded(c.arena, x.rows, pool_width);  // [T, pool width], zeros past x's columns
  c.be.copy_columns(
      {.x = x, .y = padded.m, .groups = 1, .width = x.cols, .x_stride = x.cols, .y_stride = x.cols});
  return padded.m;
}

}  // namespace

void gqa_attention(const Context& c, int64_t layer, const AttentionWeights& w, ConstMatrix h, Matrix out) {
  const ModelSpec& s = c.spec;
  const LayerSpec& ls = s.layers[static_cast<size_t>(layer)];
  const int64_t t = h.rows, nh = layer_heads(s, ls), nkv = layer_kv_heads(s, ls), d = s.head_dim;
  const int64_t dv = value_head_dim(s);
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
  linear(c, h, w.k, k.m);
  linear(c, h, w.v, v.m);
  if (s.value_scale != 1.0) {  // attention_value_scale, rounded like the product it is
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
    rms_norm(c, ConstMatrix(k.data(), t * nkv, d), w.k_norm, eps, Matrix(k.data(), t * nkv, d));
  }
  // Sliding layers rotate with their own frequencies when the model gives them some (sliding_rope).
  const bool own_rope = ls.mask == AttentionMask::kSliding && s.sliding_rope && c.sliding_rope != nullptr;
  const int64_t rotary =
      rotary_dims(d, own_rope ? s.sliding_rope->partial_rotary_factor : s.partial_rotary_factor);
  if (ls.use_rope) {
    const RopeFrequencies* freqs = own_rope ? c.sliding_rope : nullptr;
    rope_rows(c, q.m, nh, d, rotary, std::nullopt, freqs);
    rope_rows(c, k.m, nkv, d, rotary, std::nullopt, freqs);
    round_activations(c, q.m);
    round_activations(c, k.m);
    if (s.qk_norm_weightless_after_rope) {  // weightless L2 norm on RoPE layers
      rms_norm(c, ConstMatrix(q.data(), t * nh, d), {}, eps, Matrix(q.data(), t * nh, d));
      rms_norm(c, ConstMatrix(k.data(), t * nkv, d), {}, eps, Matrix(k.data(), t * nkv, d));
    }
  } else if (s.attn_temperature_tuning) {
    scale_q_by_temperature(c, q.m);  // NoPE layers only
  }
  // The pool's rows hold the widest layer's KV heads; a layer with fewer fills their first columns.
  const int64_t pool_kv = max_kv_heads(s);
  append_and_page(c, layer, kv_pool_rows(c, k.m, pool_kv * d), kv_pool_rows(c, v.m, pool_kv * dv));
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
  c.be.paged_attention(a);
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
