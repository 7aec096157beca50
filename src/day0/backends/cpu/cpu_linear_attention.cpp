// cpu Gated DeltaNet kernels (the linear-attention layers), float32 throughout. The conv runs channel
// ranges in parallel; the delta rule runs (sequence, value head) pairs in parallel, each pair's tokens in
// order over its own [d_k, d_v] state, with the state's rows read and written once per token
// (kv_mem and the update fused into two passes).
#include <algorithm>
#include <cmath>
#include <vector>

#include "day0/backends/cpu/cpu_ops.h"
#include "day0/ops/kernel_checks.h"
#include "day0/ops/kv_pages.h"

namespace day0::cpu {

void causal_conv1d(const Context& c, const CausalConv1dArgs& a) {
  check_args(a);
  const int64_t cn = a.x.cols, k = a.kernel, w_rows = k - 1;
  const auto elem = static_cast<int64_t>(kv_dtype_bytes(a.window_dtype));
  for (const ConvSequence& s : a.seqs) {
    if (s.rows == 0) continue;
    auto* window = static_cast<unsigned char*>(s.window);
    c.pool.parallel_for(cn, 256, [&](int64_t c0, int64_t c1) {
      const int64_t n = c1 - c0;
      // u for channels [c0, c1): the window rows then the sequence's rows, [K - 1 + rows, n].
      std::vector<float> u(static_cast<size_t>((w_rows + s.rows) * n));
      std::vector<float> row(static_cast<size_t>(cn));
      for (int64_t r = 0; r < w_rows; ++r) {
        kv_row_to_f32(a.window_dtype, window + r * cn * elem, cn, row.data());
        std::copy(row.begin() + c0, row.begin() + c1, u.begin() + r * n);
      }
      for (int64_t t = 0; t < s.rows; ++t) {
        const float* x = a.x.row(s.row0 + t) + c0;
        std::copy(x, x + n, u.begin() + (w_rows + t) * n);
      }
      for (int64_t t = 0; t < s.rows; ++t) {
        float* y = a.y.row(s.row0 + t) + c0;
        for (int64_t ch = 0; ch < n; ++ch) {
          const float* w = a.weight.data() + (c0 + ch) * k;
          float acc = a.bias.empty() ? 0.0f : a.bias[static_cast<size_t>(c0 + ch)];
          for (int64_t m = 0; m < k; ++m) acc += w[m] * u[static_cast<size_t>((t + m) * n + ch)];
          y[ch] = a.silu ? acc / (1.0f + std::exp(-acc)) : acc;
        }
      }
    });
    // The new window: the last K - 1 rows of u, whole rows (all channels) written once.
    if (w_rows > 0) {
      std::vector<float> u_tail(static_cast<size_t>(w_rows * cn));  // [K - 1, C]
      for (int64_t r = 0; r < w_rows; ++r) {
        const int64_t src = s.rows + r;  // row of u
        float* dst = u_tail.data() + r * cn;
        if (src < w_rows) {
          kv_row_to_f32(a.window_dtype, window + src * cn * elem, cn, dst);
        } else {
          const float* x = a.x.row(s.row0 + src - w_rows);
          std::copy(x, x + cn, dst);
        }
      }
      for (int64_t r = 0; r < w_rows; ++r)
        kv_row_from_f32(a.window_dtype, u_tail.data() + r * cn, cn, window + r * cn * elem);
    }
  }
}

void gated_delta_rule(const Context& c, const GatedDeltaRuleArgs& a) {
  check_args(a);
  const int64_t nv = a.n_value_heads, dk = a.key_head_dim, dv = a.value_head_dim;
  const int64_t group = nv / a.n_key_heads;
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
  const auto n_seqs = static_cast<int64_t>(a.seqs.size());
  c.pool.parallel_for(n_seqs * nv, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> q(static_cast<size_t>(dk)), k(static_cast<size_t>(dk)), delta(static_cast<size_t>(dv));
    for (int64_t item = begin; item < end; ++item) {
      const DeltaSequence& s = a.seqs[static_cast<size_t>(item / nv)];
      const int64_t j = item % nv, i = j / group;
      float* st = s.state + j * dk * dv;  // [d_k, d_v]
      const float a_log = std::exp(a.a_log[static_cast<size_t>(j)]);
      for (int64_t t = s.row0; t < s.row0 + s.rows; ++t) {
        const float* qt = a.q.row(t) + i * dk;
        const float* kt = a.k.row(t) + i * dk;
        float qq = 0.0f, kk = 0.0f;
        for (int64_t r = 0; r < dk; ++r) {
          qq += qt[r] * qt[r];
          kk += kt[r] * kt[r];
        }
        const float qn = (a.l2_normalize ? 1.0f / std::sqrt(qq + 1e-6f) : 1.0f) * q_scale;
        const float kn = a.l2_normalize ? 1.0f / std::sqrt(kk + 1e-6f) : 1.0f;
        for (int64_t r = 0; r < dk; ++r) {
          q[static_cast<size_t>(r)] = qt[r] * qn;
          k[static_cast<size_t>(r)] = kt[r] * kn;
        }
        const float x = a.a.row(t)[j] + a.dt_bias[static_cast<size_t>(j)];
        const float decay = std::exp(-a_log * (x > 20.0f ? x : std::log1p(std::exp(x))));
        const float beta = a.beta.row(t)[j];
        const float* v = a.v.row(t) + j * dv;
        // Pass 1: S <- decay S, kv_mem = S^T k (into delta).
        std::fill(delta.begin(), delta.end(), 0.0f);
        for (int64_t r = 0; r < dk; ++r) {
          float* sr = st + r * dv;
          const float kr = k[static_cast<size_t>(r)];
          for (int64_t col = 0; col < dv; ++col) {
            sr[col] *= decay;
            delta[static_cast<size_t>(col)] += sr[col] * kr;
          }
        }
        for (int64_t col = 0; col < dv; ++col)
          delta[static_cast<size_t>(col)] = beta * (v[col] - delta[static_cast<size_t>(col)]);
        // Pass 2: S <- S + k delta^T, out = S^T q.
        float* out = a.out.row(t) + j * dv;
        std::fill(out, out + dv, 0.0f);
        for (int64_t r = 0; r < dk; ++r) {
          float* sr = st + r * dv;
          const float kr = k[static_cast<size_t>(r)], qr = q[static_cast<size_t>(r)];
          for (int64_t col = 0; col < dv; ++col) {
            sr[col] += kr * delta[static_cast<size_t>(col)];
            out[col] += sr[col] * qr;
          }
        }
      }
    }
  });
}

void gated_rms_norm(const Context& c, const GatedRmsNormArgs& a) {
  check_args(a);
  const int64_t n = a.x.cols;
  c.pool.parallel_for(
      a.x.rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)), [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const float* x = a.x.row(r);
          const float* z = a.z.row(r);
          float* y = a.y.row(r);
          const float inv = 1.0f / std::sqrt(c.k.dot(x, x, n) / static_cast<float>(n) + a.eps);
          for (int64_t col = 0; col < n; ++col)
            y[col] =
                a.weight[static_cast<size_t>(col)] * (x[col] * inv) * (z[col] / (1.0f + std::exp(-z[col])));
        }
      });
}

}  // namespace day0::cpu
