// Mamba-2 block (a hybrid's Mamba layers): in_proj splits into z, x B C and dt; the causal
// depthwise conv with bias and silu over x B C (each sequence's conv window); dt = softplus(dt + dt_bias);
// the selective scan over each sequence's float32 state with the D skip; y * silu(z) normed per group of
// intermediate / n_groups channels, times the norm's gain; out_proj. The states live in the sequences'
// state blocks (KvCache::recurrent) like Gated DeltaNet's. Rounding follows transformers' prefill: the
// projection, the conv, dt + dt_bias and its softplus round to the activation dtype; the scan and the
// gated norm stay float32 until the cast before out_proj.
#include <fmt/format.h>

#include "day0/runtime/blocks.h"

namespace day0::blocks {

void mamba2(const Context& c, int64_t layer, const MambaWeights& w, ConstMatrix h, Matrix out) {
  const MambaSpec& m = *c.spec.mamba;
  const int64_t t = h.rows, inner = m.intermediate(), ch = m.conv_channels(), nh = m.n_heads;
  const int64_t gn = m.n_groups * m.state_size;
  Buffer proj(c.arena, t, inner + ch + nh);  // [T, z | x B C | dt]
  linear(c, h, w.in, proj.m);

  // Each sequence's state of this layer must hold exactly its tokens so far.
  const KvDtype window_dtype = bind_recurrent_states(c, layer, "Mamba-2");
  Buffer xbc(c.arena, t, ch);  // [T, x | B | C] silu(conv + bias)
  recurrent_conv(c, layer,
                 {.x = proj.m.col_slice(inner, ch),
                  .weight = w.conv,
                  .bias = w.conv_bias,
                  .y = xbc.m,
                  .kernel = m.conv_kernel,
                  .window_dtype = window_dtype,
                  .silu = true});
  round_activations(c, xbc.m);
  Buffer dt(c.arena, t, nh);  // [T, n_heads] softplus(dt + dt_bias)
  c.be.add({proj.m.col_slice(inner + ch, nh), ConstMatrix(w.dt_bias.data(), 1, nh), dt.m});
  round_activations(c, dt.m);
  c.be.softplus({dt.m, dt.m});
  round_activations(c, dt.m);
  Buffer y(c.arena, t, inner);  // [T, n_heads * head_dim] the scan's output, float32
  recurrent_scan(c, layer,
                 SsmScanArgs{.x = xbc.m.col_slice(0, inner),
                             .dt = dt.m,
                             .b = xbc.m.col_slice(inner, gn),
                             .c = xbc.m.col_slice(inner + gn, gn),
                             .a_log = w.a_log,
                             .d = w.d,
                             .y = y.m,
                             .n_heads = nh,
                             .head_dim = m.head_dim,
                             .n_groups = m.n_groups,
                             .state_size = m.state_size});
  // Gated norm: y * silu(z) first, then an RMSNorm per group of channels, then the gain.
  Buffer gate(c.arena, t, inner);  // [T, I] silu(z)
  c.be.silu({proj.m.col_slice(0, inner), gate.m});
  c.be.mul({y.m, gate.m, y.m});
  const int64_t group = inner / m.n_groups;
  const Matrix groups(y.data(), t * m.n_groups, group);  // [T * n_groups, I / n_groups]
  c.be.rms_norm({.x = groups, .eps = static_cast<float>(c.spec.rms_norm_eps), .y = groups});
  c.be.mul({y.m, ConstMatrix(w.norm.data(), 1, inner), y.m});
  round_activations(c, y.m);
  linear(c, y.m, w.out, out);  // [T, hidden]
}

}  // namespace day0::blocks
