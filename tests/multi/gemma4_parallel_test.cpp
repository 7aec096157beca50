// Gemma 4 over two ranks against one process, on its golden miniatures: tensor parallelism on the dense
// ones (gemma4: per-layer head widths, one KV head on the global layers, KV shared across layers, k = v,
// per-layer embeddings, a double-wide MLP; gemma4-31b: separate k / v, no per-layer embeddings) and
// expert parallelism on the MoE block beside its dense MLP (gemma4-moe), whose tensor parallelism is
// refused until the dense MLP beside the MoE is split.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "day0/runtime/engine.h"
#include "day0/runtime/generate.h"
#include "day0/runtime/model_loader.h"
#include "opened_model.h"
#include "world.h"

namespace day0::testing {
namespace {

const std::vector<int32_t> kPrompt = {1, 17, 42, 99, 3, 250, 128, 7, 64, 31, 200, 5};

std::string param_name(const ::testing::TestParamInfo<std::string>& p) {
  std::string n = p.param;
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

// Float32 throughout: only the order of the partial sums differs from one process.
void expect_same_logits_and_greedy_tokens(Opened& whole, Opened& part) {
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

class Gemma4TensorParallel : public ::testing::TestWithParam<std::string> {};

TEST_P(Gemma4TensorParallel, LogitsAndGreedyTokensMatchOneProcess) {
  D0_REQUIRE_TWO_RANKS();
  Opened whole = open_model(GetParam(), 1, 1);
  Opened part = open_model(GetParam(), 2, 1);
  ASSERT_TRUE(whole.engine && part.engine);
  expect_same_logits_and_greedy_tokens(whole, part);
  // Each rank holds half the query heads of every layer and half its KV heads, or the whole one KV head of
  // a global layer (both ranks' query heads read it).
  const ModelSpec& all = whole.engine->spec();
  const ModelSpec& mine = part.engine->local_spec();
  ASSERT_EQ(mine.layers.size(), all.layers.size());
  for (size_t i = 0; i < all.layers.size(); ++i) {
    const int64_t kv = layer_kv_heads(all, all.layers[i]);
    EXPECT_EQ(2 * layer_heads(mine, mine.layers[i]), layer_heads(all, all.layers[i])) << "layer " << i;
    EXPECT_EQ(layer_kv_heads(mine, mine.layers[i]), kv % 2 == 0 ? kv / 2 : kv) << "layer " << i;
  }
  EXPECT_LT(part.model.weights->bound.total(), whole.model.weights->bound.total());
}

TEST_P(Gemma4TensorParallel, Bf16GreedyTokensMatchOneProcess) {
  D0_REQUIRE_TWO_RANKS();
  Opened whole = open_model(GetParam(), 1, 1, MoeCombine::kAllReduce, ActivationPrecision::kBF16);
  Opened part = open_model(GetParam(), 2, 1, MoeCombine::kAllReduce, ActivationPrecision::kBF16);
  ASSERT_TRUE(whole.engine && part.engine);
  expect_same_greedy_tokens(whole, part);
}

INSTANTIATE_TEST_SUITE_P(Gemma4, Gemma4TensorParallel, ::testing::Values("gemma4", "gemma4-31b"), param_name);

class Gemma4ExpertParallel : public ::testing::TestWithParam<MoeCombine> {};

TEST_P(Gemma4ExpertParallel, LogitsAndGreedyTokensMatchOneProcess) {
  D0_REQUIRE_TWO_RANKS();
  Opened whole = open_model("gemma4-moe", 1, 1);
  Opened part = open_model("gemma4-moe", 1, 2, GetParam());
  ASSERT_TRUE(whole.engine && part.engine);
  expect_same_logits_and_greedy_tokens(whole, part);
  // Each rank binds half of the routed experts; the dense MLP beside them and the rest stay whole.
  const BoundWeightBytes all = whole.model.weights->bound, mine = part.model.weights->bound;
  EXPECT_GT(all.experts, 0u);
  EXPECT_EQ(2 * mine.experts, all.experts);
  EXPECT_EQ(mine.replicated, all.replicated);
}

TEST_P(Gemma4ExpertParallel, Bf16GreedyTokensMatchOneProcess) {
  D0_REQUIRE_TWO_RANKS();
  Opened whole = open_model("gemma4-moe", 1, 1, MoeCombine::kAllReduce, ActivationPrecision::kBF16);
  Opened part = open_model("gemma4-moe", 1, 2, GetParam(), ActivationPrecision::kBF16);
  ASSERT_TRUE(whole.engine && part.engine);
  expect_same_greedy_tokens(whole, part);
}

INSTANTIATE_TEST_SUITE_P(Gemma4Moe, Gemma4ExpertParallel,
                         ::testing::Values(MoeCombine::kAllReduce, MoeCombine::kAllToAll),
                         [](const ::testing::TestParamInfo<MoeCombine>& p) {
                           return std::string(p.param == MoeCombine::kAllToAll ? "all_to_all" : "all_reduce");
                         });

TEST(Gemma4MoeTensorParallel, IsRefusedNamingTheDenseMlpBesideTheMoe) {
  D0_REQUIRE_TWO_RANKS();
  LoadOptions lo;
  lo.shard = {test_world()->rank(), 2};
  auto m = load_model(golden("gemma4-moe"), lo);
  Status refused = m.status();
  if (m.is_ok()) {
    auto be = open_backend("cpu", {});
    ASSERT_TRUE(be.is_ok());
    refused = Engine::create(m->spec, m->weights, **be, {}).status();
  }
  EXPECT_EQ(refused.code(), StatusCode::kUnsupported) << refused.to_string();
  EXPECT_NE(refused.message().find("dense MLP beside the MoE"), std::string::npos) << refused.message();
}

}  // namespace
}  // namespace day0::testing
