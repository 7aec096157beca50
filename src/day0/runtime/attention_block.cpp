// GQA attention block: projections, per-head q/k RMSNorm (Qwen3, GLM-4.5), (partial) RoPE or NoPE,
// Llama 4's weightless post-RoPE q/k norm and NoPE temperature tuning, cache append, masked attention
// (causal / sliding / chunked, sinks) per sequence, output projection.
#include <cmath>
#include <numeric>

#include "day0/runtime/blocks.h"

namespace day0::blocks {
namespace {

std::vector<int64_t> positions_of(const StepLayout& l, size_t s) {
  std::vector<int64_t> pos(static_cast<size_t>(l.rows[s]));
  std::iota(pos.begin(), pos.end(), l.pos0[s]);
  return pos;
}

}  // namespace

void gqa_attention(const Context& c, int64_t layer, const AttentionWeights& w, ConstMatrix h, Matrix out) {
  const ModelSpec& s = c.spec;
  const LayerSpec& ls = s.layers[static_cast<size_t>(layer)];
  const int64_t t = h.rows, nh = s.n_heads, nkv = s.n_kv_heads, d = s.head_dim;
  Buffer q(t, nh * d), k(t, nkv * d), v(t, nkv * d);  // [T, heads * head_dim]
  linear(c, h, w.q, q.m);
  linear(c, h, w.k, k.m);
  linear(c, h, w.v, v.m);
  const float eps = static_cast<float>(s.rms_norm_eps);
  if (!w.q_norm.empty()) {  // per-head RMSNorm before RoPE: rows [T * heads, head_dim]
    rms_norm(c, ConstMatrix(q.data.data(), t * nh, d), w.q_norm, eps, Matrix(q.data.data(), t * nh, d));
    rms_norm(c, ConstMatrix(k.data.data(), t * nkv, d), w.k_norm, eps, Matrix(k.data.data(), t * nkv, d));
  }
  const auto rotary = static_cast<int64_t>(static_cast<double>(d) * s.partial_rotary_factor) / 2 * 2;
  Buffer attn(t, nh * d);
  for (size_t sq = 0; sq < c.layout.caches.size(); ++sq) {
    const int64_t r0 = c.layout.row0[sq], rn = c.layout.rows[sq];
    if (rn == 0) continue;
    Matrix qs = q.m.row_slice(r0, rn), ks = k.m.row_slice(r0, rn);
    const auto pos = positions_of(c.layout, sq);
    if (ls.use_rope) {
      const RopeFrequencies f = rope_for_sequence(c, static_cast<int64_t>(sq), rotary);
      c.be.rope({qs, pos, nh, d, rotary, s.rope_layout, f.inv_freq, f.attention_factor});
      c.be.rope({ks, pos, nkv, d, rotary, s.rope_layout, f.inv_freq, f.attention_factor});
      round_activations(c, qs);
      round_activations(c, ks);
      if (s.qk_norm_weightless_after_rope) {  // Llama 4 L2 norm on RoPE layers
        rms_norm(c, ConstMatrix(qs.data, rn * nh, d), {}, eps, Matrix(qs.data, rn * nh, d));
        rms_norm(c, ConstMatrix(ks.data, rn * nkv, d), {}, eps, Matrix(ks.data, rn * nkv, d));
      }
    } else if (s.attn_temperature_tuning) {  // Llama 4 NoPE layers: q *= 1 + attn_scale * ln(1 +
                                             // floor((p+1)/fs))
      for (int64_t r = 0; r < rn; ++r) {
        const double p = static_cast<double>(pos[static_cast<size_t>(r)]);
        const double factor =
            1.0 + s.attn_scale * std::log1p(std::floor((p + 1.0) / static_cast<double>(s.floor_scale)));
        Matrix row = qs.row_slice(r, 1);
        c.be.scale({row, row, -INFINITY, INFINITY, static_cast<float>(factor), 0.0f, 0.0f});
      }
      round_activations(c, qs);
    }
    KvCache& cache = *c.layout.caches[sq];
    cache.append(layer, ks, v.m.row_slice(r0, rn));
    AttentionArgs a;
    a.q = qs;
    a.k = cache.first(layer);
    a.v = cache.second(layer);
    a.out = attn.m.row_slice(r0, rn);
    a.n_heads = nh;
    a.n_kv_heads = nkv;
    a.head_dim = d;
    a.q_pos0 = c.layout.pos0[sq];
    a.scale = static_cast<float>(s.attention_scale);
    a.mask = ls.mask;
    a.window = ls.window;
    a.sinks = w.sinks;
    c.be.attention(a);
  }
  round_activations(c, attn.m);
  linear(c, attn.m, w.o, out);
}

}  // namespace day0::blocks
