// Gated DeltaNet kernels (Qwen3-Next's linear attention) on every backend: the gated delta rule against
// a direct scalar reference written in the matrix form of the recurrence, S_t = e^g (I - b k k^T) S_{t-1}
// + b k v^T with explicit d_k x d_k matrices (not the kernels' fused update), the causal conv against a
// zero-padded direct convolution, and both carried across calls through their per-sequence state:
// one call over a whole sequence, the same sequence split in two calls, and two sequences batched in
// one call give the same outputs and states.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "day0/core/numeric.h"
#include "day0/ops/kernel_args.h"
#include "op_test_support.h"

namespace day0 {
namespace {

using test::backends_under_test;
using test::nmse;
using test::random_vector;
using test::reference_backend;

constexpr int64_t kNk = 2, kNv = 4, kDk = 8, kDv = 6;  // two value heads per key head

struct DeltaInputs {
  int64_t t = 0;
  std::vector<float> q, k, v, a, beta, a_log, dt_bias;  // [T, nk dk] x 2, [T, nv dv], [T, nv] x 2, [nv] x 2
  explicit DeltaInputs(int64_t rows, uint64_t seed) : t(rows) {
    q = random_vector(t * kNk * kDk, seed);
    k = random_vector(t * kNk * kDk, seed + 1);
    v = random_vector(t * kNv * kDv, seed + 2, 2.0f);
    a = random_vector(t * kNv, seed + 3, 2.0f);
    beta = random_vector(t * kNv, seed + 4);
    for (float& b : beta) b = 1.0f / (1.0f + std::exp(-3.0f * b));  // in (0, 1), as after the sigmoid
    a_log = random_vector(kNv, seed + 5);
    dt_bias = random_vector(kNv, seed + 6);
    a[0] = 25.0f;  // softplus' linear branch (x > 20) once
  }
  GatedDeltaRuleArgs args(int64_t row0, int64_t rows, std::span<const DeltaSequence> seqs, float* out) const {
    return {.q = ConstMatrix(q.data() + row0 * kNk * kDk, rows, kNk * kDk),
            .k = ConstMatrix(k.data() + row0 * kNk * kDk, rows, kNk * kDk),
            .v = ConstMatrix(v.data() + row0 * kNv * kDv, rows, kNv * kDv),
            .a = ConstMatrix(a.data() + row0 * kNv, rows, kNv),
            .beta = ConstMatrix(beta.data() + row0 * kNv, rows, kNv),
            .a_log = a_log,
            .dt_bias = dt_bias,
            .seqs = seqs,
            .out = Matrix(out, rows, kNv * kDv),
            .n_key_heads = kNk,
            .n_value_heads = kNv,
            .key_head_dim = kDk,
            .value_head_dim = kDv};
  }
};

// The recurrence in its matrix form, double precision, rows [row0, row0 + rows) from a zero state.
std::vector<float> direct_delta_rule(const DeltaInputs& in, int64_t row0, int64_t rows) {
  std::vector<float> out(static_cast<size_t>(rows * kNv * kDv));
  for (int64_t j = 0; j < kNv; ++j) {
    const int64_t i = j / (kNv / kNk);
    std::vector<double> s(kDk * kDv, 0.0);  // S [d_k, d_v]
    for (int64_t t = row0; t < row0 + rows; ++t) {
      std::vector<double> q(kDk), k(kDk);
      double qq = 0, kk = 0;
      for (int64_t r = 0; r < kDk; ++r) {
        q[r] = in.q[t * kNk * kDk + i * kDk + r];
        k[r] = in.k[t * kNk * kDk + i * kDk + r];
        qq += q[r] * q[r];
        kk += k[r] * k[r];
      }
      for (int64_t r = 0; r < kDk; ++r) {
        q[r] /= std::sqrt(qq + 1e-6) * std::sqrt(static_cast<double>(kDk));
        k[r] /= std::sqrt(kk + 1e-6);
      }
      const double x = static_cast<double>(in.a[t * kNv + j]) + in.dt_bias[j];
      const double softplus = x > 20 ? x : std::log(1.0 + std::exp(x));
      const double decay = std::exp(-std::exp(static_cast<double>(in.a_log[j])) * softplus);
      const double b = in.beta[t * kNv + j];
      // M = e^g (I - b k k^T), S <- M S + b k v^T
      std::vector<double> m(kDk * kDk), next(kDk * kDv, 0.0);
      for (int64_t r = 0; r < kDk; ++r)
        for (int64_t c = 0; c < kDk; ++c) m[r * kDk + c] = decay * ((r == c ? 1.0 : 0.0) - b * k[r] * k[c]);
      for (int64_t r = 0; r < kDk; ++r)
        for (int64_t c = 0; c < kDv; ++c) {
          double acc = b * k[r] * in.v[t * kNv * kDv + j * kDv + c];
          for (int64_t p = 0; p < kDk; ++p) acc += m[r * kDk + p] * s[p * kDv + c];
          next[r * kDv + c] = acc;
        }
      s = next;
      for (int64_t c = 0; c < kDv; ++c) {
        double o = 0;
        for (int64_t r = 0; r < kDk; ++r) o += s[r * kDv + c] * q[r];
        out[(t - row0) * kNv * kDv + j * kDv + c] = static_cast<float>(o);
      }
    }
  }
  return out;
}

std::vector<Backend*> all(std::unique_ptr<Backend>& ref, std::vector<test::NamedBackend>& others) {
  std::vector<Backend*> out = {ref.get()};
  for (auto& b : others) out.push_back(b.backend.get());
  return out;
}

TEST(GatedDeltaRule, MatchesTheMatrixFormOfTheRecurrence) {
  auto ref = reference_backend();
  auto others = backends_under_test();
  const DeltaInputs in(9, 100);
  const std::vector<float> want = direct_delta_rule(in, 0, 9);
  for (Backend* be : all(ref, others)) {
    std::vector<float> state(kNv * kDk * kDv, 0.0f), out(9 * kNv * kDv, -1.0f);
    const DeltaSequence seq{0, 9, state.data()};
    be->gated_delta_rule(in.args(0, 9, std::span(&seq, 1), out.data()));
    EXPECT_LT(nmse(out, want), 1e-10) << be->name();
    double energy = 0;
    for (float s : state) energy += static_cast<double>(s) * s;
    EXPECT_GT(energy, 0.0) << be->name() << ": the state was not updated";
  }
}

TEST(GatedDeltaRule, SplitAndBatchedSequencesKeepTheirOwnState) {
  auto ref = reference_backend();
  auto others = backends_under_test();
  const DeltaInputs in(9, 200);
  const int64_t n = kNv * kDv, state_n = kNv * kDk * kDv;
  for (Backend* be : all(ref, others)) {
    // Whole: rows 0..8 in one call.
    std::vector<float> whole_state(state_n, 0.0f), whole(9 * n);
    const DeltaSequence w{0, 9, whole_state.data()};
    be->gated_delta_rule(in.args(0, 9, std::span(&w, 1), whole.data()));
    // Split: rows 0..3, then 4..8 with the state carried.
    std::vector<float> split_state(state_n, 0.0f), split(9 * n);
    const DeltaSequence first{0, 4, split_state.data()}, second{0, 5, split_state.data()};
    be->gated_delta_rule(in.args(0, 4, std::span(&first, 1), split.data()));
    be->gated_delta_rule(in.args(4, 5, std::span(&second, 1), split.data() + 4 * n));
    EXPECT_LT(nmse(split, whole), 1e-12) << be->name();
    EXPECT_LT(nmse(split_state, whole_state), 1e-12) << be->name();
    // Batched: rows 0..3 are one sequence and rows 4..8 another (its own zero state) in one call.
    std::vector<float> sa(state_n, 0.0f), sb(state_n, 0.0f), batched(9 * n);
    const DeltaSequence two[] = {{0, 4, sa.data()}, {4, 5, sb.data()}};
    be->gated_delta_rule(in.args(0, 9, two, batched.data()));
    const std::vector<float> want_b = direct_delta_rule(in, 4, 5);
    EXPECT_LT(nmse(std::vector<float>(batched.begin(), batched.begin() + 4 * n),
                   std::vector<float>(whole.begin(), whole.begin() + 4 * n)),
              1e-12)
        << be->name();
    EXPECT_LT(nmse(std::vector<float>(batched.begin() + 4 * n, batched.end()), want_b), 1e-10) << be->name();
    // The second sequence alone is not the tail of the whole one (the state matters).
    EXPECT_GT(nmse(std::vector<float>(whole.begin() + 4 * n, whole.end()), want_b), 1e-4) << be->name();
  }
}

// Zero-padded causal depthwise conv with silu over rows [0, rows) of x [rows, c].
std::vector<float> direct_conv(const std::vector<float>& x, const std::vector<float>& w, int64_t rows,
                               int64_t c, int64_t k) {
  std::vector<float> y(static_cast<size_t>(rows * c));
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t ch = 0; ch < c; ++ch) {
      double acc = 0;
      for (int64_t m = 0; m < k; ++m) {
        const int64_t src = t - (k - 1) + m;
        if (src >= 0) acc += static_cast<double>(w[ch * k + m]) * x[src * c + ch];
      }
      y[t * c + ch] = static_cast<float>(acc / (1.0 + std::exp(-acc)));
    }
  return y;
}

TEST(CausalConv1d, MatchesTheDirectConvolutionAndCarriesItsWindow) {
  auto ref = reference_backend();
  auto others = backends_under_test();
  const int64_t c = 37, k = 4, rows = 7;
  std::vector<float> x = random_vector(rows * c, 300, 2.0f);
  for (float& v : x) v = bf16_to_f32(f32_to_bf16(v));  // exact in a BF16 window too
  const std::vector<float> w = random_vector(c * k, 301);
  const std::vector<float> want = direct_conv(x, w, rows, c, k);
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16}) {
    const auto window_bytes = static_cast<size_t>((k - 1) * c * kv_dtype_bytes(dtype));
    for (Backend* be : all(ref, others)) {
      auto args = [&](int64_t row0, int64_t n, std::span<const ConvSequence> seqs, float* y) {
        return CausalConv1dArgs{.x = ConstMatrix(x.data() + row0 * c, n, c),
                                .weight = w,
                                .seqs = seqs,
                                .y = Matrix(y, n, c),
                                .kernel = k,
                                .window_dtype = dtype};
      };
      std::vector<unsigned char> whole_window(window_bytes, 0), split_window(window_bytes, 0);
      std::vector<float> whole(rows * c), split(rows * c);
      const ConvSequence all_rows{0, rows, whole_window.data()};
      be->causal_conv1d(args(0, rows, std::span(&all_rows, 1), whole.data()));
      EXPECT_LT(nmse(whole, want), 1e-12) << be->name();
      // Two rows, then five: the window carries the last three inputs across.
      const ConvSequence a{0, 2, split_window.data()}, b{0, 5, split_window.data()};
      be->causal_conv1d(args(0, 2, std::span(&a, 1), split.data()));
      be->causal_conv1d(args(2, 5, std::span(&b, 1), split.data() + 2 * c));
      EXPECT_LT(nmse(split, want), 1e-12) << be->name() << " " << kv_dtype_name(dtype);
      EXPECT_EQ(split_window, whole_window) << be->name();
      // The window holds inputs 4, 5, 6 (oldest first).
      std::vector<float> held((k - 1) * c);
      kv_row_to_f32(dtype, whole_window.data(), (k - 1) * c, held.data());
      EXPECT_EQ(held, std::vector<float>(x.begin() + (rows - k + 1) * c, x.end())) << be->name();
      // Two sequences in one call: rows 0..1 and 2..6 each from a zero window.
      std::vector<unsigned char> wa(window_bytes, 0), wb(window_bytes, 0);
      std::vector<float> batched(rows * c);
      const ConvSequence two[] = {{0, 2, wa.data()}, {2, 5, wb.data()}};
      be->causal_conv1d(args(0, rows, two, batched.data()));
      const std::vector<float> tail(x.begin() + 2 * c, x.end());
      const std::vector<float> want_tail = direct_conv(tail, w, 5, c, k);
      EXPECT_LT(nmse(std::vector<float>(batched.begin() + 2 * c, batched.end()), want_tail), 1e-12)
          << be->name();
      EXPECT_LT(nmse(std::vector<float>(batched.begin(), batched.begin() + 2 * c),
                     std::vector<float>(want.begin(), want.begin() + 2 * c)),
                1e-12)
          << be->name();
    }
  }
}

TEST(GatedRmsNorm, IsTheNormTimesTheGainTimesSiluOfTheGate) {
  auto ref = reference_backend();
  auto others = backends_under_test();
  const int64_t r = 6, n = 16;
  const std::vector<float> x = random_vector(r * n, 400, 3.0f), z = random_vector(r * n, 401, 3.0f);
  const std::vector<float> w = random_vector(n, 402);
  std::vector<float> want(r * n);
  for (int64_t i = 0; i < r; ++i) {
    double sq = 0;
    for (int64_t c = 0; c < n; ++c) sq += static_cast<double>(x[i * n + c]) * x[i * n + c];
    const double inv = 1.0 / std::sqrt(sq / n + 1e-6);
    for (int64_t c = 0; c < n; ++c) {
      const double g = z[i * n + c];
      want[i * n + c] = static_cast<float>(w[c] * x[i * n + c] * inv * g / (1.0 + std::exp(-g)));
    }
  }
  for (Backend* be : all(ref, others)) {
    std::vector<float> y(r * n);
    be->gated_rms_norm({.x = ConstMatrix(x.data(), r, n),
                        .z = ConstMatrix(z.data(), r, n),
                        .weight = w,
                        .eps = 1e-6f,
                        .y = Matrix(y.data(), r, n)});
    EXPECT_LT(nmse(y, want), 1e-12) << be->name();
  }
}

}  // namespace
}  // namespace day0
