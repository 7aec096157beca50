// Reference kernels for position-dependent ops: RoPE, causal attention (GQA, window, chunk, sinks) and
// MLA in both forms.
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "day0/backends/reference/reference_kernels.h"
#include "day0/core/error.h"
#include "day0/ops/kernel_checks.h"
#include "day0/ops/key_selection.h"
#include "day0/ops/paged_gather.h"

namespace day0::ref {

void rope(const RopeArgs& a) {
  check_args(a);
  const int64_t half = a.rotary_dim / 2;
  for (int64_t t = 0; t < a.x.rows; ++t) {
    const auto pos = static_cast<float>(a.positions[static_cast<size_t>(t)]);
    for (int64_t h = 0; h < a.n_heads; ++h) {
      float* x = a.x.row(t) + h * a.head_dim + a.rotary_col0;
      for (int64_t i = 0; i < half; ++i) {
        const float theta = pos * a.inv_freq[static_cast<size_t>(i)];  // float32, as HF
        const double c = std::cos(static_cast<double>(theta)) * a.attention_factor;
        const double s = std::sin(static_cast<double>(theta)) * a.attention_factor;
        const int64_t i0 = a.layout == RopeLayout::kHalfSplit ? i : 2 * i;
        const int64_t i1 = a.layout == RopeLayout::kHalfSplit ? i + half : 2 * i + 1;
        const double x0 = x[i0];
        const double x1 = x[i1];
        x[i0] = static_cast<float>(x0 * c - x1 * s);
        x[i1] = static_cast<float>(x1 * c + x0 * s);
      }
    }
  }
}

namespace {

bool visible(AttentionMask mask, int64_t window, int64_t query_pos, int64_t key_pos) {
  if (key_pos > query_pos) return false;
  switch (mask) {
    case AttentionMask::kCausal:
      return true;
    case AttentionMask::kSliding:
      return key_pos > query_pos - window;
    case AttentionMask::kChunked:
      return key_pos / window == query_pos / window;
  }
  return false;
}

// softmax over scores (masked entries absent from `keys`) plus an optional sink logit; returns the
// probabilities of the listed keys (they sum to < 1 with a sink).
std::vector<double> softmax_with_sink(const std::vector<double>& scores, const double* sink) {
  double m = sink ? *sink : -INFINITY;
  for (double s : scores) m = std::max(m, s);
  double sum = sink ? std::exp(*sink - m) : 0.0;
  for (double s : scores) sum += std::exp(s - m);
  std::vector<double> p(scores.size());
  for (size_t j = 0; j < scores.size(); ++j) p[j] = std::exp(scores[j] - m) / sum;
  return p;
}

}  // namespace

void attention(const AttentionArgs& a) {
  check_args(a);
  const int64_t dv = v_head_dim_of(a);
  const int64_t group = a.n_heads / a.n_kv_heads;
  const double scale = attention_scale_of(a);
  std::vector<int64_t> blocks;  // block-sparse: the head's selected blocks
  for (int64_t t = 0; t < a.q.rows; ++t) {
    const int64_t qpos = a.q_pos0 + t;
    for (int64_t h = 0; h < a.n_heads; ++h) {
      const int64_t g = h / group;
      const float* q = a.q.row(t) + h * a.head_dim;
      std::vector<int64_t> keys;
      std::vector<double> scores;
      if (!a.selection.empty()) selected_block_list(a.selection, t, h, a.n_heads, blocks);
      for (int64_t j = 0; j < a.k.rows; ++j) {
        if (!visible(a.mask, a.window, qpos, a.k_pos0 + j)) continue;
        if (!a.selection.empty() &&
            !std::binary_search(blocks.begin(), blocks.end(), (a.k_pos0 + j) / a.selection.block_size)) {
          continue;
        }
        const float* k = a.k.row(j) + g * a.head_dim;
        double dot = 0.0;
        for (int64_t c = 0; c < a.head_dim; ++c) dot += static_cast<double>(q[c]) * k[c];
        keys.push_back(j);
        scores.push_back(dot * scale);
      }
      float* out = a.out.row(t) + h * dv;
      const double sink = a.sinks.empty() ? 0.0 : a.sinks[static_cast<size_t>(h)];
      const auto p = softmax_with_sink(scores, a.sinks.empty() ? nullptr : &sink);
      for (int64_t c = 0; c < dv; ++c) {
        double acc = 0.0;
        for (size_t i = 0; i < keys.size(); ++i) acc += p[i] * a.v.row(keys[i])[g * dv + c];
        out[c] = static_cast<float>(acc);
      }
    }
  }
}

void mla_attention(const MlaArgs& a) {
  check_args(a);
  const int64_t dqk = a.d_nope + a.d_rope;
  const int64_t r = a.kv_lora_rank;
  const int64_t rows_per_head = a.d_nope + a.d_v;
  auto w_uk = [&](int64_t h, int64_t d, int64_t c) { return a.w_kv_b.at(h * rows_per_head + d, c); };
  auto w_uv = [&](int64_t h, int64_t d, int64_t c) {
    return a.w_kv_b.at(h * rows_per_head + a.d_nope + d, c);
  };
  std::vector<char> keep;  // the sparse selection of the row (every key when dense)
  for (int64_t t = 0; t < a.q.rows; ++t) {
    const int64_t n_keys = std::min<int64_t>(a.c_kv.rows, a.q_pos0 + t + 1);
    selected_keys(a.selected, t, n_keys, keep);
    for (int64_t h = 0; h < a.n_heads; ++h) {
      const float* q_nope = a.q.row(t) + h * dqk;
      const float* q_pe = q_nope + a.d_nope;
      std::vector<double> scores(static_cast<size_t>(n_keys));
      float* out = a.out.row(t) + h * a.d_v;
      if (a.form == MlaForm::kAbsorbed) {
        std::vector<double> q_abs(static_cast<size_t>(r), 0.0);
        for (int64_t c = 0; c < r; ++c) {
          for (int64_t d = 0; d < a.d_nope; ++d) q_abs[static_cast<size_t>(c)] += w_uk(h, d, c) * q_nope[d];
        }
        for (int64_t j = 0; j < n_keys; ++j) {
          double s = 0.0;
          for (int64_t c = 0; c < r; ++c) s += q_abs[static_cast<size_t>(c)] * a.c_kv.row(j)[c];
          for (int64_t c = 0; c < a.d_rope; ++c) s += static_cast<double>(q_pe[c]) * a.k_pe.row(j)[c];
          scores[static_cast<size_t>(j)] = keep[static_cast<size_t>(j)] ? s * a.scale : -INFINITY;
        }
        const auto p = softmax_with_sink(scores, nullptr);
        std::vector<double> latent(static_cast<size_t>(r), 0.0);
        for (int64_t j = 0; j < n_keys; ++j) {
          for (int64_t c = 0; c < r; ++c)
            latent[static_cast<size_t>(c)] += p[static_cast<size_t>(j)] * a.c_kv.row(j)[c];
        }
        for (int64_t d = 0; d < a.d_v; ++d) {
          double acc = 0.0;
          for (int64_t c = 0; c < r; ++c) acc += w_uv(h, d, c) * latent[static_cast<size_t>(c)];
          out[d] = static_cast<float>(acc);
        }
      } else {
        std::vector<std::vector<double>> values(static_cast<size_t>(n_keys));
        for (int64_t j = 0; j < n_keys; ++j) {
          const float* c_kv = a.c_kv.row(j);
          double s = 0.0;
          for (int64_t d = 0; d < a.d_nope; ++d) {
            double k_nope = 0.0;
            for (int64_t c = 0; c < r; ++c) k_nope += w_uk(h, d, c) * c_kv[c];
            s += static_cast<double>(q_nope[d]) * k_nope;
          }
          for (int64_t c = 0; c < a.d_rope; ++c) s += static_cast<double>(q_pe[c]) * a.k_pe.row(j)[c];
          scores[static_cast<size_t>(j)] = keep[static_cast<size_t>(j)] ? s * a.scale : -INFINITY;
          auto& v = values[static_cast<size_t>(j)];
          v.assign(static_cast<size_t>(a.d_v), 0.0);
          for (int64_t d = 0; d < a.d_v; ++d) {
            for (int64_t c = 0; c < r; ++c) v[static_cast<size_t>(d)] += w_uv(h, d, c) * c_kv[c];
          }
        }
        const auto p = softmax_with_sink(scores, nullptr);
        for (int64_t d = 0; d < a.d_v; ++d) {
          double acc = 0.0;
          for (int64_t j = 0; j < n_keys; ++j)
            acc += p[static_cast<size_t>(j)] * values[static_cast<size_t>(j)][static_cast<size_t>(d)];
          out[d] = static_cast<float>(acc);
        }
      }
    }
  }
}

void paged_attention(const PagedAttentionArgs& a) {
  for_each_gathered_sequence(a, [](const AttentionArgs& one) { attention(one); });
}

void paged_mla_attention(const PagedMlaArgs& a) {
  for_each_gathered_sequence(a, [](const MlaArgs& one) { mla_attention(one); });
}

void indexer_topk(const IndexerTopkArgs& a) {
  check_args(a);
  const int64_t k = a.selected.cols;
  std::vector<float> first, second;  // one sequence's cache, dequantised
  for (const PagedSequence& s : a.seqs) {
    if (s.q_rows == 0) continue;
    D0_CHECK_MSG(s.kv.pos0 == 0, "indexer_topk: indexed layers keep every position");
    gather_kv_pages(s.kv, first, second);
    for (int64_t t = s.q_row0; t < s.q_row0 + s.q_rows; ++t) {
      const int64_t n_keys = a.visible_keys(s.q_pos0 + (t - s.q_row0), s.kv.length);
      std::vector<std::pair<double, int64_t>> scored;  // (-score, key): sorted, highest score first
      for (int64_t j = 0; j < n_keys; ++j) {
        const float* key = second.data() + j * s.kv.second_width + a.key_col0;
        double score = 0.0;
        for (int64_t h = 0; h < a.n_heads; ++h) {
          const float* q = a.q.row(t) + h * a.head_dim;
          double dot = 0.0;
          for (int64_t c = 0; c < a.head_dim; ++c) dot += static_cast<double>(q[c]) * key[c];
          score += static_cast<double>(a.weights.row(t)[h]) * std::max(0.0, dot * a.scale);
        }
        scored.emplace_back(-score, j);
      }
      std::sort(scored.begin(), scored.end());
      int32_t* out = a.selected.row(t);
      for (int64_t i = 0; i < k; ++i) {
        out[i] = i < n_keys ? static_cast<int32_t>(scored[static_cast<size_t>(i)].second) : -1;
      }
      if (!a.ambiguous.empty()) {  // a tie across the cut: the n-th and the first left out score alike
        a.ambiguous[static_cast<size_t>(t)] =
            k < n_keys && scored[static_cast<size_t>(k - 1)].first == scored[static_cast<size_t>(k)].first;
      }
    }
  }
}

void block_indexer_topk(const BlockIndexerTopkArgs& a) {
  check_args(a);
  const int64_t k = a.selected.cols / a.n_heads, bs = a.block_size;
  std::vector<float> first, second;  // one sequence's cache, dequantised
  for (const PagedSequence& s : a.seqs) {
    if (s.q_rows == 0) continue;
    D0_CHECK_MSG(s.kv.pos0 == 0, "block_indexer_topk: block-sparse layers keep every position");
    gather_kv_pages(s.kv, first, second);
    for (int64_t t = s.q_row0; t < s.q_row0 + s.q_rows; ++t) {
      const int64_t p = s.q_pos0 + (t - s.q_row0);
      const int64_t n_keys = std::min<int64_t>(s.kv.length, p + 1);
      const int64_t n_blocks = p / bs + 1;
      for (int64_t h = 0; h < a.n_heads; ++h) {
        const float* q = a.q.row(t) + h * a.head_dim;
        std::vector<double> best(static_cast<size_t>(n_blocks), -INFINITY);
        for (int64_t j = 0; j < n_keys; ++j) {
          const float* key = second.data() + j * s.kv.second_width + a.key_col0;
          double dot = 0.0;
          for (int64_t c = 0; c < a.head_dim; ++c) dot += static_cast<double>(q[c]) * key[c];
          double& b = best[static_cast<size_t>(j / bs)];
          b = std::max(b, dot);
        }
        for (int64_t i = 0; i < a.local_blocks; ++i)
          best[static_cast<size_t>(std::max<int64_t>(0, p / bs - i))] = INFINITY;
        std::vector<std::pair<double, int64_t>> scored;  // (-score, block): sorted, highest first
        for (int64_t b = 0; b < n_blocks; ++b) scored.emplace_back(-best[static_cast<size_t>(b)], b);
        std::sort(scored.begin(), scored.end());
        int32_t* out = a.selected.row(t) + h * k;
        for (int64_t i = 0; i < k; ++i) {
          out[i] = i < n_blocks ? static_cast<int32_t>(scored[static_cast<size_t>(i)].second) : -1;
        }
      }
    }
  }
}

}  // namespace day0::ref
