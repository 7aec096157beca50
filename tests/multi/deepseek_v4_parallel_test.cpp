// DeepSeek-V4's golden (shared key = value attention on sliding, compressed sparse and heavily compressed
// layers, hyper-connections, hash-routed and sqrtsoftplus MoE) under tensor parallelism (its heads with their
// output groups split, the K=V head, compressors and indexer replicated), expert parallelism and both over
// four ranks, against one process: float32 logits of a prompt within float rounding, the same greedy tokens,
// and each rank binding its share.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "day0/runtime/engine.h"
#include "day0/runtime/generate.h"
#include "opened_model.h"
#include "world.h"

namespace day0::testing {
namespace {

const std::string kGolden = "deepseek-v4";
// 12 tokens: past the golden's sliding window (8) and several compression windows (4 and 8), so that every
// layer kind attends to compressed entries and the sparse layers' indexer picks among them.
const std::vector<int32_t> kPrompt = {1, 17, 42, 99, 3, 250, 128, 7, 64, 31, 200, 5};

// Float32: only the order of the partial sums differs. Then 12 greedy tokens.
void expect_same_outputs(Opened& whole, Opened& part) {
  const LogitDiff d = compare_logits(whole, part, kPrompt);
  EXPECT_LT(d.max_diff, 1e-5 * std::max(1.0, d.max_abs)) << "max |logit| " << d.max_abs;
  EXPECT_GT(d.max_abs, 0.1);  // the comparison compared something
  const SamplingParams greedy;
  auto wg = generate(*whole.engine, kPrompt, 12, greedy);
  auto pg = generate(*part.engine, kPrompt, 12, greedy);
  ASSERT_TRUE(wg.is_ok() && pg.is_ok());
  EXPECT_EQ(pg->tokens(), wg->tokens());
  EXPECT_EQ(pg->tokens().size(), 12u);
}

TEST(DeepseekV4TensorParallel, LogitsAndGreedyTokensMatchOneProcess) {
  D0_REQUIRE_TWO_RANKS();
  Opened whole = open_model(kGolden, 1, 1);
  Opened part = open_model(kGolden, 2, 1);
  ASSERT_TRUE(whole.engine && part.engine);
  expect_same_outputs(whole, part);
}

TEST(DeepseekV4TensorParallel, EachRankBindsItsHeadsAndGroupsAndCachesTheWholeKvHead) {
  D0_REQUIRE_TWO_RANKS();
  Opened whole = open_model(kGolden, 1, 1);
  Opened part = open_model(kGolden, 2, 1);
  ASSERT_TRUE(whole.engine && part.engine);
  const ModelSpec& s = whole.model.spec;
  const SharedKvLowRankAttentionSpec& a = *s.shared_kv_low_rank;
  const int64_t heads = s.n_heads / 2, groups = a.out_groups / 2, d = s.head_dim;
  for (size_t l = 0; l < part.model.weights->layers.size(); ++l) {
    const AttentionWeights& w = part.model.weights->layers[l].attn;
    const AttentionWeights& all = whole.model.weights->layers[l].attn;
    EXPECT_EQ(w.q_b.w.rows, heads * d) << "layer " << l;  // [its heads x head_dim, q_lora_rank]
    EXPECT_EQ(w.sinks.size(), static_cast<size_t>(heads)) << "layer " << l;
    // o_a [its groups x o_rank, heads a group x head_dim]; o_b [hidden, its groups x o_rank].
    EXPECT_EQ(w.o_a.w.rows, groups * a.out_rank) << "layer " << l;
    EXPECT_EQ(w.o_a.w.cols, all.o_a.w.cols) << "layer " << l;
    EXPECT_EQ(w.o_b.w.cols, groups * a.out_rank) << "layer " << l;
    EXPECT_EQ(w.o_b.w.rows, s.hidden_size) << "layer " << l;
    // Replicated: the K=V head, the q latent, the compressors and the indexer.
    EXPECT_EQ(w.kv.w.rows, d) << "layer " << l;
    EXPECT_EQ(w.q_a.w.rows, a.q_lora_rank) << "layer " << l;
    EXPECT_EQ(w.compressor.kv.w.rows, all.compressor.kv.w.rows) << "layer " << l;
    EXPECT_EQ(w.index_q.w.rows, all.index_q.w.rows) << "layer " << l;
  }
  EXPECT_EQ(part.engine->local_spec().n_heads * 2, s.n_heads);
  EXPECT_EQ(part.engine->local_spec().shared_kv_low_rank->out_groups * 2, a.out_groups);
  // One K=V head a token: every rank caches it whole.
  EXPECT_EQ(part.engine->kv_pool().bytes_per_token_row(), whole.engine->kv_pool().bytes_per_token_row());
  const BoundWeightBytes all = whole.model.weights->bound, mine = part.model.weights->bound;
  EXPECT_EQ(mine.replicated, all.replicated);
  EXPECT_EQ(2 * mine.split, all.split);  // BF16: every split tensor halves exactly
}

TEST(DeepseekV4TensorParallel, Bf16GreedyTokensMatchOneProcess) {
  D0_REQUIRE_TWO_RANKS();
  Opened whole = open_model(kGolden, 1, 1, MoeCombine::kAllReduce, ActivationPrecision::kBF16);
  Opened part = open_model(kGolden, 2, 1, MoeCombine::kAllReduce, ActivationPrecision::kBF16);
  ASSERT_TRUE(whole.engine && part.engine);
  expect_same_greedy_tokens(whole, part);
}

class DeepseekV4ExpertParallel : public ::testing::TestWithParam<MoeCombine> {};

// Half of the routed experts a rank, hash-routed layers included (the token table is replicated).
TEST_P(DeepseekV4ExpertParallel, LogitsGreedyTokensAndExpertBytesMatchOneProcess) {
  D0_REQUIRE_TWO_RANKS();
  Opened whole = open_model(kGolden, 1, 1);
  Opened part = open_model(kGolden, 1, 2, GetParam());
  ASSERT_TRUE(whole.engine && part.engine);
  expect_same_outputs(whole, part);
  const BoundWeightBytes all = whole.model.weights->bound, mine = part.model.weights->bound;
  EXPECT_GT(all.experts, 0u);
  EXPECT_EQ(2 * mine.experts, all.experts);
  EXPECT_EQ(mine.split - mine.experts, all.split - all.experts);
  EXPECT_EQ(mine.replicated, all.replicated);
}

INSTANTIATE_TEST_SUITE_P(Combine, DeepseekV4ExpertParallel,
                         ::testing::Values(MoeCombine::kAllReduce, MoeCombine::kAllToAll),
                         [](const ::testing::TestParamInfo<MoeCombine>& p) {
                           return std::string(p.param == MoeCombine::kAllToAll ? "all_to_all" : "all_reduce");
                         });

// TP 2 x EP 2: each rank holds its heads and groups, half of the experts, each split in two.
TEST(FourRanksDeepseekV4, TensorTimesExpertParallelMatchesOneProcess) {
  D0_REQUIRE_FOUR_RANKS();
  Opened whole = open_model(kGolden, 1, 1);
  Opened part = open_model(kGolden, 2, 2);
  ASSERT_TRUE(whole.engine && part.engine);
  expect_same_outputs(whole, part);
  const BoundWeightBytes all = whole.model.weights->bound, mine = part.model.weights->bound;
  EXPECT_EQ(4 * mine.experts, all.experts);
  EXPECT_EQ(2 * (mine.split - mine.experts), all.split - all.experts);
  EXPECT_EQ(mine.replicated, all.replicated);
}

}  // namespace
}  // namespace day0::testing
