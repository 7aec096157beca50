// Alignment metrics on hand-worked vectors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "day0/align/greedy_check.h"
#include "day0/align/layer_metrics.h"
#include "day0/align/logit_metrics.h"

namespace day0 {
namespace {

FloatMatrix matrix(int64_t rows, int64_t cols, std::vector<float> values) {
  FloatMatrix m(rows, cols);
  m.data = std::move(values);
  return m;
}

TEST(LogitMetrics, KlOfKnownDistributions) {
  // ref p = (1/2, 1/2); engine p = (3/4, 1/4).
  const std::vector<float> ref = {0.0f, 0.0f};
  const std::vector<float> eng = {static_cast<float>(std::log(3.0)), 0.0f};
  const auto m = compare_logit_row(ref, eng, 1);
  const double expected = 0.5 * std::log(0.5 / 0.75) + 0.5 * std::log(0.5 / 0.25);
  EXPECT_NEAR(m.kl, expected, 1e-7);
  EXPECT_NEAR(m.nll_ref, std::log(2.0), 1e-12);
  EXPECT_NEAR(m.nll_engine, std::log(4.0), 1e-6);
  EXPECT_NEAR(m.delta_p, 0.25 - 0.5, 1e-6);
  EXPECT_EQ(m.top1_ref, 0);  // tie: lower index first
  EXPECT_EQ(m.top1_engine, 0);
  EXPECT_NEAR(m.max_abs_err, std::log(3.0), 1e-6);
}

TEST(LogitMetrics, ShiftInvariantKlButNotAbsError) {
  const std::vector<float> ref = {1.0f, 2.0f, 3.0f, -1.0f};
  const std::vector<float> eng = {11.0f, 12.0f, 13.0f, 9.0f};
  const auto m = compare_logit_row(ref, eng, -1);
  EXPECT_NEAR(m.kl, 0.0, 1e-9);
  EXPECT_NEAR(m.max_abs_err, 10.0, 1e-9);
  EXPECT_NEAR(m.max_rel_err, 10.0, 1e-9);  // |10| / |-1|
  EXPECT_FALSE(m.has_next);
  EXPECT_DOUBLE_EQ(m.top5_overlap, 1.0);
}

TEST(LogitMetrics, CosineOfOrthogonalAndOpposite) {
  EXPECT_NEAR(compare_logit_row(std::vector<float>{1, 0}, std::vector<float>{0, 1}, -1).cosine, 0.0, 1e-12);
  EXPECT_NEAR(compare_logit_row(std::vector<float>{1, 2}, std::vector<float>{-1, -2}, -1).cosine, -1.0,
              1e-12);
}

TEST(LogitMetrics, Top5OverlapCountsCommonMembers) {
  const std::vector<float> ref = {9, 8, 7, 6, 5, 4, 3};
  const std::vector<float> eng = {9, 8, 7, 0, 0, 4, 3};  // top-5 {0,1,2,5,6}: shares 0,1,2
  EXPECT_NEAR(compare_logit_row(ref, eng, -1).top5_overlap, 3.0 / 5.0, 1e-12);
}

TEST(LogitMetrics, PerplexityOfUniformLogitsIsTheVocabulary) {
  LogitAccumulator acc;
  FloatMatrix ref(3, 4), eng(3, 4);  // all zeros: uniform over 4
  const std::vector<int64_t> ids = {0, 1, 2};
  acc.add_prompt(ref, eng, ids);
  const auto s = acc.summary();
  EXPECT_EQ(s.positions, 3);
  EXPECT_EQ(s.predicted_positions, 2);
  EXPECT_NEAR(s.ppl_ref, 4.0, 1e-9);
  EXPECT_NEAR(s.ppl_ratio, 1.0, 1e-12);
  EXPECT_DOUBLE_EQ(s.same_top1, 1.0);
  EXPECT_DOUBLE_EQ(s.kl_max, 0.0);
}

TEST(LogitMetrics, SummaryQuantilesAndTop1Share) {
  LogitAccumulator acc;
  // Row 0 agrees; row 1 engine flips the argmax.
  const auto ref = matrix(2, 2, {2, 0, 2, 0});
  const auto eng = matrix(2, 2, {2, 0, 0, 2});
  const std::vector<int64_t> ids = {0, 0};
  acc.add_prompt(ref, eng, ids);
  const auto s = acc.summary();
  EXPECT_DOUBLE_EQ(s.same_top1, 0.5);
  EXPECT_GT(s.kl_max, 1.0);
  EXPECT_EQ(s.worst_position, 1);
  EXPECT_NEAR(s.kl_median, s.kl_max / 2, 1e-12);  // median of {0, max}
  EXPECT_DOUBLE_EQ(s.logit_range, 2.0);
  // RMS delta-p over the single predicted position: p_ref(0) = p_eng(0).
  EXPECT_NEAR(s.rms_delta_p, 0.0, 1e-12);
}

TEST(LogitMetrics, Quantile) {
  EXPECT_DOUBLE_EQ(quantile({4, 1, 3, 2}, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(quantile({4, 1, 3, 2}, 1.0), 4.0);
  EXPECT_DOUBLE_EQ(quantile({7}, 0.99), 7.0);
  EXPECT_DOUBLE_EQ(quantile({}, 0.5), 0.0);
}

TEST(LayerMetrics, MsprobeColumns) {
  const auto ref = matrix(1, 4, {1, 2, 3, 4});
  const auto eng = matrix(1, 4, {1, 2.001f, 3, 4.1f});
  const auto c = compare_tensors(ref, eng);
  EXPECT_NEAR(c.max_abs_err, 0.1, 1e-6);
  EXPECT_NEAR(c.max_rel_err, 0.1 / 4, 1e-6);
  EXPECT_NEAR(c.euclidean, std::sqrt(0.001 * 0.001 + 0.1 * 0.1), 1e-6);
  EXPECT_DOUBLE_EQ(c.within_0p1, 3.0 / 4.0);  // 0.0005 rel err counts; 0.025 does not
  EXPECT_DOUBLE_EQ(c.within_0p5, 3.0 / 4.0);
  EXPECT_GT(c.cosine, 0.999);
  EXPECT_TRUE(c.finite);
}

TEST(LayerMetrics, PassRule) {
  const LayerRule rule;
  TensorCompare c;
  c.cosine = 0.95;
  c.max_abs_err = 0.0005;  // low cosine but tiny error: pass
  EXPECT_TRUE(layer_passes(c, rule));
  c.max_abs_err = 0.01;  // low cosine and visible error: fail
  EXPECT_FALSE(layer_passes(c, rule));
  c.cosine = 0.85;
  c.max_abs_err = 0.0;  // cosine under 0.9 always fails
  EXPECT_FALSE(layer_passes(c, rule));
  c.cosine = 0.9999;
  c.max_abs_err = 1.5;  // max abs error over 1 always fails
  EXPECT_FALSE(layer_passes(c, rule));
  c.max_abs_err = 0.5;
  EXPECT_TRUE(layer_passes(c, rule));
  c.finite = false;
  EXPECT_FALSE(layer_passes(c, rule));
}

TEST(LayerMetrics, FirstFailingLayerIsNamed) {
  LayerAccumulator acc{LayerRule{}};
  const auto ref = matrix(1, 3, {1, -2, 3});
  for (int layer = 0; layer < 4; ++layer) {
    auto eng = ref;
    if (layer >= 2) eng.data[1] = 5;  // from layer 2 on the engine drifts
    acc.add("layer " + std::to_string(layer), layer, ref, eng);
  }
  const auto report = acc.report();
  ASSERT_EQ(report.rows.size(), 4u);
  EXPECT_EQ(report.first_failing, 2);
  EXPECT_EQ(report.first_failing_name(), "layer 2");
  EXPECT_TRUE(report.rows[1].pass);
}

TEST(LayerMetrics, RowsMergeAcrossPrompts) {
  LayerAccumulator acc{LayerRule{}};
  acc.add("layer 0", 0, matrix(1, 2, {1, 1}), matrix(1, 2, {1, 1}));
  acc.add("layer 0", 0, matrix(2, 1, {1, 2}), matrix(2, 1, {1, 2.5f}));
  const auto report = acc.report();
  ASSERT_EQ(report.rows.size(), 1u);
  EXPECT_EQ(report.rows[0].compare.elements, 4);
  EXPECT_NEAR(report.rows[0].compare.max_abs_err, 0.5, 1e-9);
}

TEST(LayerMetrics, NonFiniteEngineFails) {
  const auto ref = matrix(1, 2, {1, 1});
  const auto eng = matrix(1, 2, {1, NAN});
  const auto c = compare_tensors(ref, eng);
  EXPECT_FALSE(c.finite);
  EXPECT_FALSE(layer_passes(c, LayerRule{}));
}

TEST(GreedyCheck, IdenticalContinuationsPass) {
  const std::vector<int64_t> toks = {3, 1, 2};
  FloatMatrix steps(3, 4);
  const auto g = compare_greedy(toks, steps, toks, steps, 5);
  EXPECT_TRUE(g.pass);
  EXPECT_EQ(g.first_divergence, -1);
  EXPECT_EQ(g.compared, 3);
}

TEST(GreedyCheck, DivergenceWithinTopNPassesOutsideFails) {
  const std::vector<int64_t> ref_toks = {0, 1};
  const std::vector<int64_t> eng_toks = {0, 2};
  const auto ref_steps = matrix(2, 4, {9, 0, 0, 0, /*step 1*/ 0, 5, 4.9f, -3});
  const auto eng_steps = matrix(2, 4, {9, 0, 0, 0, /*step 1*/ 0, 4.9f, 5, -3});
  auto g = compare_greedy(ref_toks, ref_steps, eng_toks, eng_steps, 2);
  EXPECT_EQ(g.first_divergence, 1);
  EXPECT_EQ(g.engine_token_rank_in_ref, 1);
  EXPECT_EQ(g.ref_token_rank_in_engine, 1);
  EXPECT_TRUE(g.pass);
  g = compare_greedy(ref_toks, ref_steps, eng_toks, eng_steps, 1);
  EXPECT_FALSE(g.pass);
}

TEST(GreedyCheck, RankBreaksTiesByIndex) {
  const std::vector<float> logits = {1, 3, 3, 0};
  EXPECT_EQ(rank_of(logits, 1), 0);
  EXPECT_EQ(rank_of(logits, 2), 1);
  EXPECT_EQ(rank_of(logits, 3), 3);
}

}  // namespace
}  // namespace day0
