// The engine turns failures into Status (a kernel that throws inside the thread pool, non-finite
// logits), and the generator validates its parameters and respects the model's context.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <new>
#include <random>

#include "day0/backends/kernel_list.h"
#include "day0/runtime/generate.h"
#include "golden.h"

namespace day0::testing {
namespace {

// Forwards every kernel to `inner`; matmul (or add, for NaN injection) misbehaves on request.
class FaultyBackend final : public Backend {
 public:
  explicit FaultyBackend(Backend& inner) : inner_(inner) {}
  std::string_view name() const override { return "faulty"; }
  ThreadPool* thread_pool() override { return inner_.thread_pool(); }
  bool supports(const OpKey& key) const override { return inner_.supports(key); }
  void synchronize() override { inner_.synchronize(); }
#define D0_FORWARD_KERNEL(method, Args, op_name) \
  void method(const Args& a) override {          \
    before(#method);                             \
    inner_.method(a);                            \
    after(#method, a);                           \
  }
  D0_FOR_EACH_KERNEL(D0_FORWARD_KERNEL)
#undef D0_FORWARD_KERNEL

  bool throw_in_matmul = false;  // a worker of the pool throws bad_alloc inside the matmul's job
  int64_t poison_add = -1;       // the n-th add of hidden rows (1-based) writes a NaN into its output (the
                                 // engine's [T, 1] finiteness sums are not counted)
  bool throw_in_swiglu = false;  // throws in the first FFN, after layer 0 appended to the KV cache

 private:
  void before(std::string_view op) {
    if (op == "swiglu" && throw_in_swiglu) throw std::runtime_error("injected FFN failure");
    if (op == "matmul" && throw_in_matmul) {
      ThreadPool& pool = *inner_.thread_pool();
      pool.run([&](int t) {
        if (t == pool.size() - 1) throw std::bad_alloc();
      });
    }
  }
  template <typename Args>
  void after(std::string_view, const Args&) {}
  void after(std::string_view op, const BinaryArgs& a) {
    if (op == "add" && a.out.cols > 1 && ++adds_ == poison_add)
      a.out.row(a.out.rows - 1)[0] = NAN;  // the row that gets logits
  }

  Backend& inner_;
  int64_t adds_ = 0;
};

TEST(EngineErrors, AKernelThatThrowsInsideThePoolIsAnErrorOfTheStep) {
  auto run = open_golden("llama3");
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  ASSERT_NE(run->backend->thread_pool(), nullptr);
  ASSERT_GT(run->backend->thread_pool()->size(), 1);
  FaultyBackend faulty(*run->backend);
  auto engine = Engine::create(run->model.spec, run->model.weights, faulty);
  ASSERT_TRUE(engine.is_ok());
  const std::vector<int32_t> ids = {1, 2, 3};
  KvCache cache = (*engine)->new_cache();
  const SequenceStep step{&cache, ids};
  faulty.throw_in_matmul = true;
  const auto failed = (*engine)->forward(std::span(&step, 1));
  ASSERT_FALSE(failed.is_ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kResourceExhausted) << failed.status().to_string();
  // The same engine and pool still work afterwards.
  faulty.throw_in_matmul = false;
  KvCache fresh = (*engine)->new_cache();
  const SequenceStep again{&fresh, ids};
  EXPECT_TRUE((*engine)->forward(std::span(&again, 1)).is_ok());
}

// A step that fails after some layers appended to the cache leaves the cache at its committed length:
// the same cache then computes what a fresh one computes.
TEST(EngineErrors, AFailedStepRollsTheCacheBack) {
  auto run = open_golden("llama3");
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  FaultyBackend faulty(*run->backend);
  auto engine = Engine::create(run->model.spec, run->model.weights, faulty);
  ASSERT_TRUE(engine.is_ok());
  Engine& e = **engine;
  const std::vector<int32_t> head = {1, 2, 3}, tail = {4, 5};
  KvCache cache = e.new_cache();
  const SequenceStep first{&cache, head};
  ASSERT_TRUE(e.forward(std::span(&first, 1)).is_ok());
  faulty.throw_in_swiglu = true;
  const SequenceStep second{&cache, tail};
  const auto failed = e.forward(std::span(&second, 1));
  ASSERT_FALSE(failed.is_ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kInternal) << failed.status().to_string();
  EXPECT_EQ(cache.length(), 3);
  faulty.throw_in_swiglu = false;
  auto retried = e.forward(std::span(&second, 1), true);
  ASSERT_TRUE(retried.is_ok()) << retried.status().to_string();
  const FloatMatrix got = copy_matrix(*retried);
  KvCache fresh = e.new_cache();
  const std::vector<int32_t> all = {1, 2, 3, 4, 5};
  const SequenceStep whole{&fresh, all};
  auto want = e.forward(std::span(&whole, 1), true);
  ASSERT_TRUE(want.is_ok());
  for (int64_t c = 0; c < want->cols; ++c) EXPECT_NEAR(got.row(0)[c], want->row(0)[c], 1e-3) << c;
}

TEST(EngineErrors, NonFiniteLogitsNameTheFirstLayerThatProducedThem) {
  auto run = open_golden("llama3");
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  ASSERT_GE(run->model.spec.n_layers, 2);
  FaultyBackend faulty(*run->backend);
  faulty.poison_add = 3;  // dense layers add twice each: the third add is layer 1's attention residual
  auto engine = Engine::create(run->model.spec, run->model.weights, faulty);
  ASSERT_TRUE(engine.is_ok());
  const std::vector<int32_t> ids = {1, 2, 3};
  auto g = generate(**engine, ids, 4, SamplingParams{});
  ASSERT_FALSE(g.is_ok());
  EXPECT_EQ(g.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(g.status().message().find("decoder layer 1 of"), std::string::npos) << g.status().to_string();
}

TEST(Generation, SamplingParametersAreValidatedUpFront) {
  auto run = open_golden("llama3");
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  const std::vector<int32_t> ids = {1, 2, 3};
  for (auto bad : {SamplingParams{.greedy = false, .temperature = NAN},
                   SamplingParams{.greedy = false, .temperature = -0.5f},
                   SamplingParams{.greedy = false, .temperature = 1.0f, .top_p = 0.0f},
                   SamplingParams{.greedy = false, .temperature = 1.0f, .top_p = 1.5f},
                   SamplingParams{.greedy = false, .temperature = 1.0f, .top_p = NAN},
                   SamplingParams{.greedy = false, .temperature = 1.0f, .top_k = -1}}) {
    const auto g = generate(*run->engine, ids, 2, bad);
    ASSERT_FALSE(g.is_ok());
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument) << g.status().to_string();
  }
}

TEST(Generation, ATinyTemperaturePicksTheArgmax) {
  auto run = open_golden("llama3");
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  const auto ids32 = [](const std::vector<int64_t>& v) { return std::vector<int32_t>(v.begin(), v.end()); };
  const auto ids = ids32(run->reference.prompts.front().input_ids);
  const auto greedy = generate(*run->engine, ids, 6, SamplingParams{});
  ASSERT_TRUE(greedy.is_ok());
  for (uint64_t seed : {1u, 7u, 99u}) {
    const auto cold =
        generate(*run->engine, ids, 6, SamplingParams{.greedy = false, .temperature = 1e-15f, .seed = seed});
    ASSERT_TRUE(cold.is_ok()) << cold.status().to_string();
    EXPECT_EQ(cold->tokens(), greedy->tokens()) << "seed " << seed;
  }
}

TEST(Generation, ASamplerWithoutLogprobsPicksTheSameTokensAndSkipsTheLogSoftmax) {
  auto run = open_golden("llama3");
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  Backend& backend = *run->backend;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<std::vector<float>> rows(12, std::vector<float>(500));  // [steps][vocab]
  for (auto& row : rows) {
    for (float& v : row) v = normal(rng);
  }
  for (const SamplingParams& params :
       {SamplingParams{}, SamplingParams{.greedy = false, .temperature = 0.8f, .top_p = 0.9f, .seed = 5},
        SamplingParams{.greedy = false, .temperature = 1.0f, .seed = 9, .frequency_penalty = 1.5f}}) {
    SequenceSampler with(params, 0, true), without(params, 0, false);
    for (const auto& row : rows) {
      const GenerationStep a = with.next(backend, row);
      const GenerationStep b = without.next(backend, row);
      EXPECT_EQ(a.chosen.token, b.chosen.token);
      EXPECT_NEAR(a.chosen.logprob, token_logprob(row, a.chosen.token), 1e-12);
      EXPECT_LT(a.chosen.logprob, 0.0);
      EXPECT_EQ(b.chosen.logprob, 0.0);  // not computed
    }
  }
  // Alternatives asked: the chosen token's log-probability comes with them.
  SequenceSampler top(SamplingParams{}, 2, false);
  const GenerationStep t = top.next(backend, rows[0]);
  EXPECT_NEAR(t.chosen.logprob, token_logprob(rows[0], t.chosen.token), 1e-12);
  ASSERT_EQ(t.top.size(), 2u);
}

TEST(Generation, StopsAtTheContextLimitAndRefusesPromptsLongerThanIt) {
  auto run = open_golden("qwen3");
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  ModelSpec spec = run->model.spec;
  ASSERT_EQ(spec.rope.type, RopeType::kDefault);  // the frequencies do not depend on the context
  spec.max_position_embeddings = 10;
  auto engine = Engine::create(spec, run->model.weights, *run->backend);
  ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
  const std::vector<int32_t> prompt = {5, 6, 7, 8};
  const auto g = generate(**engine, prompt, 100, SamplingParams{});
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  // Positions 0..9 can be fed: the prompt (4), then 6 generated tokens fed back; the 7th is the last.
  EXPECT_EQ(g->steps.size(), 7u);
  EXPECT_EQ(g->finish_reason, "length");
  const std::vector<int32_t> too_long(11, 3);
  const auto refused = generate(**engine, too_long, 1, SamplingParams{});
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("context of 10"), std::string::npos)
      << refused.status().to_string();
  // Stop tokens end a sequence with "stop".
  const std::vector<int32_t> stops = {g->steps[1].chosen.token};
  GenerationRequest r{.prompt = prompt, .max_new = 100, .stop_tokens = stops};
  const auto stopped = generate_batch(**engine, std::span(&r, 1));
  ASSERT_TRUE(stopped.is_ok());
  EXPECT_EQ(stopped->front().finish_reason, "stop");
  EXPECT_LE(stopped->front().steps.size(), 2u);
}

}  // namespace
}  // namespace day0::testing
