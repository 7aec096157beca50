// Pipeline parallelism over two ranks (two stages) against one process, on the committed golden
// miniatures: the logits of a prompt agree within float32 tolerance however the step is cut into
// micro-batches, greedy tokens are identical (F32 and BF16), each stage binds only its layers (plus
// the embedding on the first, final norm and head on the last) and caches only its layers' rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "day0/dist/pipeline_stages.h"
#include "day0/model/catalog.h"
#include "day0/runtime/engine.h"
#include "day0/runtime/generate.h"
#include "day0/runtime/model_loader.h"
#include "opened_model.h"
#include "world.h"

namespace day0::testing {
namespace {

const dist::ParallelLayout kPp2{.tp = 1, .pp = 2, .ep = 1};

// max |a - b| over max(1, max |a|): the comparison's relative error.
double relative_diff(ConstMatrix got, const FloatMatrix& want, double* max_abs) {
  double diff = 0, big = 0;
  for (int64_t r = 0; r < want.rows; ++r) {
    for (int64_t j = 0; j < want.cols; ++j) {
      diff = std::max(diff, static_cast<double>(std::fabs(got.row(r)[j] - want.row(r)[j])));
      big = std::max(big, static_cast<double>(std::fabs(want.row(r)[j])));
    }
  }
  *max_abs = big;
  return diff / std::max(1.0, big);
}

class PipelineParallel : public ::testing::TestWithParam<std::string> {};

TEST_P(PipelineParallel, LogitsAndGreedyTokensMatchOneProcess) {
  D0_REQUIRE_TWO_RANKS();
  Opened whole = open_model(GetParam(), 1, 1);
  ASSERT_TRUE(whole.engine);
  const std::vector<int32_t> prompt = {1, 17, 42, 99, 3, 250, 128, 7, 64, 31, 200, 5};
  KvCache whole_cache = whole.engine->new_cache();
  const SequenceStep ws{&whole_cache, prompt};
  auto wl = whole.engine->forward(std::span(&ws, 1));
  ASSERT_TRUE(wl.is_ok()) << wl.status().to_string();
  const FloatMatrix expected = copy_matrix(*wl);  // [12, vocab]

  // One micro-batch (stages in turn), the default (two per stage) and uneven chunks of 12 rows.
  for (const int micro : {1, 0, 5}) {
    Opened stage = open_layout(GetParam(), kPp2, ActivationPrecision::kF32, micro);
    ASSERT_TRUE(stage.engine);
    KvCache cache = stage.engine->new_cache();
    const SequenceStep ps{&cache, prompt};
    auto pl = stage.engine->forward(std::span(&ps, 1));
    ASSERT_TRUE(pl.is_ok()) << pl.status().to_string();
    ASSERT_EQ(pl->rows, expected.rows);
    ASSERT_EQ(pl->cols, expected.cols);
    double max_abs = 0;
    // Float32 throughout, the same kernels on the same rows: only how many rows a step holds differs.
    EXPECT_LT(relative_diff(*pl, expected, &max_abs), 1e-5) << "micro-batches " << micro;
    EXPECT_GT(max_abs, 0.1);  // the comparison compared something
    EXPECT_EQ(cache.length(), 12);
    const PipelineFigures& f = stage.engine->pipeline_figures();
    EXPECT_EQ(f.steps, 1);
    EXPECT_EQ(f.micro_batches, micro == 0 ? 4 : micro);
    EXPECT_GT(f.forward_seconds, 0);
    EXPECT_GE(f.bubble_fraction(), 0);
    EXPECT_LE(f.bubble_fraction(), 1.0 + 1e-9);

    // Decode continues from the pipelined prefill: the last-token logits of a second step agree too.
    const std::vector<int32_t> next = {77};
    const SequenceStep wn{&whole_cache, next}, pn{&cache, next};
    if (micro == 1) {  // the whole cache advances once
      auto wd = whole.engine->forward(std::span(&wn, 1), /*last_only=*/true);
      ASSERT_TRUE(wd.is_ok());
      const FloatMatrix want = copy_matrix(*wd);
      auto pd = stage.engine->forward(std::span(&pn, 1), /*last_only=*/true);
      ASSERT_TRUE(pd.is_ok()) << pd.status().to_string();
      EXPECT_LT(relative_diff(*pd, want, &max_abs), 1e-5);
    }
  }

  SamplingParams greedy;
  Opened stage = open_layout(GetParam(), kPp2);
  ASSERT_TRUE(stage.engine);
  auto wg = generate(*whole.engine, prompt, 16, greedy);
  auto pg = generate(*stage.engine, prompt, 16, greedy, /*top_logprobs=*/3);
  ASSERT_TRUE(wg.is_ok() && pg.is_ok()) << pg.status().to_string();
  EXPECT_EQ(pg->tokens(), wg->tokens());
  EXPECT_EQ(pg->tokens().size(), 16u);
}

TEST_P(PipelineParallel, Bf16GreedyTokensMatchOneProcess) {
  D0_REQUIRE_TWO_RANKS();
  Opened whole = open_model(GetParam(), 1, 1, MoeCombine::kAllReduce, ActivationPrecision::kBF16);
  Opened stage = open_layout(GetParam(), kPp2, ActivationPrecision::kBF16);
  ASSERT_TRUE(whole.engine && stage.engine);
  const std::vector<int32_t> prompt = {5, 9, 77, 180, 33, 2};
  SamplingParams greedy;
  auto wg = generate(*whole.engine, prompt, 12, greedy);
  auto pg = generate(*stage.engine, prompt, 12, greedy);
  ASSERT_TRUE(wg.is_ok() && pg.is_ok());
  EXPECT_EQ(pg->tokens(), wg->tokens());
}

uint64_t view_bytes(const WeightView& w) {
  const uint64_t elem = w.format == WeightFormat::kF32 ? 4 : 2;  // the miniatures: F32 or BF16 / F16
  return static_cast<uint64_t>(w.rows * w.cols) * elem;
}

TEST_P(PipelineParallel, EachStageBindsAndCachesOnlyItsLayers) {
  D0_REQUIRE_TWO_RANKS();
  dist::Communicator& world = *test_world();
  Opened whole = open_model(GetParam(), 1, 1);
  Opened stage = open_layout(GetParam(), kPp2);
  ASSERT_TRUE(whole.engine && stage.engine);
  const ModelWeights& w = *stage.model.weights;
  const int s = world.rank();
  const int64_t n_layers = whole.model.spec.n_layers;
  const dist::LayerBlock mine = dist::stage_layers(n_layers, 2, s);
  EXPECT_EQ(w.held_layers.begin, mine.begin);
  EXPECT_EQ(w.held_layers.end, mine.end);
  EXPECT_EQ(stage.engine->held_layers().begin, mine.begin);
  for (int64_t l = 0; l < n_layers; ++l) {
    const bool held = mine.contains(l);
    EXPECT_EQ(!w.layers[static_cast<size_t>(l)].input_norm.empty(), held) << "layer " << l;
  }
  // The embedding on the first stage, the head and final norm on the last.
  EXPECT_EQ(w.embedding.data != nullptr, s == 0);
  EXPECT_EQ(w.lm_head.present(), s == 1);
  EXPECT_EQ(!w.final_norm.empty(), s == 1);

  // Bytes: each stage's share, together the whole model; a tied head is mapped again by the last stage.
  const uint64_t total = w.bound.total();
  std::vector<uint64_t> both(2);
  ASSERT_TRUE(world.all_gather_of<uint64_t>(std::span(&total, 1), both).is_ok());
  const uint64_t all = whole.model.weights->bound.total();
  const uint64_t tied = whole.model.spec.tie_word_embeddings ? view_bytes(whole.model.weights->embedding) : 0;
  EXPECT_EQ(both[0] + both[1], all + tied);
  EXPECT_LT(static_cast<double>(total), 0.8 * static_cast<double>(all));
  EXPECT_GT(total, 0u);

  // KV rows: a stage's cache holds its layers' blocks only; together they are the whole cache's.
  const std::vector<int32_t> prompt = {1, 17, 42, 99, 3, 250, 128, 7, 64, 31, 200, 5};
  KvCache whole_cache = whole.engine->new_cache(), cache = stage.engine->new_cache();
  const SequenceStep ws{&whole_cache, prompt}, ps{&cache, prompt};
  ASSERT_TRUE(whole.engine->forward(std::span(&ws, 1), true).is_ok());
  ASSERT_TRUE(stage.engine->forward(std::span(&ps, 1), true).is_ok());
  const uint64_t kv = cache.bytes();
  std::vector<uint64_t> kv_both(2);
  ASSERT_TRUE(world.all_gather_of<uint64_t>(std::span(&kv, 1), kv_both).is_ok());
  EXPECT_EQ(kv_both[0] + kv_both[1], whole_cache.bytes());
  EXPECT_GT(kv, 0u);
  EXPECT_LT(kv, whole_cache.bytes());
}

// Dense GQA (Llama, tied Qwen3), GQA MoE (Qwen3-MoE), sinks + sliding window + stacked experts
// (gpt-oss), MLA + MoE with a dense first layer (DeepSeek-V3: 3 layers, stages of 1 and 2).
INSTANTIATE_TEST_SUITE_P(Families, PipelineParallel,
                         ::testing::Values("llama3", "qwen3", "qwen3-moe", "gpt-oss", "deepseek-v3"));

TEST(PipelineParallelEngine, RefusesAStageWithoutItsGroupAndACapture) {
  D0_REQUIRE_TWO_RANKS();
  LoadOptions lo;
  lo.stage = {test_world()->rank(), 2};
  auto m = load_model(golden("llama3"), lo);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  auto be = open_backend("cpu", {});
  ASSERT_TRUE(be.is_ok());
  auto e = Engine::create(m->spec, m->weights, **be, {});
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("pipeline stage"), std::string::npos) << e.status().message();

  Opened stage = open_layout("llama3", kPp2);
  ASSERT_TRUE(stage.engine);
  KvCache cache = stage.engine->new_cache();
  const std::vector<int32_t> prompt = {1, 2, 3};
  const SequenceStep ps{&cache, prompt};
  ForwardCapture capture;
  capture.want_hidden = true;
  auto r = stage.engine->forward(std::span(&ps, 1), false, &capture);
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
  EXPECT_EQ(cache.length(), 0);  // refused before any stage ran
}

TEST(PipelineParallelCheck, RefusesWhatItDoesNotSplit) {
  auto spec = [](const std::string& name) {
    auto r = resolve_model(golden(name));
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    return r.is_ok() ? r->spec : ModelSpec{};
  };
  EXPECT_TRUE(check_pipeline_parallel(spec("llama3"), 2).is_ok());
  EXPECT_TRUE(check_pipeline_parallel(spec("deepseek-v3"), 3).is_ok());
  const Status too_many = check_pipeline_parallel(spec("llama3"), 3);
  EXPECT_EQ(too_many.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_many.message().find("2 decoder layers cannot give each stage one"), std::string::npos)
      << too_many.message();
  const Status linear = check_pipeline_parallel(spec("qwen3-next"), 2);
  EXPECT_EQ(linear.code(), StatusCode::kUnsupported);
  EXPECT_NE(linear.message().find("not yet"), std::string::npos) << linear.message();
  const Status pairs = check_pipeline_parallel(spec("longcat-flash"), 2);
  EXPECT_EQ(pairs.code(), StatusCode::kUnsupported) << pairs.message();
}

}  // namespace
}  // namespace day0::testing
