// Engine logits on the golden miniatures of every family against Hugging Face transformers (float32
// reference dumps): F32 activations and an F32 KV cache on the cpu backend within 1e-4 of the logit
// range with identical argmax; BF16 activations (with the default BF16 KV cache) within the
// documented BF16 thresholds.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "day0/align/align_runner.h"
#include "day0/model/model_memory.h"
#include "golden.h"

namespace day0::testing {
namespace {

class Golden : public ::testing::TestWithParam<std::string> {};

TEST(GoldenSet, EveryFamilyOfTheIssueHasAGolden) {
  const auto names = golden_names();
  for (const char* want : {"deepseek-v3",      "kimi-k2",          "qwen3-moe",
                           "qwen2-moe",        "mixtral",          "glm-4.5",
                           "gpt-oss",          "llama3",           "qwen3",
                           "qwen2-yarn",       "minimax-m2",       "longcat-flash",
                           "deepseek-v32",     "qwen3-next",       "seed-oss",
                           "ernie-4.5-moe",    "solar-open",       "glm-4.7-flash",
                           "kimi-k2.5",        "mistral4",         "hy3",
                           "trinity",          "laguna",           "mimo-v2-flash",
                           "exaone-3.5",       "sarvam-30b",       "param2-17b",
                           "minimax-m3",       "cohere2-moe",      "glm-5",
                           "glm-5-indexshare", "k-exaone",         "qwen3.5",
                           "qwen3.5-moe",      "nemotron-h",       "nemotron-3-super",
                           "olmo-hybrid",      "olmo-hybrid-nope", "gemma4",
                           "gemma4-31b",       "gemma4-moe",       "deepseek-v4"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << "missing golden " << want;
  }
}

// A golden whose mechanisms the engine does not run yet is refused by name at load, before any tensor is
// looked for (never a missing-tensor error). None is pending today (DeepSeek-V4's was the last): a family
// committed ahead of its blocks lands here.
TEST(GoldenSet, PendingGoldensAreRefusedNamingTheirMechanisms) {
  const auto pending = pending_golden_names();
  EXPECT_EQ(std::find(pending.begin(), pending.end(), "deepseek-v4"), pending.end());
  for (const std::string& name : pending) {
    SCOPED_TRACE(name);
    auto run = open_golden(name);
    ASSERT_FALSE(run.is_ok());
    EXPECT_EQ(run.status().code(), StatusCode::kUnsupported) << run.status().to_string();
    EXPECT_NE(run.status().message().find("not implemented"), std::string::npos) << run.status().to_string();
    EXPECT_EQ(run.status().message().find("no tensor"), std::string::npos) << run.status().to_string();
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
  // Without routing there are no near-ties to flip: dense models stay within the issue's KL 1e-3. A Gated
  // DeltaNet carries BF16 rounding along the sequence: transformers' own BF16 run of the dense Qwen3.5
  // miniature stays 2.9e-3 to 6.5e-3 from its F32 run (every prompt seed tried), so those get 1e-2.
  if (run->model.spec.moe == std::nullopt) {
    EXPECT_LE(r.logits.kl_mean, run->model.spec.linear_attention ? 1e-2 : 1e-3) << align_report_text(r);
  }
  // BF16 must actually change something: the F32 engine is far closer.
  EXPECT_GT(r.logits.max_abs_err, 1e-5);
}

// A sparse-attention golden must see its selection applied: the same weights attending to every causal
// key (`widen` makes the selection wider than any prompt) must miss transformers by far more than the
// sparse engine does.
void expect_selection_changes_the_logits(const std::string& golden,
                                         const std::function<void(ModelSpec&)>& widen) {
  EngineOptions exact;
  exact.kv_dtype = KvDtype::kF32;
  auto run = open_golden(golden, "cpu", exact);
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  auto sparse = run_reference_prompts(*run->engine, run->reference, "sparse");
  ASSERT_TRUE(sparse.is_ok()) << sparse.status().to_string();
  ModelSpec dense_spec = run->model.spec;
  widen(dense_spec);
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

// DeepSeek-V3.2's golden selects index_topk = 4 keys per query while its prompts are 5 to 17 tokens long.
TEST(GoldenSparseAttention, DeepseekV32SelectionChangesTheLogits) {
  expect_selection_changes_the_logits("deepseek-v32", [](ModelSpec& s) {
    ASSERT_TRUE(s.indexer.has_value());
    ASSERT_EQ(s.indexer->topk, 4);
    s.indexer->topk = 1 << 20;
  });
}

// MiniMax-M3's golden keeps index_topk_blocks = 3 blocks of 4 keys per query head group while its prompts
// and their continuations reach 30 tokens (8 blocks).
TEST(GoldenSparseAttention, MinimaxM3BlockSelectionChangesTheLogits) {
  expect_selection_changes_the_logits("minimax-m3", [](ModelSpec& s) {
    ASSERT_TRUE(s.block_indexer.has_value());
    ASSERT_EQ(s.block_indexer->topk_blocks, 3);
    s.block_indexer->topk_blocks = 1 << 20;
  });
}

// Qwen3-Next's Gated DeltaNet layers keep a recurrent state per sequence in its KvCache: two sequences
// interleaved in batched steps (a prefill split in two, a prefill beside a decode, decodes in both
// orders) give the logits each gives alone, and feeding one sequence's tokens on the other's cache does
// not (the state is what carries the context). The state is fixed in size (the spec's figure), survives
// only a truncation to its own length or to 0, and a state lost by a failed roll-back refuses to go on.
TEST(GoldenRecurrentState, Qwen3NextSequencesBatchedTogetherMatchEachAlone) {
  EngineOptions exact;
  exact.kv_dtype = KvDtype::kF32;
  auto run = open_golden("qwen3-next", "cpu", exact);
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  Engine& e = *run->engine;
  const std::vector<int32_t> a = {5, 17, 3, 99, 42, 7, 8, 130}, b = {200, 1, 64, 64, 12};
  const std::vector<int32_t> next_a = {11, 250, 3}, next_b = {9, 9, 77};
  // The last position's logits after the prompt and after each next token.
  auto alone = [&](const std::vector<int32_t>& prompt, const std::vector<int32_t>& next) {
    KvCache cache = e.new_cache();
    std::vector<FloatMatrix> out;
    SequenceStep s{&cache, prompt};
    auto l = e.forward(std::span(&s, 1), true);
    EXPECT_TRUE(l.is_ok()) << l.status().to_string();
    out.push_back(copy_matrix(*l));
    for (const int32_t& t : next) {
      s.tokens = std::span(&t, 1);
      l = e.forward(std::span(&s, 1), true);
      EXPECT_TRUE(l.is_ok()) << l.status().to_string();
      out.push_back(copy_matrix(*l));
    }
    return out;
  };
  const auto want_a = alone(a, next_a), want_b = alone(b, next_b);
  auto max_diff = [](ConstMatrix x, const FloatMatrix& y) {
    double m = 0;
    for (int64_t c = 0; c < x.cols; ++c)
      m = std::max(m, std::fabs(static_cast<double>(x.row(0)[c]) - y.row(0)[c]));
    return m;
  };
  KvCache ca = e.new_cache(), cb = e.new_cache();
  EXPECT_EQ(ca.state_bytes(), recurrent_state_bytes_per_sequence(run->model.spec, KvDtype::kF32));
  EXPECT_EQ(ca.state_bytes(), uint64_t{3} * (128 * 3 * 4 + 4 * 16 * 16 * 4));
  const std::span<const int32_t> sa(a), sb(b);
  // Step 1: a's first 3 prompt tokens alone. Step 2: the rest of a's prompt beside b's whole prompt.
  std::vector<SequenceStep> step = {{&ca, sa.first(3)}};
  ASSERT_TRUE(e.forward(step, true).is_ok());
  step = {{&cb, sb}, {&ca, sa.subspan(3)}};
  auto l = e.forward(step, true);
  ASSERT_TRUE(l.is_ok()) << l.status().to_string();
  EXPECT_LE(max_diff(l->row_slice(0, 1), want_b[0]), 1e-4);
  EXPECT_LE(max_diff(l->row_slice(1, 1), want_a[0]), 1e-4);
  for (size_t i = 0; i < next_a.size(); ++i) {
    // Decodes of both, in alternating batch order.
    std::vector<SequenceStep> dec = {{&ca, std::span(&next_a[i], 1)}, {&cb, std::span(&next_b[i], 1)}};
    if (i % 2 == 1) std::swap(dec[0], dec[1]);
    l = e.forward(dec, true);
    ASSERT_TRUE(l.is_ok()) << l.status().to_string();
    const int64_t ra = i % 2 == 1 ? 1 : 0;
    EXPECT_LE(max_diff(l->row_slice(ra, 1), want_a[i + 1]), 1e-4) << "decode " << i;
    EXPECT_LE(max_diff(l->row_slice(1 - ra, 1), want_b[i + 1]), 1e-4) << "decode " << i;
  }
  // b's prompt fed on top of a's cache (a's recurrent state and KV) gives other logits.
  KvCache mixed = e.new_cache();
  SequenceStep first{&mixed, sa};
  ASSERT_TRUE(e.forward(std::span(&first, 1), true).is_ok());
  SequenceStep then{&mixed, sb};
  auto wrong = e.forward(std::span(&then, 1), true);
  ASSERT_TRUE(wrong.is_ok());
  EXPECT_GT(max_diff(*wrong, want_b[0]), 1e-2);
  // Truncation: to the current length or to 0 only; 0 restarts the sequence exactly.
  const Status shorter = ca.truncate(2);
  EXPECT_EQ(shorter.code(), StatusCode::kFailedPrecondition) << shorter.to_string();
  SequenceStep lost{&ca, std::span(&next_a[0], 1)};
  auto refused = e.forward(std::span(&lost, 1), true);
  EXPECT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("recurrent state"), std::string::npos)
      << refused.status().to_string();
  ASSERT_TRUE(ca.truncate(0).is_ok());
  SequenceStep again{&ca, sa};
  auto restarted = e.forward(std::span(&again, 1), true);
  ASSERT_TRUE(restarted.is_ok()) << restarted.status().to_string();
  EXPECT_LE(max_diff(*restarted, want_a[0]), 1e-4);
  ASSERT_TRUE(ca.truncate(ca.length()).is_ok());
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
