// Attention on the cpu backend: one work item per (query token, kv head) so the query heads of a GQA
// group share each key and value row while it is in cache; online softmax over blocks of keys.
#include <algorithm>
#include <cmath>
#include <vector>

#include "day0/backends/cpu/cpu_ops.h"
#include "day0/ops/kernel_checks.h"
#include "day0/ops/key_selection.h"

namespace day0::cpu {

namespace {

inline constexpr int64_t kKeyBlock = 128;

// The visible key positions [lo, hi] of a query at position i (before clipping to the cache).
void visible_range(const AttentionArgs& a, int64_t i, int64_t& lo, int64_t& hi) {
  hi = i;
  lo = 0;
  switch (a.mask) {
    case AttentionMask::kCausal:
      lo = 0;
      break;
    case AttentionMask::kSliding:
      lo = i - a.window + 1;
      break;
    case AttentionMask::kChunked:
      lo = (i / a.window) * a.window;
      break;
  }
}

// Running softmax state of one query head: max m, denominator sum, unnormalised output acc.
struct OnlineSoftmax {
  float m;
  float sum;
  float* acc;
};

}  // namespace

void attention(const Context& c, const AttentionArgs& a) {
  check_args(a);
  const int64_t dv = v_head_dim_of(a);
  const int64_t group = a.n_heads / a.n_kv_heads;
  const float scale = attention_scale_of(a);
  const int64_t items = a.q.rows * a.n_kv_heads;
  c.pool.parallel_for(items, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> acc(static_cast<size_t>(group * dv));
    std::vector<float> scores(static_cast<size_t>(group * kKeyBlock));
    std::vector<OnlineSoftmax> state(static_cast<size_t>(group));
    std::vector<std::vector<int64_t>> blocks(static_cast<size_t>(group));  // block-sparse: per head
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / a.n_kv_heads;
      const int64_t g = item % a.n_kv_heads;
      const int64_t qpos = a.q_pos0 + t;
      int64_t lo = 0;
      int64_t hi = 0;
      visible_range(a, qpos, lo, hi);
      // Cache rows holding those positions.
      const int64_t j_begin = std::max<int64_t>(0, lo - a.k_pos0);
      const int64_t j_end = std::min<int64_t>(a.k.rows, hi - a.k_pos0 + 1);
      std::fill(acc.begin(), acc.end(), 0.0f);
      const bool sparse = !a.selection.empty();
      for (int64_t h = 0; h < group && sparse; ++h)
        selected_block_list(a.selection, t, g * group + h, a.n_heads, blocks[static_cast<size_t>(h)]);
      for (int64_t h = 0; h < group; ++h) {
        const int64_t head = g * group + h;
        // A sink joins the denominator as exp(sink - m): start from it.
        state[static_cast<size_t>(h)] =
            a.sinks.empty() ? OnlineSoftmax{-INFINITY, 0.0f, acc.data() + h * dv}
                            : OnlineSoftmax{a.sinks[static_cast<size_t>(head)], 1.0f, acc.data() + h * dv};
      }
      for (int64_t jb = j_begin; jb < j_end; jb += kKeyBlock) {
        const int64_t nb = std::min(kKeyBlock, j_end - jb);
        for (int64_t h = 0; h < group; ++h) {
          const float* q = a.q.row(t) + (g * group + h) * a.head_dim;
          float* s = scores.data() + h * kKeyBlock;
          for (int64_t j = 0; j < nb; ++j)
            s[j] = c.k.dot(q, a.k.row(jb + j) + g * a.head_dim, a.head_dim) * scale;
          if (!sparse) continue;
          const std::vector<int64_t>& kept = blocks[static_cast<size_t>(h)];
          for (int64_t j = 0; j < nb; ++j) {  // keys outside the head's selected blocks weigh nothing
            const int64_t block = (a.k_pos0 + jb + j) / a.selection.block_size;
            if (!std::binary_search(kept.begin(), kept.end(), block)) s[j] = -INFINITY;
          }
        }
        for (int64_t h = 0; h < group; ++h) {
          OnlineSoftmax& st = state[static_cast<size_t>(h)];
          float* s = scores.data() + h * kKeyBlock;
          const float block_max = *std::max_element(s, s + nb);
          if (std::isinf(block_max) && block_max < 0) continue;  // every key of the span left out
          const float new_m = std::max(st.m, block_max);
          if (new_m > st.m) {
            const float factor = std::isinf(st.m) ? 0.0f : std::exp(st.m - new_m);
            st.sum *= factor;
            c.k.scale(factor, st.acc, dv);
            st.m = new_m;
          }
          st.sum += c.k.exp_sum(s, nb, st.m);
          for (int64_t j = 0; j < nb; ++j) c.k.axpy(s[j], a.v.row(jb + j) + g * dv, st.acc, dv);
        }
      }
      for (int64_t h = 0; h < group; ++h) {
        const OnlineSoftmax& st = state[static_cast<size_t>(h)];
        float* out = a.out.row(t) + (g * group + h) * dv;
        const float inv = st.sum > 0.0f && j_end > j_begin ? 1.0f / st.sum : 0.0f;
        for (int64_t d = 0; d < dv; ++d) out[d] = st.acc[d] * inv;
      }
    }
  });
}

void mla_absorbed(const Context& c, const MlaArgs& a) {
  check_args(a);
  const int64_t r = a.kv_lora_rank;
  const int64_t per_head = a.d_nope + a.d_v;
  const int64_t dqk = a.d_nope + a.d_rope;
  const bool mx = a.w_kv_b.format == WeightFormat::kMxfp4;
  c.pool.parallel_for(a.q.rows * a.n_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> q_abs(static_cast<size_t>(r));
    std::vector<float> latent(static_cast<size_t>(r));
    std::vector<float> prepared(static_cast<size_t>(r));
    std::vector<float> w_row(static_cast<size_t>(r));
    std::vector<float> scores(static_cast<size_t>(kKeyBlock));
    std::vector<char> keep;
    std::vector<int64_t> keys;  // the keys the row attends to: every causal one, or its sparse selection
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / a.n_heads;
      const int64_t h = item % a.n_heads;
      const float* q_nope = a.q.row(t) + h * dqk;
      const float* q_pe = q_nope + a.d_nope;
      // q_abs = W_UK[h]^T q_nope: rows h*per_head + d of w_kv_b, weighted by q_nope[d].
      std::fill(q_abs.begin(), q_abs.end(), 0.0f);
      for (int64_t d = 0; d < a.d_nope; ++d) {
        c.k.dequant_row(a.w_kv_b, h * per_head + d, 0, r, w_row.data());
        c.k.axpy(q_nope[d], w_row.data(), q_abs.data(), r);
      }
      const int64_t causal_keys = std::min<int64_t>(a.c_kv.rows, a.q_pos0 + t + 1);
      // Dense: every causal key, nothing allocated (decode must not touch the heap).
      const bool sparse = a.selected.rows > 0;
      if (sparse) selected_key_list(a.selected, t, causal_keys, keep, keys);
      const int64_t n_keys = sparse ? static_cast<int64_t>(keys.size()) : causal_keys;
      auto key_at = [&](int64_t i) { return sparse ? keys[static_cast<size_t>(i)] : i; };
      float m = -INFINITY;
      float sum = 0.0f;
      std::fill(latent.begin(), latent.end(), 0.0f);
      for (int64_t jb = 0; jb < n_keys; jb += kKeyBlock) {
        const int64_t nb = std::min(kKeyBlock, n_keys - jb);
        for (int64_t j = 0; j < nb; ++j) {
          const int64_t key = key_at(jb + j);
          scores[static_cast<size_t>(j)] =
              (c.k.dot(q_abs.data(), a.c_kv.row(key), r) + c.k.dot(q_pe, a.k_pe.row(key), a.d_rope)) *
              a.scale;
        }
        const float block_max = *std::max_element(scores.begin(), scores.begin() + nb);
        if (block_max > m) {
          const float factor = std::isinf(m) ? 0.0f : std::exp(m - block_max);
          sum *= factor;
          c.k.scale(factor, latent.data(), r);
          m = block_max;
        }
        sum += c.k.exp_sum(scores.data(), nb, m);
        for (int64_t j = 0; j < nb; ++j)
          c.k.axpy(scores[static_cast<size_t>(j)], a.c_kv.row(key_at(jb + j)), latent.data(), r);
      }
      if (n_keys > 0) c.k.scale(1.0f / sum, latent.data(), r);
      // o_h = W_UV[h] latent: rows h*per_head + d_nope + d.
      const float* x = latent.data();
      if (mx) {
        prepare_mxfp4_x(latent.data(), r, prepared.data());
        x = prepared.data();
      }
      float* out = a.out.row(t) + h * a.d_v;
      c.k.dot_rows(a.w_kv_b, h * per_head + a.d_nope, h * per_head + per_head, x, out);
    }
  });
}

}  // namespace day0::cpu
