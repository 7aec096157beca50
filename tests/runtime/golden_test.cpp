// Engine logits on the golden miniatures of every family against Hugging Face transformers (float32
// reference dumps): F32 activations and an F32 KV cache on the cpu backend within 1e-4 of the logit
// range with identical argmax; BF16 activations (with the default BF16 KV cache) within the
// documented BF16 thresholds.
#include <gtest/gtest.h>

#include "day0/align/align_runner.h"
#include "golden.h"

namespace day0::testing {
namespace {

class Golden : public ::testing::TestWithParam<std::string> {};

TEST(GoldenSet, EveryFamilyOfTheIssueHasAGolden) {
  const auto names = golden_names();
  for (const char* want : {"deepseek-v3", "kimi-k2", "qwen3-moe", "qwen2-moe", "mixtral", "glm-4.5",
                           "gpt-oss", "llama3", "qwen3", "qwen2-yarn", "minimax-m2", "longcat-flash"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << "missing golden " << want;
  }
}

TEST_P(Golden, F32LogitsMatchTransformers) {
  EngineOptions exact;
  exact.kv_dtype = KvDtype::kF32;  // the engine's default (BF16) would round every cached key
  auto run = open_golden(GetParam(), "cpu", exact);
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  auto dumped = run_reference_prompts(*run->engine, run->reference, "test");
  ASSERT_TRUE(dumped.is_ok()) << dumped.status().to_string();
  const ReferenceDump& mine = *dumped;
  const AlignReport r = compare_dumps(run->reference, mine, default_thresholds(ActivationPrecision::kF32));
  EXPECT_LE(r.logits.max_abs_err, 1e-4 * r.logits.logit_range) << align_report_text(r);
  EXPECT_DOUBLE_EQ(r.logits.same_top1, 1.0);
  EXPECT_TRUE(r.pass()) << align_report_text(r);
  for (const auto& g : r.greedy) EXPECT_EQ(g.first_divergence, -1) << align_report_text(r);
  ASSERT_FALSE(r.layers.rows.empty());
}

TEST_P(Golden, Bf16WithinDocumentedThresholds) {
  EngineOptions o;
  o.precision = ActivationPrecision::kBF16;
  auto run = open_golden(GetParam(), "cpu", o);
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  auto dumped = run_reference_prompts(*run->engine, run->reference, "test");
  ASSERT_TRUE(dumped.is_ok()) << dumped.status().to_string();
  const ReferenceDump& mine = *dumped;
  const AlignThresholds t = default_thresholds(ActivationPrecision::kBF16);
  const AlignReport r = compare_dumps(run->reference, mine, t);
  EXPECT_TRUE(r.pass()) << align_report_text(r);
  // Without routing there are no near-ties to flip: dense models stay within the issue's KL 1e-3.
  if (run->model.spec.moe == std::nullopt) {
    EXPECT_LE(r.logits.kl_mean, 1e-3) << align_report_text(r);
  }
  // BF16 must actually change something: the F32 engine is far closer.
  EXPECT_GT(r.logits.max_abs_err, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Families, Golden, ::testing::ValuesIn(golden_names()), [](const auto& param_info) {
  std::string n = param_info.param;
  for (char& ch : n) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return n;
});
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Golden);

}  // namespace
}  // namespace day0::testing
