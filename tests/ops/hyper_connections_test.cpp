// Hyper-connections (mHC): hc_weights, hc_collapse and hc_expand against what transformers' own
// DeepseekV4HyperConnection / DeepseekV4DecoderLayer / DeepseekV4HyperHead computed
// (tests/data/ops/hyper_connections.json, written by tools/reference/make_op_fixtures.py), on every
// backend, and the cpu backend against the reference at odd sizes.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "day0/core/numeric.h"
#include "differential_harness.h"
#include "op_fixtures.h"

namespace day0::test {
namespace {

std::vector<float> rounded_to_bf16(std::vector<float> v) {
  for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
  return v;
}

struct HcOutputs {
  std::vector<float> mixes, pre, post, comb;
};

// mixes = rms(streams) fn^T (weightless rms_norm over all streams, float32 matmul), then hc_weights.
HcOutputs weights_of(Backend& be, const std::vector<float>& streams, int64_t tokens, int64_t width,
                     const std::vector<float>& fn, const std::vector<float>& base,
                     const std::vector<float>& scale, int64_t n, int64_t iters, float hc_eps, float rms_eps) {
  const auto n_mixes = static_cast<int64_t>(base.size());
  HcOutputs o;
  std::vector<float> normed(streams.size());
  be.rms_norm({.x = ConstMatrix(streams.data(), tokens, width),
               .eps = rms_eps,
               .y = Matrix(normed.data(), tokens, width)});
  o.mixes.resize(static_cast<size_t>(tokens * n_mixes));
  const WeightView w{.format = WeightFormat::kF32, .rows = n_mixes, .cols = width, .data = fn.data()};
  be.matmul(
      {.x = ConstMatrix(normed.data(), tokens, width), .w = w, .y = Matrix(o.mixes.data(), tokens, n_mixes)});
  const bool head = n_mixes == n;
  o.pre.resize(static_cast<size_t>(tokens * n));
  o.post.resize(head ? 0 : static_cast<size_t>(tokens * n));
  o.comb.resize(head ? 0 : static_cast<size_t>(tokens * n * n));
  be.hc_weights({.mixes = ConstMatrix(o.mixes.data(), tokens, n_mixes),
                 .base = base,
                 .scale = scale,
                 .n_streams = n,
                 .sinkhorn_iters = iters,
                 .eps = hc_eps,
                 .pre = Matrix(o.pre.data(), tokens, n),
                 .post = head ? Matrix{} : Matrix(o.post.data(), tokens, n),
                 .comb = head ? Matrix{} : Matrix(o.comb.data(), tokens, n * n)});
  be.synchronize();
  return o;
}

TEST(HyperConnections, MatchTransformersOnEveryBackend) {
  const nlohmann::json f = op_fixture("hyper_connections");
  const int64_t t = f.at("tokens"), h = f.at("hidden"), n = f.at("n_streams"), iters = f.at("sinkhorn_iters");
  const float hc_eps = f.at("hc_eps"), rms_eps = f.at("rms_eps");
  const auto streams = fixture_floats(f, "streams"), layer_output = fixture_floats(f, "layer_output");
  const auto fn = fixture_floats(f, "fn"), base = fixture_floats(f, "base"),
             scale = fixture_floats(f, "scale");
  ASSERT_EQ(static_cast<int64_t>(streams.size()), t * n * h);
  // float32 against double sums and twenty Sinkhorn rounds: a few float32 ulps of the range.
  constexpr double kTol = 1e-5;
  for (auto& nb : every_backend()) {
    Backend& be = *nb.backend;
    SCOPED_TRACE(nb.label);
    const HcOutputs w = weights_of(be, streams, t, n * h, fn, base, scale, n, iters, hc_eps, rms_eps);
    EXPECT_LT(error_of_range(w.mixes, fixture_floats(f, "mixes")), kTol);
    EXPECT_LT(error_of_range(w.post, fixture_floats(f, "post")), kTol);
    EXPECT_LT(error_of_range(w.comb, fixture_floats(f, "comb")), kTol);
    // comb is doubly stochastic up to eps: every column sums to 1 after the last normalisation.
    for (int64_t tok = 0; tok < t; ++tok) {
      for (int64_t k = 0; k < n; ++k) {
        double column = 0.0;
        for (int64_t j = 0; j < n; ++j) column += w.comb[static_cast<size_t>(tok * n * n + j * n + k)];
        EXPECT_NEAR(column, 1.0, 1e-5);
      }
    }
    std::vector<float> collapsed(static_cast<size_t>(t * h));
    be.hc_collapse({.streams = ConstMatrix(streams.data(), t, n * h),
                    .pre = ConstMatrix(w.pre.data(), t, n),
                    .out = Matrix(collapsed.data(), t, h),
                    .n_streams = n});
    std::vector<float> expanded(streams.size());
    be.hc_expand({.x = ConstMatrix(layer_output.data(), t, h),
                  .streams = ConstMatrix(streams.data(), t, n * h),
                  .post = ConstMatrix(w.post.data(), t, n),
                  .comb = ConstMatrix(w.comb.data(), t, n * n),
                  .out = Matrix(expanded.data(), t, n * h),
                  .n_streams = n});
    be.synchronize();
    EXPECT_LT(error_of_range(collapsed, fixture_floats(f, "pre_collapsed")), kTol);
    EXPECT_LT(error_of_range(expanded, fixture_floats(f, "expanded")), kTol);

    // The final collapse (DeepseekV4HyperHead): pre only, from its own projection.
    const HcOutputs head =
        weights_of(be, streams, t, n * h, fixture_floats(f, "head_fn"), fixture_floats(f, "head_base"),
                   fixture_floats(f, "head_scale"), n, iters, hc_eps, rms_eps);
    EXPECT_LT(error_of_range(head.mixes, fixture_floats(f, "head_mixes")), kTol);
    std::vector<float> head_out(static_cast<size_t>(t * h));
    be.hc_collapse({.streams = ConstMatrix(streams.data(), t, n * h),
                    .pre = ConstMatrix(head.pre.data(), t, n),
                    .out = Matrix(head_out.data(), t, h),
                    .n_streams = n});
    be.synchronize();
    EXPECT_LT(error_of_range(head_out, fixture_floats(f, "head_out")), kTol);
  }
}

// With bfloat16 streams transformers keeps the weights in float32, rounds the collapse once and every
// step of the expansion: the same chain here, from the streams rounded to BF16, lands on its BF16
// values (within one BF16 step where a float32 sum sits on a rounding boundary).
TEST(HyperConnections, Bf16StreamsRoundWhereTransformersRounds) {
  const nlohmann::json f = op_fixture("hyper_connections");
  const int64_t t = f.at("tokens"), h = f.at("hidden"), n = f.at("n_streams"), iters = f.at("sinkhorn_iters");
  const auto streams = rounded_to_bf16(fixture_floats(f, "streams"));
  const auto layer_output = rounded_to_bf16(fixture_floats(f, "layer_output"));
  for (auto& nb : every_backend()) {
    Backend& be = *nb.backend;
    SCOPED_TRACE(nb.label);
    const HcOutputs w = weights_of(be, streams, t, n * h, fixture_floats(f, "fn"), fixture_floats(f, "base"),
                                   fixture_floats(f, "scale"), n, iters, f.at("hc_eps"), f.at("rms_eps"));
    std::vector<float> collapsed(static_cast<size_t>(t * h));
    be.hc_collapse({.streams = ConstMatrix(streams.data(), t, n * h),
                    .pre = ConstMatrix(w.pre.data(), t, n),
                    .out = Matrix(collapsed.data(), t, h),
                    .n_streams = n});
    be.round_bf16({.x = ConstMatrix(collapsed.data(), t, h), .y = Matrix(collapsed.data(), t, h)});
    std::vector<float> expanded(streams.size());
    be.hc_expand({.x = ConstMatrix(layer_output.data(), t, h),
                  .streams = ConstMatrix(streams.data(), t, n * h),
                  .post = ConstMatrix(w.post.data(), t, n),
                  .comb = ConstMatrix(w.comb.data(), t, n * n),
                  .out = Matrix(expanded.data(), t, n * h),
                  .n_streams = n,
                  .bf16_steps = true});
    be.synchronize();
    const auto want_collapsed = fixture_floats(f, "collapsed_bf16"),
               want_expanded = fixture_floats(f, "expanded_bf16");
    const auto within_a_bf16_step = [](const std::vector<float>& got, const std::vector<float>& want) {
      int exact = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        exact += got[i] == want[i];
        EXPECT_LE(std::abs(got[i] - want[i]), std::abs(want[i]) * (1.0f / 128)) << "element " << i;
      }
      return exact;
    };
    // Most elements are bit-identical: the chain rounds where transformers does, not merely nearby.
    EXPECT_GE(within_a_bf16_step(collapsed, want_collapsed),
              static_cast<int>(want_collapsed.size()) * 9 / 10);
    EXPECT_GE(within_a_bf16_step(expanded, want_expanded), static_cast<int>(want_expanded.size()) * 9 / 10);
  }
}

// Differential: odd sizes, decode (T = 1) and prefill, 4 streams (the release's) and 3, the head.
TEST(Differential, HyperConnectionsEverySize) {
  Differential diff;
  struct Case {
    int64_t t, n, h, iters;
  };
  for (const Case c : {Case{1, 4, 37, 20}, Case{7, 4, 129, 20}, Case{5, 3, 16, 7}, Case{2, 2, 5, 1}}) {
    const std::string name = fmt::format("T={} n={} H={} iters={}", c.t, c.n, c.h, c.iters);
    const int64_t m = (2 + c.n) * c.n;
    GuardedMatrix mixes(c.t, m), streams(c.t, c.n * c.h), x(c.t, c.h);
    mixes.fill_random(1, 3.0f);
    streams.fill_random(2);
    x.fill_random(3);
    const auto base = random_vector(m, 4), scale = random_vector(3, 5, 2.0f);
    const auto head_base = random_vector(c.n, 6), head_scale = random_vector(1, 7, 2.0f);
    // [pre | post | comb] of every token, so one case compares all three.
    diff.check("hc_weights", name, c.t, m, kTolFloat, [&](Backend& be, GuardedMatrix& out) {
      const Matrix o = out.view();
      be.hc_weights({.mixes = mixes.cview(),
                     .base = base,
                     .scale = scale,
                     .n_streams = c.n,
                     .sinkhorn_iters = c.iters,
                     .pre = o.col_slice(0, c.n),
                     .post = o.col_slice(c.n, c.n),
                     .comb = o.col_slice(2 * c.n, c.n * c.n)});
      be.synchronize();
    });
    diff.check("hc_weights", name + " head", c.t, c.n, kTolFloat, [&](Backend& be, GuardedMatrix& out) {
      be.hc_weights({.mixes = mixes.cview().col_slice(0, c.n),
                     .base = head_base,
                     .scale = head_scale,
                     .n_streams = c.n,
                     .pre = out.view()});
      be.synchronize();
    });
    GuardedMatrix pre(c.t, c.n), post(c.t, c.n), comb(c.t, c.n * c.n);
    pre.fill_random(8);
    post.fill_random(9, 2.0f);
    comb.fill_random(10);
    diff.check("hc_collapse", name, c.t, c.h, kTolFloat, [&](Backend& be, GuardedMatrix& out) {
      be.hc_collapse({.streams = streams.cview(), .pre = pre.cview(), .out = out.view(), .n_streams = c.n});
      be.synchronize();
    });
    for (bool bf16 : {false, true}) {
      diff.check("hc_expand", name + (bf16 ? " bf16 steps" : ""), c.t, c.n * c.h,
                 bf16 ? kTolBf16Activations : kTolFloat, [&](Backend& be, GuardedMatrix& out) {
                   be.hc_expand({.x = x.cview(),
                                 .streams = streams.cview(),
                                 .post = post.cview(),
                                 .comb = comb.cview(),
                                 .out = out.view(),
                                 .n_streams = c.n,
                                 .bf16_steps = bf16});
                   be.synchronize();
                 });
    }
  }
  diff.finish();
}

}  // namespace
}  // namespace day0::test
