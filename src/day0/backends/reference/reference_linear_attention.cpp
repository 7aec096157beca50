// Reference Gated DeltaNet kernels (the linear-attention layers): the causal depthwise conv with its
// per-sequence window, the gated delta rule token by token over the per-sequence float32 state, and the
// gated output RMSNorm. Plain loops, double accumulation within a token; the state is float32 between
// tokens, as the contract (ops/kernel_args.h) stores it.
#include <vector>

#include "day0/backends/reference/reference_kernels.h"
#include "day0/ops/kernel_checks.h"
#include "day0/ops/kv_pages.h"

namespace day0::ref {

void causal_conv1d(const CausalConv1dArgs& a) {
  check_args(a);
  const int64_t c_n = a.x.cols, k = a.kernel, w_rows = k - 1;
  const auto elem = static_cast<int64_t>(kv_dtype_bytes(a.window_dtype));
  for (const ConvSequence& s : a.seqs) {
    if (s.rows == 0) continue;
    // u = [window rows ; the sequence's rows], [K - 1 + rows, C] float32.
    std::vector<float> u(static_cast<size_t>((w_rows + s.rows) * c_n));
    auto* window = static_cast<unsigned char*>(s.window);
    for (int64_t r = 0; r < w_rows; ++r)
      kv_row_to_f32(a.window_dtype, window + r * c_n * elem, c_n, u.data() + r * c_n);
    for (int64_t t = 0; t < s.rows; ++t) {
      const float* x = a.x.row(s.row0 + t);
      std::copy(x, x + c_n, u.data() + (w_rows + t) * c_n);
    }
    for (int64_t t = 0; t < s.rows; ++t) {
      float* y = a.y.row(s.row0 + t);
      for (int64_t c = 0; c < c_n; ++c) {
        double acc = a.bias.empty() ? 0.0 : a.bias[static_cast<size_t>(c)];
        for (int64_t m = 0; m < k; ++m)
          acc += static_cast<double>(a.weight[static_cast<size_t>(c * k + m)]) *
                 u[static_cast<size_t>((t + m) * c_n + c)];
        y[c] = static_cast<float>(a.silu ? silu_of(acc) : acc);
      }
    }
    for (int64_t r = 0; r < w_rows; ++r)
      kv_row_from_f32(a.window_dtype, u.data() + (s.rows + r) * c_n, c_n, window + r * c_n * elem);
  }
}

namespace {

// x / sqrt(|x|^2 + eps) * scale, in double, of n values.
std::vector<double> l2_normalized(const float* x, int64_t n, bool normalize, double scale) {
  double sq = 0.0;
  for (int64_t i = 0; i < n; ++i) sq += static_cast<double>(x[i]) * x[i];
  const double inv = normalize ? 1.0 / std::sqrt(sq + 1e-6) : 1.0;
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = x[i] * inv * scale;
  return out;
}

}  // namespace

void gated_delta_rule(const GatedDeltaRuleArgs& a) {
  check_args(a);
  const int64_t nv = a.n_value_heads, dk = a.key_head_dim, dv = a.value_head_dim;
  const int64_t group = nv / a.n_key_heads;
  const double q_scale = 1.0 / std::sqrt(static_cast<double>(dk));
  std::vector<double> kv_mem(static_cast<size_t>(dv)), delta(static_cast<size_t>(dv));
  for (const DeltaSequence& s : a.seqs) {
    for (int64_t t = s.row0; t < s.row0 + s.rows; ++t) {
      for (int64_t j = 0; j < nv; ++j) {
        const int64_t i = j / group;
        const std::vector<double> q = l2_normalized(a.q.row(t) + i * dk, dk, a.l2_normalize, q_scale);
        const std::vector<double> k = l2_normalized(a.k.row(t) + i * dk, dk, a.l2_normalize, 1.0);
        const float* v = a.v.row(t) + j * dv;
        const double gamma =
            -std::exp(static_cast<double>(a.a_log[static_cast<size_t>(j)])) *
            softplus_of(static_cast<double>(a.a.row(t)[j]) + a.dt_bias[static_cast<size_t>(j)]);
        const double decay = std::exp(gamma);
        const double beta = a.beta.row(t)[j];
        float* st = s.state + j * dk * dv;  // [d_k, d_v]
        // kv_mem = (decay S)^T k;  delta = beta (v - kv_mem)
        std::fill(kv_mem.begin(), kv_mem.end(), 0.0);
        for (int64_t r = 0; r < dk; ++r)
          for (int64_t c = 0; c < dv; ++c)
            kv_mem[static_cast<size_t>(c)] += decay * st[r * dv + c] * k[static_cast<size_t>(r)];
        for (int64_t c = 0; c < dv; ++c)
          delta[static_cast<size_t>(c)] = beta * (v[c] - kv_mem[static_cast<size_t>(c)]);
        // S <- decay S + k delta^T (stored float32); out = S^T q
        float* out = a.out.row(t) + j * dv;
        std::vector<double> o(static_cast<size_t>(dv), 0.0);
        for (int64_t r = 0; r < dk; ++r) {
          for (int64_t c = 0; c < dv; ++c) {
            const double updated =
                decay * st[r * dv + c] + k[static_cast<size_t>(r)] * delta[static_cast<size_t>(c)];
            st[r * dv + c] = static_cast<float>(updated);
            o[static_cast<size_t>(c)] += updated * q[static_cast<size_t>(r)];
          }
        }
        for (int64_t c = 0; c < dv; ++c) out[c] = static_cast<float>(o[static_cast<size_t>(c)]);
      }
    }
  }
}

void gated_rms_norm(const GatedRmsNormArgs& a) {
  check_args(a);
  for (int64_t r = 0; r < a.x.rows; ++r) {
    const float* x = a.x.row(r);
    const float* z = a.z.row(r);
    double sq = 0.0;
    for (int64_t c = 0; c < a.x.cols; ++c) sq += static_cast<double>(x[c]) * x[c];
    const double inv = 1.0 / std::sqrt(sq / static_cast<double>(a.x.cols) + a.eps);
    float* y = a.y.row(r);
    for (int64_t c = 0; c < a.x.cols; ++c)
      y[c] = static_cast<float>(a.weight[static_cast<size_t>(c)] * (x[c] * inv) * silu_of(z[c]));
  }
}

}  // namespace day0::ref
