// Mamba-2's scan (ssm_scan) on every backend and SIMD level: against a direct double implementation of the
// chunked SSD form transformers runs for prefill (intra-chunk "attention" plus the states carried between
// chunks), for several chunk sizes over prompts of three chunks and more, from a zero and a carried
// state; across calls (prefill then token-by-token decode equals one call) and batched sequences; over a
// grid of shapes through the differential harness. Also the conv's bias (Mamba-2's conv1d.bias).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "day0/ops/kernel_args.h"
#include "differential_harness.h"
#include "op_test_support.h"

namespace day0 {
namespace {

using test::backends_under_test;
using test::nmse;
using test::random_vector;
using test::reference_backend;

struct Shape {
  int64_t heads, head_dim, groups, state;
};

struct ScanInputs {
  Shape s;
  int64_t t = 0;
  std::vector<float> x, dt, b, c, a_log, d;  // [T, H P], [T, H], [T, G N] x 2, [H] x 2
  ScanInputs(Shape shape, int64_t rows, uint64_t seed) : s(shape), t(rows) {
    x = random_vector(t * s.heads * s.head_dim, seed, 2.0f);
    dt = random_vector(t * s.heads, seed + 1);
    for (float& v : dt) v = std::log1p(std::exp(2.0f * v));  // positive, as after softplus
    b = random_vector(t * s.groups * s.state, seed + 2);
    c = random_vector(t * s.groups * s.state, seed + 3);
    a_log = random_vector(s.heads, seed + 4);
    d = random_vector(s.heads, seed + 5);
  }
  int64_t width() const { return s.heads * s.head_dim; }
  int64_t state_floats() const { return s.heads * s.head_dim * s.state; }
  SsmScanArgs args(int64_t row0, int64_t rows, std::span<const DeltaSequence> seqs, Matrix y,
                   bool skip = true) const {
    const int64_t gn = s.groups * s.state;
    return {.x = ConstMatrix(x.data() + row0 * width(), rows, width()),
            .dt = ConstMatrix(dt.data() + row0 * s.heads, rows, s.heads),
            .b = ConstMatrix(b.data() + row0 * gn, rows, gn),
            .c = ConstMatrix(c.data() + row0 * gn, rows, gn),
            .a_log = a_log,
            .d = skip ? std::span<const float>(d) : std::span<const float>(),
            .seqs = seqs,
            .y = y,
            .n_heads = s.heads,
            .head_dim = s.head_dim,
            .n_groups = s.groups,
            .state_size = s.state};
  }
};

// The chunked SSD form in double over rows [0, rows), from `state` ([H, P, N], updated to the final
// state). Within a chunk, with cumulative log-decays L_l = sum_{i <= l} dt_i A:
//   y_l = sum_{s <= l} e^{L_l - L_s} (c_l . b_s) dt_s x_s  +  e^{L_l} S_0 c_l  +  D x_l
// and the chunk's end state S = e^{L_last} S_0 + sum_l e^{L_last - L_l} dt_l x_l b_l^T.
std::vector<float> chunked_ssd(const ScanInputs& in, int64_t rows, int64_t chunk,
                               std::vector<double>& state) {
  const Shape s = in.s;
  const int64_t gn = s.groups * s.state;
  std::vector<float> y(static_cast<size_t>(rows * in.width()));
  for (int64_t h = 0; h < s.heads; ++h) {
    const int64_t g = h / (s.heads / s.groups);
    const double a = -std::exp(static_cast<double>(in.a_log[h]));
    double* st = state.data() + h * s.head_dim * s.state;
    for (int64_t c0 = 0; c0 < rows; c0 += chunk) {
      const int64_t len = std::min(chunk, rows - c0);
      std::vector<double> cum(static_cast<size_t>(len));
      double run = 0;
      for (int64_t l = 0; l < len; ++l) cum[l] = run += in.dt[(c0 + l) * s.heads + h] * a;
      auto bv = [&](int64_t r) { return in.b.data() + r * gn + g * s.state; };
      auto cv = [&](int64_t r) { return in.c.data() + r * gn + g * s.state; };
      auto xv = [&](int64_t r) { return in.x.data() + r * in.width() + h * s.head_dim; };
      for (int64_t l = 0; l < len; ++l) {
        for (int64_t p = 0; p < s.head_dim; ++p) {
          double acc = 0;
          for (int64_t src = 0; src <= l; ++src) {
            double cb = 0;
            for (int64_t n = 0; n < s.state; ++n) cb += static_cast<double>(cv(c0 + l)[n]) * bv(c0 + src)[n];
            acc += std::exp(cum[l] - cum[src]) * cb * in.dt[(c0 + src) * s.heads + h] * xv(c0 + src)[p];
          }
          double off = 0;
          for (int64_t n = 0; n < s.state; ++n) off += st[p * s.state + n] * cv(c0 + l)[n];
          acc += std::exp(cum[l]) * off + static_cast<double>(in.d[h]) * xv(c0 + l)[p];
          y[(c0 + l) * in.width() + h * s.head_dim + p] = static_cast<float>(acc);
        }
      }
      for (int64_t p = 0; p < s.head_dim; ++p)
        for (int64_t n = 0; n < s.state; ++n) {
          double next = std::exp(cum[len - 1]) * st[p * s.state + n];
          for (int64_t l = 0; l < len; ++l)
            next += std::exp(cum[len - 1] - cum[l]) * in.dt[(c0 + l) * s.heads + h] * xv(c0 + l)[p] *
                    bv(c0 + l)[n];
          st[p * s.state + n] = next;
        }
    }
  }
  return y;
}

std::vector<Backend*> all(std::unique_ptr<Backend>& ref, std::vector<test::NamedBackend>& others) {
  std::vector<Backend*> out = {ref.get()};
  for (auto& b : others) out.push_back(b.backend.get());
  return out;
}

// Six heads in two groups, odd head_dim, and state sizes off and on the vector widths.
constexpr Shape kShapes[] = {{6, 5, 2, 19}, {4, 8, 1, 64}, {3, 3, 3, 16}};

TEST(SsmScan, MatchesTheChunkedSsdFormOverThreeChunksAndMore) {
  auto ref = reference_backend();
  auto others = backends_under_test();
  for (const Shape& shape : kShapes) {
    const int64_t rows = 13;  // chunk 4: three whole chunks and one of a single token
    const ScanInputs in(shape, rows, 100 + shape.state);
    for (int64_t chunk : {4, 5, 16}) {
      std::vector<double> ssd_state(static_cast<size_t>(in.state_floats()), 0.0);
      const std::vector<float> want = chunked_ssd(in, rows, chunk, ssd_state);
      const std::vector<float> want_state(ssd_state.begin(), ssd_state.end());
      for (Backend* be : all(ref, others)) {
        std::vector<float> state(static_cast<size_t>(in.state_floats()), 0.0f), y(rows * in.width(), -1.0f);
        const DeltaSequence seq{0, rows, state.data()};
        be->ssm_scan(in.args(0, rows, std::span(&seq, 1), Matrix(y.data(), rows, in.width())));
        EXPECT_LT(nmse(y, want), 1e-10) << be->name() << " chunk " << chunk << " state " << shape.state;
        EXPECT_LT(nmse(state, want_state), 1e-10) << be->name() << " chunk " << chunk;
      }
    }
  }
}

TEST(SsmScan, ACarriedStateEntersEveryChunkAsTheChunkedFormCarriesIt) {
  auto ref = reference_backend();
  auto others = backends_under_test();
  const Shape shape = kShapes[0];
  const ScanInputs in(shape, 11, 300);
  const std::vector<float> start = random_vector(in.state_floats(), 301);
  std::vector<double> ssd_state(start.begin(), start.end());
  const std::vector<float> want = chunked_ssd(in, 11, 3, ssd_state);
  std::vector<double> zero(ssd_state.size(), 0.0);
  const std::vector<float> from_zero = chunked_ssd(in, 11, 3, zero);
  ASSERT_GT(nmse(from_zero, want), 1e-4) << "the carried state must change the outputs";
  for (Backend* be : all(ref, others)) {
    std::vector<float> state = start, y(11 * in.width());
    const DeltaSequence seq{0, 11, state.data()};
    be->ssm_scan(in.args(0, 11, std::span(&seq, 1), Matrix(y.data(), 11, in.width())));
    EXPECT_LT(nmse(y, want), 1e-10) << be->name();
    EXPECT_LT(nmse(state, std::vector<float>(ssd_state.begin(), ssd_state.end())), 1e-10) << be->name();
  }
}

TEST(SsmScan, PrefillThenDecodeAndBatchedSequencesKeepTheirOwnState) {
  auto ref = reference_backend();
  auto others = backends_under_test();
  const Shape shape = kShapes[0];
  const int64_t rows = 12;
  const ScanInputs in(shape, rows, 400);
  const int64_t w = in.width();
  for (Backend* be : all(ref, others)) {
    std::vector<float> whole_state(static_cast<size_t>(in.state_floats()), 0.0f), whole(rows * w);
    const DeltaSequence all_rows{0, rows, whole_state.data()};
    be->ssm_scan(in.args(0, rows, std::span(&all_rows, 1), Matrix(whole.data(), rows, w)));
    // Prefill of 9 rows, then three decode steps of one row, the state carried.
    std::vector<float> state(static_cast<size_t>(in.state_floats()), 0.0f), split(rows * w);
    const DeltaSequence prefill{0, 9, state.data()};
    be->ssm_scan(in.args(0, 9, std::span(&prefill, 1), Matrix(split.data(), 9, w)));
    for (int64_t r = 9; r < rows; ++r) {
      const DeltaSequence step{0, 1, state.data()};
      be->ssm_scan(in.args(r, 1, std::span(&step, 1), Matrix(split.data() + r * w, 1, w)));
    }
    EXPECT_LT(nmse(split, whole), 1e-12) << be->name();
    EXPECT_LT(nmse(state, whole_state), 1e-12) << be->name();
    // Rows 0..4 and 5..11 as two sequences of one call, each from its own zero state.
    std::vector<float> sa(whole_state.size(), 0.0f), sb(whole_state.size(), 0.0f), batched(rows * w);
    const DeltaSequence two[] = {{0, 5, sa.data()}, {5, 7, sb.data()}};
    be->ssm_scan(in.args(0, rows, two, Matrix(batched.data(), rows, w)));
    std::vector<float> alone_state(whole_state.size(), 0.0f), alone(7 * w);
    const DeltaSequence second{0, 7, alone_state.data()};
    be->ssm_scan(in.args(5, 7, std::span(&second, 1), Matrix(alone.data(), 7, w)));
    EXPECT_LT(nmse(std::vector<float>(batched.begin(), batched.begin() + 5 * w),
                   std::vector<float>(whole.begin(), whole.begin() + 5 * w)),
              1e-12)
        << be->name();
    EXPECT_LT(nmse(std::vector<float>(batched.begin() + 5 * w, batched.end()), alone), 1e-12) << be->name();
    EXPECT_GT(nmse(std::vector<float>(whole.begin() + 5 * w, whole.end()), alone), 1e-4)
        << be->name() << ": the second sequence alone is not the tail of the whole one";
  }
}

TEST(SsmScan, DifferentialOverShapesDecodeAndPrefill) {
  test::Differential diff;
  uint64_t seed = 500;
  for (const Shape& shape :
       {Shape{6, 5, 2, 19}, Shape{8, 16, 4, 128}, Shape{2, 7, 1, 33}, Shape{5, 4, 5, 8}}) {
    for (int64_t rows : {1, 5, 37}) {
      const ScanInputs in(shape, rows, ++seed);
      const std::vector<float> start = random_vector(in.state_floats(), ++seed);
      for (bool skip : {true, false}) {
        const std::string name = fmt::format("H={} P={} G={} N={} T={}{}", shape.heads, shape.head_dim,
                                             shape.groups, shape.state, rows, skip ? "" : " no D");
        diff.check("ssm_scan", name, rows, in.width(), test::kTolFloat,
                   [&](Backend& be, test::GuardedMatrix& out) {
                     std::vector<float> state = start;
                     const DeltaSequence seq{0, rows, state.data()};
                     be.ssm_scan(in.args(0, rows, std::span(&seq, 1), out.view(), skip));
                   });
      }
    }
  }
  EXPECT_GT(diff.finish(), 0);
}

TEST(CausalConv1d, AddsItsBiasBeforeTheActivation) {
  auto ref = reference_backend();
  auto others = backends_under_test();
  const int64_t c = 21, k = 4, rows = 6;
  const std::vector<float> x = random_vector(rows * c, 600, 2.0f), w = random_vector(c * k, 601),
                           bias = random_vector(c, 602);
  std::vector<float> want(rows * c);
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t ch = 0; ch < c; ++ch) {
      double acc = bias[ch];
      for (int64_t m = 0; m < k; ++m) {
        const int64_t src = t - (k - 1) + m;
        if (src >= 0) acc += static_cast<double>(w[ch * k + m]) * x[src * c + ch];
      }
      want[t * c + ch] = static_cast<float>(acc / (1.0 + std::exp(-acc)));
    }
  for (Backend* be : all(ref, others)) {
    std::vector<float> window((k - 1) * c, 0.0f), y(rows * c);
    const ConvSequence seq{0, rows, window.data()};
    be->causal_conv1d({.x = ConstMatrix(x.data(), rows, c),
                       .weight = w,
                       .bias = bias,
                       .seqs = std::span(&seq, 1),
                       .y = Matrix(y.data(), rows, c),
                       .kernel = k});
    EXPECT_LT(nmse(y, want), 1e-12) << be->name();
  }
}

}  // namespace
}  // namespace day0
