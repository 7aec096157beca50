// Multi-head latent attention (DeepSeek-V2-Lite, DeepSeek-V3, Kimi K2, DeepSeek-V3.2 miniatures) under
// tensor parallelism (split by heads) and expert parallelism over two ranks, against one process: the
// logits of a prompt agree within float32 tolerance, greedy tokens are identical, each rank binds its
// share of the weights (its heads of q_b / kv_b / o_proj, its experts) and every rank caches the whole
// latent. The FourRanks tests run TP 2 x EP 2 over four ranks (a second CTest entry, mpirun -np 4).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "day0/dist/expert_placement.h"
#include "day0/runtime/engine.h"
#include "day0/runtime/generate.h"
#include "opened_model.h"
#include "world.h"

namespace day0::testing {
namespace {

const std::vector<int32_t> kPrompt = {1, 17, 42, 99, 3, 250, 128, 7, 64, 31, 200, 5};

std::string name_of(std::string n) {
  std::replace(n.begin(), n.end(), '-', '_');
  std::replace(n.begin(), n.end(), '.', '_');
  return n;
}

// The same logits (float32: only the order of partial sums differs) and the same 12 greedy tokens.
void expect_same_outputs(Opened& whole, Opened& part) {
  const LogitDiff d = compare_logits(whole, part, kPrompt);
  EXPECT_LT(d.max_diff, 1e-5 * std::max(1.0, d.max_abs)) << "max |logit| " << d.max_abs;
  EXPECT_GT(d.max_abs, 0.1);  // the comparison compared something
  SamplingParams greedy;
  auto wg = generate(*whole.engine, kPrompt, 12, greedy);
  auto pg = generate(*part.engine, kPrompt, 12, greedy);
  ASSERT_TRUE(wg.is_ok() && pg.is_ok());
  EXPECT_EQ(pg->tokens(), wg->tokens());
  EXPECT_EQ(pg->tokens().size(), 12u);
}

// `part` bytes are `whole` / n: exactly for BF16 checkpoints; FP8 parts carry their own re-blocked
// scale grids (a few float32 scales a tensor more than their share), so within 2% there.
void expect_share(uint64_t part, uint64_t whole, int n, bool fp8, const char* what) {
  if (!fp8) {
    EXPECT_EQ(n * part, whole) << what;
    return;
  }
  EXPECT_GE(n * part, whole) << what;
  EXPECT_LT(static_cast<double>(n * part), 1.02 * static_cast<double>(whole)) << what;
}

bool fp8(const Opened& o) {
  return o.model.spec.weights.format == WeightFormat::kFp8Block;
}

class MlaTensorParallel : public ::testing::TestWithParam<std::string> {};

TEST_P(MlaTensorParallel, LogitsAndGreedyTokensMatchOneProcess) {
  D0_REQUIRE_TWO_RANKS();
  Opened whole = open_model(GetParam(), 1, 1);
  Opened part = open_model(GetParam(), 2, 1);
  ASSERT_TRUE(whole.engine && part.engine);
  expect_same_outputs(whole, part);
}

TEST_P(MlaTensorParallel, EachRankBindsItsHeadsAndCachesTheWholeLatent) {
  D0_REQUIRE_TWO_RANKS();
  dist::Communicator& w = *test_world();
  Opened whole = open_model(GetParam(), 1, 1);
  Opened part = open_model(GetParam(), 2, 1);
  ASSERT_TRUE(whole.engine && part.engine);
  const BoundWeightBytes all = whole.model.weights->bound, mine = part.model.weights->bound;
  // Heads, FFN and expert widths and the vocabulary halve; q_a / kv_a, norms and routers are whole.
  expect_share(mine.split, all.split, 2, fp8(whole), "split bytes");
  expect_share(mine.experts, all.experts, 2, fp8(whole), "expert bytes");
  EXPECT_EQ(mine.replicated, all.replicated);
  EXPECT_LT(static_cast<double>(mine.total()), 0.62 * static_cast<double>(all.total()));
  const ModelSpec& s = whole.model.spec;
  const MlaSpec& m = *s.mla;
  for (size_t l = 0; l < part.model.weights->layers.size(); ++l) {
    const AttentionWeights& a = part.model.weights->layers[l].attn;
    const WeightView& q = a.q_b.present() ? a.q_b.w : a.q.w;  // [heads / 2 * (d_nope + d_rope), in]
    EXPECT_EQ(q.rows, s.n_heads / 2 * (m.qk_nope_head_dim + m.qk_rope_head_dim)) << "layer " << l;
    EXPECT_EQ(a.kv_b.w.rows, s.n_heads / 2 * (m.qk_nope_head_dim + m.v_head_dim)) << "layer " << l;
    EXPECT_EQ(a.kv_b.w.cols, m.kv_lora_rank);
    EXPECT_EQ(a.o.w.cols, s.n_heads / 2 * m.v_head_dim) << "layer " << l;  // [hidden, its heads' values]
    EXPECT_EQ(a.kv_a.w.rows, m.kv_lora_rank + m.qk_rope_head_dim);         // replicated
  }
  EXPECT_EQ(part.engine->local_spec().n_heads * 2, s.n_heads);
  // The latent and rope key are per token: every rank caches them whole.
  EXPECT_EQ(part.engine->kv_pool().bytes_per_token_row(), whole.engine->kv_pool().bytes_per_token_row());
  const uint64_t total = mine.total();
  std::vector<uint64_t> both(2);
  ASSERT_TRUE(w.all_gather_of<uint64_t>(std::span(&total, 1), both).is_ok());
  if (!fp8(whole)) {
    EXPECT_EQ(both[0], both[1]);
  }
}

TEST_P(MlaTensorParallel, Bf16GreedyTokensMatchOneProcess) {
  D0_REQUIRE_TWO_RANKS();
  Opened whole = open_model(GetParam(), 1, 1, MoeCombine::kAllReduce, ActivationPrecision::kBF16);
  Opened part = open_model(GetParam(), 2, 1, MoeCombine::kAllReduce, ActivationPrecision::kBF16);
  ASSERT_TRUE(whole.engine && part.engine);
  expect_same_greedy_tokens(whole, part);
}

// DeepSeek-V2-Lite: q_proj without a q LoRA, softmax routing, BF16. DeepSeek-V3 and Kimi K2: q LoRA,
// sigmoid + correction-bias routing (V3 group-limited over 2 groups), FP8 block weights. V3.2: the
// lightning indexer (replicated) selecting the keys MLA attends to.
const std::vector<std::string> kMlaModels = {"deepseek-v2-lite", "deepseek-v3", "kimi-k2", "deepseek-v32"};

INSTANTIATE_TEST_SUITE_P(Mla, MlaTensorParallel, ::testing::ValuesIn(kMlaModels),
                         [](const ::testing::TestParamInfo<std::string>& p) { return name_of(p.param); });

struct Case {
  std::string model;
  MoeCombine combine;
};
std::string case_name(const ::testing::TestParamInfo<Case>& p) {
  return name_of(p.param.model + (p.param.combine == MoeCombine::kAllToAll ? "_all_to_all" : "_all_reduce"));
}
std::vector<Case> cases(std::initializer_list<const char*> models) {
  std::vector<Case> out;
  for (const char* m : models)
    for (MoeCombine c : {MoeCombine::kAllReduce, MoeCombine::kAllToAll}) out.push_back({m, c});
  return out;
}

class MlaExpertParallel : public ::testing::TestWithParam<Case> {};

TEST_P(MlaExpertParallel, LogitsGreedyTokensAndExpertBytesMatchOneProcess) {
  D0_REQUIRE_TWO_RANKS();
  Opened whole = open_model(GetParam().model, 1, 1);
  Opened part = open_model(GetParam().model, 1, 2, GetParam().combine);
  ASSERT_TRUE(whole.engine && part.engine);
  expect_same_outputs(whole, part);
  // Half of the routed experts (whole, FP8 scales and all); attention, dense layers and shared
  // experts replicated.
  const BoundWeightBytes all = whole.model.weights->bound, mine = part.model.weights->bound;
  EXPECT_GT(all.experts, 0u);
  EXPECT_EQ(2 * mine.experts, all.experts);
  EXPECT_EQ(mine.split - mine.experts, all.split - all.experts);
  EXPECT_EQ(mine.replicated, all.replicated);
  const int64_t n = whole.model.spec.moe->n_experts;
  const dist::ExpertBlock held = dist::expert_block(n, 2, test_world()->rank());
  for (size_t l = 0; l < part.model.weights->layers.size(); ++l) {
    const MoeWeights& moe = part.model.weights->layers[l].moe;
    if (!whole.model.spec.layers[l].moe) continue;  // the dense first layers
    EXPECT_EQ(moe.expert_of_slot(0), held.begin) << "layer " << l;
    EXPECT_EQ(moe.expert_slot[static_cast<size_t>(held.begin)], 0) << "layer " << l;
    EXPECT_EQ(static_cast<int64_t>(moe.experts.size()), held.size()) << "layer " << l;
    EXPECT_TRUE(moe.shared.present()) << "layer " << l;
  }
  EXPECT_EQ(part.engine->kv_pool().bytes_per_token_row(), whole.engine->kv_pool().bytes_per_token_row());
}

TEST_P(MlaExpertParallel, Bf16GreedyTokensMatchOneProcess) {
  D0_REQUIRE_TWO_RANKS();
  Opened whole = open_model(GetParam().model, 1, 1, MoeCombine::kAllReduce, ActivationPrecision::kBF16);
  Opened part = open_model(GetParam().model, 1, 2, GetParam().combine, ActivationPrecision::kBF16);
  ASSERT_TRUE(whole.engine && part.engine);
  expect_same_greedy_tokens(whole, part);
}

INSTANTIATE_TEST_SUITE_P(
    Mla, MlaExpertParallel,
    ::testing::ValuesIn(cases({"deepseek-v2-lite", "deepseek-v3", "kimi-k2", "deepseek-v32"})), case_name);

// TP 2 x EP 2 over four ranks: each rank holds half of the experts, each split in two, and its heads.
class FourRanksTensorTimesExpertParallel : public ::testing::TestWithParam<Case> {};

TEST_P(FourRanksTensorTimesExpertParallel, LogitsGreedyTokensAndBytesMatchOneProcess) {
  D0_REQUIRE_FOUR_RANKS();
  Opened whole = open_model(GetParam().model, 1, 1);
  Opened part = open_model(GetParam().model, 2, 2, GetParam().combine);
  ASSERT_TRUE(whole.engine && part.engine);
  expect_same_outputs(whole, part);
  const BoundWeightBytes all = whole.model.weights->bound, mine = part.model.weights->bound;
  expect_share(mine.experts, all.experts, 4, fp8(whole), "expert bytes");
  expect_share(mine.split - mine.experts, all.split - all.experts, 2, fp8(whole), "other split bytes");
  EXPECT_EQ(mine.replicated, all.replicated);
  EXPECT_EQ(part.engine->local_spec().n_heads * 2, whole.model.spec.n_heads);
  EXPECT_EQ(part.model.weights->layers.back().moe.experts.size() * 2,
            whole.model.weights->layers.back().moe.experts.size());
}

INSTANTIATE_TEST_SUITE_P(Moe, FourRanksTensorTimesExpertParallel,
                         ::testing::ValuesIn(cases({"deepseek-v3", "kimi-k2", "deepseek-v32", "qwen3-moe",
                                                    "minimax-m2", "glm-4.5", "qwen3-next", "longcat-flash"})),
                         case_name);

}  // namespace
}  // namespace day0::testing
