// grouped_matmul (DeepSeek-V4's grouped low-rank output projection, o_a_proj) against what
// transformers' DeepseekV4GroupedLinear returned (tests/data/ops/grouped_linear.json, from
// tools/reference/make_op_fixtures.py), and every backend against the reference in every weight format.
#include <string>
#include <vector>

#include <fmt/format.h>

#include "day0/graph/decompositions.h"
#include "differential_harness.h"
#include "op_fixtures.h"

namespace day0::test {
namespace {

TEST(GroupedMatmul, MatchesTransformersGroupedLinear) {
  const nlohmann::json f = op_fixture("grouped_linear");
  const int64_t t = f.at("tokens"), g = f.at("groups"), k = f.at("in_per_group"), n = f.at("out_per_group");
  const auto x = fixture_floats(f, "x"), weight = fixture_floats(f, "weight");
  for (auto& nb : every_backend()) {
    SCOPED_TRACE(nb.label);
    std::vector<float> y(static_cast<size_t>(t * g * n));
    nb.backend->grouped_matmul(
        {.x = ConstMatrix(x.data(), t, g * k),
         .w = {.format = WeightFormat::kF32, .rows = g * n, .cols = k, .data = weight.data()},
         .y = Matrix(y.data(), t, g * n),
         .groups = g});
    nb.backend->synchronize();
    EXPECT_LT(error_of_range(y, fixture_floats(f, "y")), 1e-6);
  }
}

// Groups of 128 rows (an FP8 block row each) in every weight format, decode and prefill, a single group
// over an odd column count (not for MXFP4, whose rows are whole blocks of 32).
TEST(Differential, GroupedMatmulEveryFormat) {
  Differential diff;
  struct Case {
    int64_t t, groups, k, n;
  };
  for (WeightFormat format : kAllWeightFormats) {
    for (const Case c : {Case{1, 2, 64, 128}, Case{5, 3, 96, 128}, Case{9, 1, 33, 256}}) {
      if (!format_fits(format, c.k)) continue;
      const TestWeight w = random_weight(format, c.groups * c.n, c.k, 11, 0.5f);
      GuardedMatrix x(c.t, c.groups * c.k);
      x.fill_random(12);
      const std::string name =
          fmt::format("{} T={} G={} K/G={} N/G={}", weight_format_name(format), c.t, c.groups, c.k, c.n);
      for (bool exact : {true, false}) {
        diff.check(
            "grouped_matmul", name + (exact ? "" : " inexact"), c.t, c.groups * c.n,
            exact ? kTolFloat : matmul_tolerance(format), [&](Backend& be, GuardedMatrix& out) {
              be.grouped_matmul(
                  {.x = x.cview(), .w = w.view(), .y = out.view(), .groups = c.groups, .exact = exact});
              be.synchronize();
            });
      }
    }
  }
  diff.finish();
}

}  // namespace
}  // namespace day0::test
