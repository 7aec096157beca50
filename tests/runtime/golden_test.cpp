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
  for (const char* want :
       {"deepseek-v3", "kimi-k2", "qwen3-moe", "qwen2-moe", "mixtral", "glm-4.5", "gpt-oss", "llama3",
        "qwen3", "qwen2-yarn", "minimax-m2", "longcat-flash", "deepseek-v32"}) {
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

// DeepSeek-V3.2's golden selects index_topk = 4 keys per query while its prompts are 5 to 17 tokens
// long: the same weights attending to every causal key (dense MLA, the indexer's top-k made wider than
// any prompt) must miss transformers by far more than the sparse engine does, or the golden could not
// tell whether the selection is applied.
TEST(GoldenSparseAttention, DeepseekV32SelectionChangesTheLogits) {
  EngineOptions exact;
  exact.kv_dtype = KvDtype::kF32;
  auto run = open_golden("deepseek-v32", "cpu", exact);
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  ASSERT_TRUE(run->model.spec.indexer.has_value());
  ASSERT_EQ(run->model.spec.indexer->topk, 4);
  auto sparse = run_reference_prompts(*run->engine, run->reference, "sparse");
  ASSERT_TRUE(sparse.is_ok()) << sparse.status().to_string();
  ModelSpec dense_spec = run->model.spec;
  dense_spec.indexer->topk = 1 << 20;
  auto dense_engine = Engine::create(dense_spec, run->model.weights, *run->backend, exact);
  ASSERT_TRUE(dense_engine.is_ok()) << dense_engine.status().to_string();
  auto dense = run_reference_prompts(**dense_engine, run->reference, "dense");
  ASSERT_TRUE(dense.is_ok()) << dense.status().to_string();
  const AlignThresholds t = default_thresholds(ActivationPrecision::kF32);
  const AlignReport with_selection = compare_dumps(run->reference, *sparse, t);
  const AlignReport without = compare_dumps(run->reference, *dense, t);
  EXPECT_TRUE(with_selection.pass()) << align_report_text(with_selection);
  EXPECT_FALSE(without.pass()) << align_report_text(without);
  EXPECT_GT(without.logits.max_abs_err, 1e-2 * without.logits.logit_range) << align_report_text(without);
  EXPECT_GT(without.logits.max_abs_err, 100.0 * with_selection.logits.max_abs_err);
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
