// Multi-head latent attention (DeepSeek-V2/V3, Kimi K2). The cache holds only the normed latent c_kv
// and the roped shared key k_pe; the kernel expands them per head (naive form) or absorbs W_UK / W_UV
// into the query and output (absorbed form). Both read the same cache.
#include <cmath>
#include <cstring>
#include <numeric>

#include "day0/runtime/blocks.h"

namespace day0::blocks {
namespace {

// Copies columns [col0, col0 + width) of each of `groups` consecutive groups of `group_width` columns
// into (to_dense) or back from (!to_dense) a dense [rows, groups * width] matrix.
void gather_heads(Matrix wide, int64_t groups, int64_t group_width, int64_t col0, int64_t width, Matrix dense,
                  bool to_dense) {
  for (int64_t r = 0; r < wide.rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      float* a = wide.row(r) + g * group_width + col0;
      float* b = dense.row(r) + g * width;
      if (to_dense) {
        std::memcpy(b, a, static_cast<size_t>(width) * sizeof(float));
      } else {
        std::memcpy(a, b, static_cast<size_t>(width) * sizeof(float));
      }
    }
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

  Buffer q(t, nh * dqk);  // [T, heads * (d_nope + d_rope)]
  if (w.q_a.present()) {
    Buffer cq(t, m.q_lora_rank);  // [T, q_lora_rank]
    linear(c, h, w.q_a, cq.m);
    rms_norm(c, cq.m, w.q_a_norm, kLatentEps, cq.m);
    linear(c, cq.m, w.q_b, q.m);
  } else {
    linear(c, h, w.q, q.m);
  }
  Buffer kv(t, r + dr);  // [T, kv_lora_rank + d_rope]
  linear(c, h, w.kv_a, kv.m);
  Buffer ckv(t, r), kpe(t, dr);
  gather_heads(kv.m, 1, r + dr, 0, r, ckv.m, true);
  gather_heads(kv.m, 1, r + dr, r, dr, kpe.m, true);
  rms_norm(c, ckv.m, w.kv_a_norm, kLatentEps, ckv.m);

  double scale = s.attention_scale;
  if (scale <= 0) scale = 1.0 / std::sqrt(static_cast<double>(dqk));
  Buffer attn(t, nh * dv);
  for (size_t sq = 0; sq < c.layout.caches.size(); ++sq) {
    const int64_t r0 = c.layout.row0[sq], rn = c.layout.rows[sq];
    if (rn == 0) continue;
    std::vector<int64_t> pos(static_cast<size_t>(rn));
    std::iota(pos.begin(), pos.end(), c.layout.pos0[sq]);
    const RopeFrequencies f = rope_for_sequence(c, static_cast<int64_t>(sq), dr);
    Matrix qs = q.m.row_slice(r0, rn);
    Buffer qpe(rn, nh * dr);  // the rope parts of every head, dense for the rope kernel
    gather_heads(qs, nh, dqk, dn, dr, qpe.m, true);
    c.be.rope({qpe.m, pos, nh, dr, dr, s.rope_layout, f.inv_freq, f.attention_factor});
    round_activations(c, qpe.m);
    gather_heads(qs, nh, dqk, dn, dr, qpe.m, false);
    Matrix ks = kpe.m.row_slice(r0, rn);
    c.be.rope({ks, pos, 1, dr, dr, s.rope_layout, f.inv_freq, f.attention_factor});
    round_activations(c, ks);

    KvCache& cache = *c.layout.caches[sq];
    cache.append(layer, ckv.m.row_slice(r0, rn), ks);
    MlaArgs a;
    a.q = qs;
    a.c_kv = cache.first(layer);
    a.k_pe = cache.second(layer);
    a.w_kv_b = w.kv_b.w;
    a.out = attn.m.row_slice(r0, rn);
    a.n_heads = nh;
    a.d_nope = dn;
    a.d_rope = dr;
    a.d_v = dv;
    a.kv_lora_rank = r;
    a.q_pos0 = c.layout.pos0[sq];
    a.scale = static_cast<float>(scale);
    switch (c.options.mla) {
      case MlaMode::kNaive:
        a.form = MlaForm::kNaive;
        break;
      case MlaMode::kAbsorbed:
        a.form = MlaForm::kAbsorbed;
        break;
      case MlaMode::kAuto:
        // The expanded form is cheaper for multi-token steps (its kv_b expansion is one GEMM).
        a.form = rn > 1 ? MlaForm::kNaive : MlaForm::kAbsorbed;
        break;
    }
    c.be.mla_attention(a);
  }
  round_activations(c, attn.m);
  linear(c, attn.m, w.o, out);
}

}  // namespace day0::blocks
