// Static coverage of real model operator lists (catalog entries) and of a synthetic list with an op
// the registry does not know; the support matrix is generated from the registry.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "day0/graph/coverage.h"
#include "day0/model/catalog.h"
#include "day0/ops/op_names.h"
#include "day0/runtime/op_recording.h"

namespace day0 {
namespace {

Result<CoverageReport> coverage_of(const std::string& model, const std::string& backend,
                                   bool strict = false) {
  D0_ASSIGN_OR_RETURN(ModelSpec spec, catalog_model(model));
  D0_ASSIGN_OR_RETURN(OpList list, record_op_list(spec));
  BackendOptions opts;
  opts.n_threads = 1;
  opts.strict_ops = strict;
  return compute_coverage(model, list, backend, opts);
}

int count(const CoverageReport& r, Placement p) {
  return r.ops[static_cast<size_t>(p)];
}

TEST(Coverage, CpuRunsEveryOpOfEveryCatalogModelNatively) {
  for (const auto& entry : model_catalog()) {
    // A model the engine does not run yet has no operator list to place (coverage lists its missing blocks).
    auto spec = catalog_model(entry.name);
    ASSERT_TRUE(spec.is_ok()) << entry.name;
    if (!unimplemented_mechanisms(*spec).empty()) continue;
    auto report = coverage_of(entry.name, "cpu");
    ASSERT_TRUE(report.is_ok()) << entry.name << ": " << report.status().to_string();
    EXPECT_EQ(count(*report, Placement::kNative), static_cast<int>(report->rows.size())) << entry.name;
    EXPECT_FALSE(report->failed()) << entry.name;
    EXPECT_NEAR(report->flops[0] / report->total_flops, 1.0, 1e-12) << entry.name;
  }
}

TEST(Coverage, PartialBackendDecomposesAndFallsBack) {
  auto report = coverage_of("gpt-oss-120b", "partial");
  ASSERT_TRUE(report.is_ok()) << report.status().to_string();
  EXPECT_GT(count(*report, Placement::kDecomposed), 0);
  EXPECT_GT(count(*report, Placement::kHostFallback), 0);  // MXFP4 matmuls, the router
  EXPECT_EQ(count(*report, Placement::kMissing), 0);
  EXPECT_FALSE(report->failed());
  const double fallback_share =
      report->flops[static_cast<size_t>(Placement::kHostFallback)] / report->total_flops;
  EXPECT_GT(fallback_share, 0.3);  // the MXFP4 experts carry most of gpt-oss's FLOPs
  bool saw_norm = false, saw_experts = false;
  for (const auto& row : report->rows) {
    if (row.op.name == op::kRmsNorm) {
      saw_norm = true;
      EXPECT_EQ(row.resolution.placement, Placement::kDecomposed);
      EXPECT_THAT(row.resolution.pieces, ::testing::UnorderedElementsAre("mul", "row_mean", "rsqrt"));
    }
    if (row.op.name == op::kMoeExperts) {  // its MXFP4 matmul piece is hidden: no decomposition
      saw_experts = true;
      EXPECT_EQ(row.resolution.placement, Placement::kHostFallback);
    }
  }
  EXPECT_TRUE(saw_norm);
  EXPECT_TRUE(saw_experts);
  auto strict = coverage_of("gpt-oss-120b", "partial", true);
  ASSERT_TRUE(strict.is_ok());
  EXPECT_TRUE(strict->failed());
  EXPECT_THAT(coverage_text(*strict), ::testing::HasSubstr("verdict: FAIL"));
  const auto json = coverage_json(*report);
  EXPECT_EQ(json["backend"], "partial");
  EXPECT_EQ(json["ok"], true);
  EXPECT_EQ(json["ops"].size(), report->rows.size());
  EXPECT_NEAR(json["classes"]["native"]["flops_share"].get<double>() +
                  json["classes"]["decomposed"]["flops_share"].get<double>() +
                  json["classes"]["host fallback"]["flops_share"].get<double>(),
              1.0, 1e-9);
}

TEST(Coverage, UnknownOpIsMissingWithItsOrigin) {
  ModelSpec spec = catalog_model("deepseek-v3").value();
  OpList list = record_op_list(spec).value();
  OpSpec odd;
  odd.name = "hyper_connection";
  odd.label = "layers.mhc";
  odd.attrs = {{"streams", "4"}};
  odd.calls_per_token = 61;
  odd.flops_per_token = 1e6;
  list.ops.push_back(odd);
  BackendOptions opts;
  opts.n_threads = 1;
  auto report = compute_coverage("deepseek-v3+mhc", list, "cpu", opts);
  ASSERT_TRUE(report.is_ok());
  EXPECT_TRUE(report->failed());
  EXPECT_EQ(count(*report, Placement::kMissing), 1);
  const std::string text = coverage_text(*report);
  EXPECT_THAT(text, ::testing::HasSubstr("missing: hyper_connection"));
  EXPECT_THAT(text, ::testing::HasSubstr("layers.mhc streams=4"));
  EXPECT_FALSE(compute_coverage("x", list, "tpu", opts).is_ok());
}

TEST(Coverage, SupportMatrixComesFromTheRegistry) {
  const auto m = support_matrix_json();
  ASSERT_EQ(m["backends"].size(), 3u);
  bool saw_mxfp4_fallback = false;
  for (const auto& row : m["matrix"]) {
    EXPECT_EQ(row["backends"]["reference"], "native");
    EXPECT_EQ(row["backends"]["cpu"], "native");
    if (row["op"] == "matmul" && row["weights"] == "MXFP4") {
      EXPECT_EQ(row["backends"]["partial"], "host fallback");
      saw_mxfp4_fallback = true;
    }
  }
  EXPECT_TRUE(saw_mxfp4_fallback);
  EXPECT_THAT(support_matrix_text(), ::testing::HasSubstr("mla_attention"));
}

}  // namespace
}  // namespace day0
