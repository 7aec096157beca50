// rope on the trailing dims of each head (rotary_col0), interleaved, and its inverse by negated
// positions, against transformers' DeepSeek-V4 apply_rotary_pos_emb (tests/data/ops/rope_trailing.json,
// from tools/reference/make_op_fixtures.py), on every backend; cpu against the reference at odd sizes.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "differential_harness.h"
#include "op_fixtures.h"

namespace day0::test {
namespace {

TEST(RopeTrailingDims, MatchesTransformersRotationAndItsInverse) {
  const nlohmann::json f = op_fixture("rope_trailing");
  const int64_t heads = f.at("heads"), t = f.at("tokens"), d = f.at("head_dim"), r = f.at("rope_dim");
  const auto inv_freq = fixture_floats(f, "inv_freq");
  const auto positions = f.at("positions").get<std::vector<int64_t>>();
  std::vector<int64_t> negated;
  for (int64_t p : positions) negated.push_back(-p);
  for (auto& nb : every_backend()) {
    SCOPED_TRACE(nb.label);
    for (const bool inverse : {false, true}) {
      std::vector<float> x = fixture_floats(f, "x");
      nb.backend->rope({.x = Matrix(x.data(), t, heads * d),
                        .positions = inverse ? negated : positions,
                        .n_heads = heads,
                        .head_dim = d,
                        .rotary_dim = r,
                        .layout = RopeLayout::kInterleaved,
                        .inv_freq = inv_freq,
                        .rotary_col0 = d - r});
      nb.backend->synchronize();
      EXPECT_LT(error_of_range(x, fixture_floats(f, inverse ? "rotated_back" : "rotated")), 1e-6) << inverse;
      const auto original = fixture_floats(f, "x");
      for (int64_t row = 0; row < t * heads; ++row) {  // the nope dims pass through untouched
        for (int64_t c = 0; c < d - r; ++c)
          EXPECT_EQ(x[static_cast<size_t>(row * d + c)], original[static_cast<size_t>(row * d + c)]);
      }
    }
  }
}

TEST(Differential, RopeTrailingDims) {
  Differential diff;
  for (const RopeLayout layout : {RopeLayout::kInterleaved, RopeLayout::kHalfSplit}) {
    for (const int64_t t : {1, 5}) {
      const int64_t heads = 3, d = 40, r = 10;
      GuardedMatrix x(t, heads * d);
      x.fill_random(static_cast<uint64_t>(t));
      std::vector<int64_t> positions;
      for (int64_t i = 0; i < t; ++i) positions.push_back(1000 - 7 * i);
      std::vector<float> inv_freq;
      for (int64_t i = 0; i < r / 2; ++i)
        inv_freq.push_back(std::pow(10000.0f, -2.0f * static_cast<float>(i) / r));
      const std::string name =
          fmt::format("T={} {}", t, layout == RopeLayout::kInterleaved ? "interleaved" : "half");
      diff.check("rope", name + " trailing", t, heads * d, kTolFloat, [&](Backend& be, GuardedMatrix& out) {
        const std::vector<float> v = x.values();
        for (int64_t i = 0; i < t; ++i)
          std::copy(v.begin() + i * heads * d, v.begin() + (i + 1) * heads * d, out.view().row(i));
        be.rope({.x = out.view(),
                 .positions = positions,
                 .n_heads = heads,
                 .head_dim = d,
                 .rotary_dim = r,
                 .layout = layout,
                 .inv_freq = inv_freq,
                 .rotary_col0 = d - r});
        be.synchronize();
      });
    }
  }
  diff.finish();
}

}  // namespace
}  // namespace day0::test
