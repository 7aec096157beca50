// Multi-head latent attention (DeepSeek-V2/V3, Kimi K2, LongCat-Flash). The cache holds only the normed
// latent c_kv and the roped shared key k_pe; the kernel expands them per head (naive form) or absorbs W_UK /
// W_UV into the query and output (absorbed form). Both read the same paged cache, one call per layer for
// every sequence of the step.
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

}  // namespace

void mla_attention(const Context& c, int64_t layer, const AttentionWeights& w, ConstMatrix h, Matrix out) {
  const ModelSpec& s = c.spec;
  const MlaSpec& m = *s.mla;
  const int64_t t = h.rows, nh = s.n_heads, dn = m.qk_nope_head_dim, dr = m.qk_rope_head_dim,
                dv = m.v_head_dim;
  const int64_t r = m.kv_lora_rank, dqk = dn + dr;
  constexpr float kLatentEps = 1e-6f;  // HF builds q_a/kv_a layernorms without rms_norm_eps

  Buffer q(c.arena, t, nh * dqk);  // [T, heads * (d_nope + d_rope)]
  if (w.q_a.present()) {
    Buffer cq(c.arena, t, m.q_lora_rank);  // [T, q_lora_rank]
    linear(c, h, w.q_a, cq.m);
    rms_norm(c, cq.m, w.q_a_norm, kLatentEps, cq.m);
    linear(c, cq.m, w.q_b, q.m);
  } else {
    linear(c, h, w.q, q.m);
  }
  if (m.q_scale != 1.0) {  // LongCat-Flash LoRA rescaling, nope and rope parts alike
    c.be.scale({.x = q.m, .y = q.m, .scale = static_cast<float>(m.q_scale)});
    round_activations(c, q.m);
  }
  Buffer kv(c.arena, t, r + dr);  // [T, kv_lora_rank + d_rope]
  linear(c, h, w.kv_a, kv.m);
  Buffer ckv(c.arena, t, r), kpe(c.arena, t, dr);
  gather_heads(c, kv.m, 1, r + dr, 0, r, ckv.m, true);
  gather_heads(c, kv.m, 1, r + dr, r, dr, kpe.m, true);
  rms_norm(c, ckv.m, w.kv_a_norm, kLatentEps, ckv.m);
  if (m.latent_scale != 1.0) {  // LongCat-Flash: the normed latent (cached so), not k_pe
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
  rope_rows(c, kpe.m, 1, dr, dr);
  round_activations(c, kpe.m);
  append_and_page(c, layer, ckv.m, kpe.m);

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
  linear(c, attn.m, w.o, out);
}

}  // namespace day0::blocks
