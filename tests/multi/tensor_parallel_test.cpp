// Tensor parallelism over two ranks against one process, on the committed golden miniatures: the
// logits of a prompt agree within float32 tolerance, greedy tokens are identical, each rank binds
// its share of the weights (half of every split tensor, replicated ones whole) and caches only its
// KV heads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "day0/backends/backend.h"
#include "day0/runtime/engine.h"
#include "day0/runtime/generate.h"
#include "day0/runtime/model_loader.h"
#include "opened_model.h"
#include "world.h"

namespace day0::testing {
namespace {

class TensorParallel : public ::testing::TestWithParam<std::string> {};

TEST_P(TensorParallel, LogitsAndGreedyTokensMatchOneProcess) {
  D0_REQUIRE_TWO_RANKS();
  Opened whole = open_model(GetParam(), 1, 1);
  Opened part = open_model(GetParam(), 2, 1);
  ASSERT_TRUE(whole.engine && part.engine);
  const std::vector<int32_t> prompt = {1, 17, 42, 99, 3, 250, 128, 7, 64, 31, 200, 5};

  KvCache whole_cache = whole.engine->new_cache(), part_cache = part.engine->new_cache();
  const SequenceStep ws{&whole_cache, prompt}, ps{&part_cache, prompt};
  auto wl = whole.engine->forward(std::span(&ws, 1));
  ASSERT_TRUE(wl.is_ok()) << wl.status().to_string();
  const FloatMatrix expected = copy_matrix(*wl);  // [12, vocab]
  auto pl = part.engine->forward(std::span(&ps, 1));
  ASSERT_TRUE(pl.is_ok()) << pl.status().to_string();
  ASSERT_EQ(pl->rows, expected.rows);
  ASSERT_EQ(pl->cols, expected.cols);
  double max_diff = 0, max_abs = 0;
  for (int64_t r = 0; r < expected.rows; ++r) {
    for (int64_t j = 0; j < expected.cols; ++j) {
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(pl->row(r)[j] - expected.row(r)[j])));
      max_abs = std::max(max_abs, static_cast<double>(std::fabs(expected.row(r)[j])));
    }
  }
  // Float32 throughout; only the order of the partial sums differs.
  EXPECT_LT(max_diff, 1e-5 * std::max(1.0, max_abs)) << "max |logit| " << max_abs;
  EXPECT_GT(max_abs, 0.1);  // the comparison compared something

  SamplingParams greedy;
  auto wg = generate(*whole.engine, prompt, 16, greedy);
  auto pg = generate(*part.engine, prompt, 16, greedy);
  ASSERT_TRUE(wg.is_ok() && pg.is_ok());
  EXPECT_EQ(pg->tokens(), wg->tokens());
  EXPECT_EQ(pg->tokens().size(), 16u);
}

TEST_P(TensorParallel, EachRankBindsItsShareOfTheWeightsAndCachesItsKvHeads) {
  D0_REQUIRE_TWO_RANKS();
  dist::Communicator& w = *test_world();
  Opened whole = open_model(GetParam(), 1, 1);
  Opened part = open_model(GetParam(), 2, 1);
  ASSERT_TRUE(whole.engine && part.engine);
  const BoundWeightBytes all = whole.model.weights->bound, mine = part.model.weights->bound;
  // Heads, FFN columns and the vocabulary (256) all halve exactly on these miniatures.
  EXPECT_EQ(2 * mine.split, all.split);
  EXPECT_EQ(mine.replicated, all.replicated);
  EXPECT_LT(static_cast<double>(mine.total()), 0.6 * static_cast<double>(all.total()));
  EXPECT_EQ(part.model.weights->vocab.begin, 128 * w.rank());
  EXPECT_EQ(2 * part.engine->kv_pool().bytes_per_token_row(), whole.engine->kv_pool().bytes_per_token_row());
  EXPECT_EQ(part.engine->local_spec().n_heads * 2, whole.engine->spec().n_heads);
  // Every rank's figure, gathered: both hold the same amount.
  const uint64_t total = mine.total();
  std::vector<uint64_t> both(2);
  ASSERT_TRUE(w.all_gather_of<uint64_t>(std::span(&total, 1), both).is_ok());
  EXPECT_EQ(both[0], both[1]);
}

TEST_P(TensorParallel, Bf16GreedyTokensMatchOneProcess) {
  D0_REQUIRE_TWO_RANKS();
  Opened whole = open_model(GetParam(), 1, 1, MoeCombine::kAllReduce, ActivationPrecision::kBF16);
  Opened part = open_model(GetParam(), 2, 1, MoeCombine::kAllReduce, ActivationPrecision::kBF16);
  ASSERT_TRUE(whole.engine && part.engine);
  expect_same_greedy_tokens(whole, part);
}

INSTANTIATE_TEST_SUITE_P(DenseGqa, TensorParallel, ::testing::Values("llama3", "qwen3"));

TEST(TensorParallelEngine, RefusesAShardWithoutItsGroup) {
  D0_REQUIRE_TWO_RANKS();
  LoadOptions lo;
  lo.shard = {test_world()->rank(), 2};
  auto m = load_model(golden("llama3"), lo);
  ASSERT_TRUE(m.is_ok());
  auto be = open_backend("cpu", {});
  ASSERT_TRUE(be.is_ok());
  auto e = Engine::create(m->spec, m->weights, **be, {});
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("missing"), std::string::npos) << e.status().message();
}

}  // namespace
}  // namespace day0::testing
