// Gated DeltaNet block (layer_types "linear_attention"): in_proj_qkvz and in_proj_ba (grouped
// per key head) or the separate in_proj_qkv / z / b / a give [q | k | v], z, b and a;
// the causal depthwise conv with silu over each sequence's conv window; beta = sigmoid(b); the gated delta
// rule over each sequence's float32 state (decay from a, A_log and dt_bias inside the kernel; beta times
// beta_scale first); the gated RMSNorm with silu(z) per value head (its own eps where the spec gives one);
// out_proj. The states live in the sequences' state blocks (KvCache::recurrent), beside the paged KV blocks;
// a step that saves a snapshot runs the conv and the delta rule in two parts around it (recurrent_conv).
#include <fmt/format.h>

#include "day0/model/model_memory.h"
#include "day0/runtime/blocks.h"

namespace day0::blocks {

namespace {

// The grouped projections: per key head [q | k | v of its value heads | z of them] and [b | a].
// u = [q of every key head | k of every key head | v of every value head] (the conv's channels).
void split_grouped(const Context& c, const LinearAttentionWeights& w, ConstMatrix h, Matrix u, Matrix z,
                   Matrix a, Matrix beta) {
  const LinearAttentionSpec& la = *c.spec.linear_attention;
  const int64_t t = h.rows, nk = la.n_key_heads, nv = la.n_value_heads, dk = la.key_head_dim;
  const int64_t dv = la.value_head_dim, r = nv / nk, kd = la.key_dim();
  const int64_t group = 2 * dk + 2 * r * dv;
  Buffer qkvz(c.arena, t, nk * group), ba(c.arena, t, nk * 2 * r);  // [T, per key head [q|k|v|z]], [b|a]
  linear(c, h, w.in_qkvz, qkvz.m);
  linear(c, h, w.in_ba, ba.m);
  c.be.copy_columns({.x = qkvz.m, .y = u, .groups = nk, .width = dk, .x_stride = group, .y_stride = dk});
  c.be.copy_columns({.x = qkvz.m,
                     .y = u,
                     .groups = nk,
                     .width = dk,
                     .x_col0 = dk,
                     .x_stride = group,
                     .y_col0 = kd,
                     .y_stride = dk});
  c.be.copy_columns({.x = qkvz.m,
                     .y = u,
                     .groups = nk,
                     .width = r * dv,
                     .x_col0 = 2 * dk,
                     .x_stride = group,
                     .y_col0 = 2 * kd,
                     .y_stride = r * dv});
  c.be.copy_columns({.x = qkvz.m,
                     .y = z,
                     .groups = nk,
                     .width = r * dv,
                     .x_col0 = 2 * dk + r * dv,
                     .x_stride = group,
                     .y_stride = r * dv});
  c.be.copy_columns({.x = ba.m, .y = beta, .groups = nk, .width = r, .x_stride = 2 * r, .y_stride = r});
  c.be.copy_columns(
      {.x = ba.m, .y = a, .groups = nk, .width = r, .x_col0 = r, .x_stride = 2 * r, .y_stride = r});
}

}  // namespace

void gated_deltanet(const Context& c, int64_t layer, const LinearAttentionWeights& w, ConstMatrix h,
                    Matrix out) {
  const LinearAttentionSpec& la = *c.spec.linear_attention;
  const int64_t t = h.rows, nk = la.n_key_heads, nv = la.n_value_heads, dk = la.key_head_dim;
  const int64_t dv = la.value_head_dim, kd = la.key_dim(), vd = la.value_dim();
  const int64_t ch = la.conv_channels();
  Buffer u(c.arena, t, ch), z(c.arena, t, vd), a(c.arena, t, nv),
      beta(c.arena, t, nv);  // [T, C] = [q | k | v], [T, n_v d_v], [T, n_v] x 2
  if (w.separate()) {  // separate projections: the conv's channels are in_proj_qkv's rows, straight into u
    linear(c, h, w.in_q, u.m.col_slice(0, kd));
    linear(c, h, w.in_k, u.m.col_slice(kd, kd));
    linear(c, h, w.in_v, u.m.col_slice(2 * kd, vd));
    linear(c, h, w.in_z, z.m);
    linear(c, h, w.in_b, beta.m);
    linear(c, h, w.in_a, a.m);
  } else {
    split_grouped(c, w, h, u.m, z.m, a.m, beta.m);
  }

  // Each sequence's state of this layer must hold exactly its tokens so far.
  const KvDtype window_dtype = bind_recurrent_states(c, layer, "linear attention");
  Buffer uc(c.arena, t, ch);  // [T, C] silu(conv(u))
  recurrent_conv(c, layer,
                 {.x = u.m,
                  .weight = w.conv,
                  .y = uc.m,
                  .kernel = la.conv_kernel,
                  .window_dtype = window_dtype,
                  .silu = true});
  round_activations(c, uc.m);
  c.be.sigmoid({beta.m, beta.m});
  round_activations(c, beta.m);
  if (la.beta_scale != 1.0) {  // negative eigenvalues allowed: beta in [0, 2] (x2 is exact in BF16)
    c.be.scale({.x = beta.m, .y = beta.m, .scale = static_cast<float>(la.beta_scale)});
    round_activations(c, beta.m);
  }
  Buffer o(c.arena, t, vd);  // [T, n_v * d_v] the delta rule's output
  recurrent_scan(c, layer,
                 GatedDeltaRuleArgs{.q = uc.m.col_slice(0, kd),
                                    .k = uc.m.col_slice(kd, kd),
                                    .v = uc.m.col_slice(2 * kd, vd),
                                    .a = a.m,
                                    .beta = beta.m,
                                    .a_log = w.a_log,
                                    .dt_bias = w.dt_bias,
                                    .out = o.m,
                                    .n_key_heads = nk,
                                    .n_value_heads = nv,
                                    .key_head_dim = dk,
                                    .value_head_dim = dv,
                                    .l2_normalize = true});
  round_activations(c, o.m);
  // Per value head: rows [T * n_v, d_v].
  const Matrix heads(o.data(), t * nv, dv);
  c.be.gated_rms_norm({.x = heads,
                       .z = ConstMatrix(z.data(), t * nv, dv),
                       .weight = w.norm,
                       .eps = static_cast<float>(la.norm_eps > 0.0 ? la.norm_eps : c.spec.rms_norm_eps),
                       .y = heads});
  round_activations(c, o.m);
  matmul(c, o.m, w.out, out);  // [T, hidden]
  finish_row_parallel(c, out);
}

}  // namespace day0::blocks
