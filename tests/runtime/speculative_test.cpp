// Speculative decoding is exact: on goldens (a dense model and hybrids with recurrent state), every draft
// source and several draft lengths give the tokens, log-probabilities and finish reason of plain decoding
// (greedy, sampled, with penalties), stopping at stop tokens, max_new and the context mid-draft; the
// cache ends where plain decoding leaves it; the accept/resample rule for sampled drafts reproduces the
// target distribution (chi-square) where always accepting does not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <unistd.h>

#include <fmt/format.h>

#include "day0/backends/cpu/simd_level.h"
#include "day0/runtime/speculative.h"
#include "golden.h"

namespace day0::testing {
namespace {

EngineOptions exact_options() {
  EngineOptions o;
  o.kv_dtype = KvDtype::kF32;
  o.kv_block_tokens = 8;  // hybrids pass whole-block snapshots within a short generation
  return o;
}

std::vector<int32_t> prompt_of(int n, int vocab) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 37 + 11) % vocab);
  // A repeated stretch, so that the n-gram lookup finds something to propose.
  for (int i = 0; i < n / 2; ++i) t.push_back(t[static_cast<size_t>(i)]);
  return t;
}

// Proposes a known continuation (plain decoding's output), wrong at every `wrong_every`-th draft
// position of a call (0: never), so that acceptance stops at every position 1..k over a run.
class ScriptedDrafter final : public Drafter {
 public:
  ScriptedDrafter(std::vector<int32_t> sequence, int64_t wrong_every, int32_t vocab)
      : sequence_(std::move(sequence)), wrong_every_(wrong_every), vocab_(vocab) {}
  Result<std::vector<int32_t>> propose(std::span<const int32_t> history, int64_t k) override {
    std::vector<int32_t> out;
    ++calls_;
    for (int64_t i = 0; i < k && history.size() + static_cast<size_t>(i) < sequence_.size(); ++i) {
      int32_t t = sequence_[history.size() + static_cast<size_t>(i)];
      if (wrong_every_ > 0 && (i + calls_) % wrong_every_ == 0) t = (t + 1) % vocab_;
      out.push_back(t);
    }
    return out;
  }

 private:
  std::vector<int32_t> sequence_;
  int64_t wrong_every_;
  int32_t vocab_;
  int64_t calls_ = 0;
};

// Always proposes k tokens none of which the target would pick next (its first draft is off by one from
// the true next token): every step rejects at position 1.
class WrongDrafter final : public Drafter {
 public:
  WrongDrafter(std::vector<int32_t> sequence, int32_t vocab)
      : sequence_(std::move(sequence)), vocab_(vocab) {}
  Result<std::vector<int32_t>> propose(std::span<const int32_t> history, int64_t k) override {
    const int32_t next = history.size() < sequence_.size() ? sequence_[history.size()] : 0;
    return std::vector<int32_t>(static_cast<size_t>(k), (next + 1) % vocab_);
  }

 private:
  std::vector<int32_t> sequence_;
  int32_t vocab_;
};

struct Plain {
  GenerationResult result;
  int64_t cache_length = 0;
};

Plain plain_run(Engine& engine, const GenerationRequest& base) {
  KvCache cache = engine.new_cache();
  GenerationRequest r = base;
  r.cache = &cache;
  auto out = generate_batch(engine, std::span(&r, 1));
  EXPECT_TRUE(out.is_ok()) << out.status().to_string();
  return {out->front(), cache.length()};
}

SpecGeneration spec_run(Engine& engine, const GenerationRequest& base, Drafter& drafter, int64_t k,
                        int64_t* cache_length = nullptr, int64_t rows_per_forward = 0) {
  KvCache cache = engine.new_cache();
  GenerationRequest r = base;
  r.cache = &cache;
  auto out = generate_speculative(engine, r, drafter,
                                  SpecOptions{.tokens = k, .rows_per_forward = rows_per_forward});
  EXPECT_TRUE(out.is_ok()) << out.status().to_string();
  if (cache_length) *cache_length = cache.length();
  return std::move(out).value();
}

// Tokens, finish reason and log-probabilities (of the chosen and the top tokens) equal: verification
// steps run on the row-invariant kernels, so each row is bit for bit a one-token step's.
void expect_same(const GenerationResult& plain, const GenerationResult& spec, const std::string& what) {
  ASSERT_EQ(plain.tokens(), spec.tokens()) << what;
  EXPECT_EQ(plain.finish_reason, spec.finish_reason) << what;
  for (size_t i = 0; i < plain.steps.size(); ++i) {
    EXPECT_EQ(plain.steps[i].chosen.logprob, spec.steps[i].chosen.logprob) << what << " step " << i;
    ASSERT_EQ(plain.steps[i].top.size(), spec.steps[i].top.size()) << what;
    for (size_t j = 0; j < plain.steps[i].top.size(); ++j)
      EXPECT_EQ(plain.steps[i].top[j].logprob, spec.steps[i].top[j].logprob) << what << " step " << i;
  }
}

class SpeculativeGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(SpeculativeGolden, EveryDraftSourceAndLengthGivesPlainDecodingsTokens) {
  auto run = open_golden(GetParam(), "cpu", exact_options());
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  Engine& engine = *run->engine;
  const int32_t vocab = static_cast<int32_t>(engine.spec().vocab_size);
  // The draft model: the same weights in another engine with BF16 activations, close to the target but
  // not equal, so that its drafts are mostly but not always right.
  EngineOptions draft_options = exact_options();
  draft_options.precision = ActivationPrecision::kBF16;
  auto draft_engine = Engine::create(run->model.spec, run->model.weights, *run->backend, draft_options);
  ASSERT_TRUE(draft_engine.is_ok());

  const std::vector<int32_t> prompt = prompt_of(12, vocab);
  GenerationRequest request;
  request.prompt = prompt;
  request.max_new = 23;
  request.top_logprobs = 2;
  const Plain plain = plain_run(engine, request);
  ASSERT_EQ(plain.result.steps.size(), 23u);
  std::vector<int32_t> sequence = prompt;
  for (int32_t t : plain.result.tokens()) sequence.push_back(t);

  for (int64_t k : {1, 2, 4, 7}) {
    NgramDrafter ngram;
    ScriptedDrafter scripted(sequence, 3, vocab);
    ScriptedDrafter perfect(sequence, 0, vocab);
    WrongDrafter wrong(sequence, vocab);
    ModelDrafter model(**draft_engine);
    const std::pair<const char*, Drafter*> drafters[] = {{"ngram", &ngram},
                                                         {"scripted", &scripted},
                                                         {"perfect", &perfect},
                                                         {"wrong", &wrong},
                                                         {"model", &model}};
    for (const auto& [name, drafter] : drafters) {
      const std::string what = fmt::format("{} k={} {}", GetParam(), k, name);
      int64_t cache_length = 0;
      const SpecGeneration spec = spec_run(engine, request, *drafter, k, &cache_length);
      expect_same(plain.result, spec.result, what);
      EXPECT_EQ(cache_length, plain.cache_length) << what;
      EXPECT_LE(spec.stats.accepted, spec.stats.drafted) << what;
      EXPECT_EQ(spec.stats.accepted + spec.stats.verify_steps + 1, 23) << what;  // every token came from one
      if (std::string(name) == "perfect") {
        EXPECT_EQ(spec.stats.accepted, spec.stats.drafted) << what;
        EXPECT_EQ(spec.stats.verify_steps, (22 + k) / (k + 1)) << what;
      }
      if (std::string(name) == "wrong") {
        EXPECT_EQ(spec.stats.accepted, 0) << what;
      }
      if (std::string(name) == "scripted" && k > 1) {
        // Rejections at different positions: some steps accepted drafts, some did not.
        EXPECT_GT(spec.stats.accepted, 0) << what;
        EXPECT_LT(spec.stats.accepted, spec.stats.drafted) << what;
      }
      for (size_t i = 1; i < spec.stats.position_accepted.size(); ++i)
        EXPECT_LE(spec.stats.position_accepted[i], spec.stats.position_accepted[i - 1]) << what;
    }
  }
  // Verification in one forward step of k + 1 rows, or one row at a time: the same tokens (float32
  // activations round alike whatever the kernel).
  for (int64_t rows : {0, 1, 3}) {
    ScriptedDrafter scripted(sequence, 3, vocab);
    int64_t cache_length = 0;
    const SpecGeneration spec = spec_run(engine, request, scripted, 7, &cache_length, rows);
    expect_same(plain.result, spec.result, fmt::format("{} rows per forward {}", GetParam(), rows));
    EXPECT_EQ(cache_length, plain.cache_length);
  }
}

TEST_P(SpeculativeGolden, StopsAtStopTokensMaxNewAndTheContextMidDraft) {
  auto run = open_golden(GetParam(), "cpu", exact_options());
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  Engine& engine = *run->engine;
  const int32_t vocab = static_cast<int32_t>(engine.spec().vocab_size);
  const std::vector<int32_t> prompt = prompt_of(10, vocab);
  GenerationRequest request;
  request.prompt = prompt;
  request.max_new = 20;
  const Plain full = plain_run(engine, request);
  std::vector<int32_t> sequence = prompt;
  for (int32_t t : full.result.tokens()) sequence.push_back(t);

  // A stop token: the 6th generated token (plain decoding stops at its first occurrence).
  const int32_t stop = full.result.tokens()[5];
  request.stop_tokens = std::span(&stop, 1);
  const Plain stopped = plain_run(engine, request);
  ASSERT_EQ(stopped.result.finish_reason, "stop");
  for (int64_t k : {2, 4, 7}) {
    ScriptedDrafter perfect(sequence, 0, vocab);
    int64_t length = 0;
    const SpecGeneration spec = spec_run(engine, request, perfect, k, &length);
    expect_same(stopped.result, spec.result, fmt::format("stop token, k={}", k));
    EXPECT_EQ(length, stopped.cache_length);
  }
  request.stop_tokens = {};

  // A token callback that says stop after the 4th token.
  request.on_token = [n = 0](const GenerationStep&) mutable { return ++n < 4; };
  const Plain told = plain_run(engine, request);
  ASSERT_EQ(told.result.steps.size(), 4u);
  for (int64_t k : {1, 4, 7}) {
    ScriptedDrafter perfect(sequence, 0, vocab);
    expect_same(told.result, spec_run(engine, request, perfect, k).result, fmt::format("callback, k={}", k));
  }
  request.on_token = nullptr;

  // max_new shorter than, equal to and just past a draft.
  for (int64_t max_new : {1, 2, 3, 5, 9}) {
    request.max_new = max_new;
    const Plain short_run = plain_run(engine, request);
    for (int64_t k : {4, 7}) {
      ScriptedDrafter perfect(sequence, 0, vocab);
      int64_t length = 0;
      const SpecGeneration spec = spec_run(engine, request, perfect, k, &length);
      expect_same(short_run.result, spec.result, fmt::format("max_new {}, k={}", max_new, k));
      EXPECT_EQ(length, short_run.cache_length);
    }
  }

  // The model's context: 7 positions after the prompt.
  ModelSpec small = engine.spec();
  small.max_position_embeddings = static_cast<int64_t>(prompt.size()) + 7;
  auto narrow = Engine::create(small, run->model.weights, *run->backend, exact_options());
  ASSERT_TRUE(narrow.is_ok());
  request.max_new = 20;
  const Plain at_context = plain_run(**narrow, request);
  ASSERT_EQ(at_context.result.finish_reason, "length");
  ASSERT_LT(at_context.result.steps.size(), 20u);
  for (int64_t k : {3, 7}) {
    ScriptedDrafter perfect(sequence, 0, vocab);
    expect_same(at_context.result, spec_run(**narrow, request, perfect, k).result,
                fmt::format("context, k={}", k));
  }
}

TEST_P(SpeculativeGolden, SamplingAndPenaltiesGivePlainDecodingsTokens) {
  auto run = open_golden(GetParam(), "cpu", exact_options());
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  Engine& engine = *run->engine;
  const int32_t vocab = static_cast<int32_t>(engine.spec().vocab_size);
  const std::vector<int32_t> prompt = prompt_of(10, vocab);
  GenerationRequest request;
  request.prompt = prompt;
  request.max_new = 16;
  request.sampling.greedy = false;
  request.sampling.temperature = 0.9f;
  request.sampling.top_p = 0.95f;
  request.sampling.seed = 11;
  request.sampling.presence_penalty = 0.5f;
  request.sampling.frequency_penalty = 0.3f;
  const Plain plain = plain_run(engine, request);
  std::vector<int32_t> sequence = prompt;
  for (int32_t t : plain.result.tokens()) sequence.push_back(t);
  for (int64_t k : {1, 3, 5}) {
    ScriptedDrafter scripted(sequence, 2, vocab);
    NgramDrafter ngram;
    expect_same(plain.result, spec_run(engine, request, scripted, k).result, fmt::format("sampled, k={}", k));
    expect_same(plain.result, spec_run(engine, request, ngram, k).result,
                fmt::format("sampled ngram, k={}", k));
  }
}

std::string golden_test_name(const ::testing::TestParamInfo<const char*>& param) {
  std::string name = param.param;
  std::replace_if(
      name.begin(), name.end(), [](char c) { return !std::isalnum(c); }, '_');
  return name;
}
INSTANTIATE_TEST_SUITE_P(Goldens, SpeculativeGolden,
                         ::testing::Values("llama3", "qwen3.5", "nemotron-h", "gpt-oss", "llama4-text",
                                           "cohere2-moe", "deepseek-v4", "deepseek-v4-fp4"),
                         golden_test_name);

// A row-invariant step of N rows (Engine::set_row_invariant) gives, row for row, bit for bit the logits
// of feeding the same tokens one at a time, at every SIMD level here, with F32 and BF16 activations.
class RowInvariantGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(RowInvariantGolden, AStepOfNRowsGivesTheLogitsOfNOneTokenSteps) {
  auto run = open_golden(GetParam(), "cpu");
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  const int32_t vocab = static_cast<int32_t>(run->model.spec.vocab_size);
  const std::vector<int32_t> prompt = prompt_of(10, vocab);
  constexpr int64_t kRows = kMaxSpecTokens + 1;  // the widest verification step
  std::vector<int32_t> fed;                      // [kRows] the tokens after the prompt
  for (int64_t i = 0; i < kRows; ++i) fed.push_back(static_cast<int32_t>((i * 53 + 7) % vocab));
  for (SimdLevel level : available_simd_levels()) {
    BackendOptions backend_options;
    backend_options.simd = level;
    auto backend = make_backend("cpu", backend_options);
    ASSERT_TRUE(backend.is_ok()) << backend.status().to_string();
    for (ActivationPrecision precision : {ActivationPrecision::kF32, ActivationPrecision::kBF16}) {
      EngineOptions options;
      options.precision = precision;
      options.kv_block_tokens = 8;  // the step's rows cross pages
      auto engine = Engine::create(run->model.spec, run->model.weights, **backend, options);
      ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
      const std::string what = fmt::format("{} {}", simd_level_name(level),
                                           precision == ActivationPrecision::kBF16 ? "bf16" : "f32");
      const auto prefilled = [&] {
        KvCache cache = (*engine)->new_cache();
        const SequenceStep prefill{&cache, prompt};
        EXPECT_TRUE((*engine)->forward(std::span(&prefill, 1), true).is_ok());
        return cache;
      };
      // One token at a time, on the default kernels (a one-token step's): [kRows, vocab].
      std::vector<FloatMatrix> one_by_one;
      {
        KvCache cache = prefilled();
        for (int64_t i = 0; i < kRows; ++i) {
          const SequenceStep step{&cache, std::span<const int32_t>(fed).subspan(static_cast<size_t>(i), 1)};
          auto logits = (*engine)->forward(std::span(&step, 1));
          ASSERT_TRUE(logits.is_ok()) << logits.status().to_string();
          one_by_one.push_back(copy_matrix(*logits));
        }
      }
      for (int64_t n = 1; n <= kRows; ++n) {
        KvCache cache = prefilled();
        const SequenceStep step{&cache, std::span<const int32_t>(fed).first(static_cast<size_t>(n))};
        (*engine)->set_row_invariant(true);
        auto logits = (*engine)->forward(std::span(&step, 1));  // [n, vocab]
        (*engine)->set_row_invariant(false);
        ASSERT_TRUE(logits.is_ok()) << logits.status().to_string();
        for (int64_t r = 0; r < n; ++r) {
          const auto& expected = one_by_one[static_cast<size_t>(r)].data;
          ASSERT_EQ(std::memcmp(logits->row(r), expected.data(), expected.size() * sizeof(float)), 0)
              << what << ": row " << r << " of a step of " << n << " rows";
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Goldens, RowInvariantGolden,
                         ::testing::Values("llama3", "qwen3", "gemma4", "mixtral", "gpt-oss", "deepseek-v4",
                                           "deepseek-v4-fp4"),
                         golden_test_name);

TEST(Speculative, RefusesADraftLengthOutOfRangeAndACacheThatIsNotEmpty) {
  auto run = open_golden("llama3", "cpu", exact_options());
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  const std::vector<int32_t> prompt = {1, 2, 3};
  GenerationRequest request;
  request.prompt = prompt;
  NgramDrafter ngram;
  for (int64_t k : {int64_t{0}, kMaxSpecTokens + 1}) {
    const auto refused = generate_speculative(*run->engine, request, ngram, SpecOptions{.tokens = k});
    ASSERT_FALSE(refused.is_ok());
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(refused.status().to_string().find(fmt::format("found {}", k)), std::string::npos)
        << refused.status().to_string();
  }
  KvCache cache = run->engine->new_cache();
  const SequenceStep step{&cache, prompt};
  ASSERT_TRUE(run->engine->forward(std::span(&step, 1), true).is_ok());
  request.cache = &cache;
  const auto held = generate_speculative(*run->engine, request, ngram, SpecOptions{});
  ASSERT_FALSE(held.is_ok());
  EXPECT_NE(held.status().to_string().find("cache must start empty"), std::string::npos);
}

// Proposes the same token id whatever the history.
class FixedDrafter final : public Drafter {
 public:
  explicit FixedDrafter(int32_t token) : token_(token) {}
  Result<std::vector<int32_t>> propose(std::span<const int32_t>, int64_t k) override {
    return std::vector<int32_t>(static_cast<size_t>(k), token_);
  }

 private:
  int32_t token_;
};

TEST(Speculative, ADraftOutsideTheVocabularyIsAnErrorNotAStep) {
  auto run = open_golden("llama3", "cpu", exact_options());
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  const std::vector<int32_t> prompt = {1, 2, 3};
  GenerationRequest request;
  request.prompt = prompt;
  request.max_new = 8;
  FixedDrafter outside(static_cast<int32_t>(run->engine->spec().vocab_size));
  const auto refused = generate_speculative(*run->engine, request, outside, SpecOptions{});
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().to_string().find("outside the target's vocabulary of 256"), std::string::npos)
      << refused.status().to_string();
}

TEST(Speculative, NgramLookupProposesWhatFollowedTheLatestEarlierOccurrence) {
  NgramDrafter ngram;
  // "5 6 7" occurs twice before the tail; the latest one (followed by 9 8) wins over the first (1 2).
  const std::vector<int32_t> history = {5, 6, 7, 1, 2, 5, 6, 7, 9, 8, 4, 5, 6, 7};
  EXPECT_EQ(*ngram.propose(history, 2), (std::vector<int32_t>{9, 8}));
  EXPECT_EQ(*ngram.propose(history, 9), (std::vector<int32_t>{9, 8, 4, 5, 6, 7}));  // up to the end
  // No trigram match: a bigram one (1 4 -> 9), then with min_n 1 the last token alone (4 -> 5 6), which
  // the default (min_n 2) does not trust.
  const std::vector<int32_t> bigram = {1, 4, 9, 4, 5, 6, 2, 1, 4};
  EXPECT_EQ(*ngram.propose(bigram, 2), (std::vector<int32_t>{9, 4}));
  const std::vector<int32_t> shorter = {4, 5, 6, 1, 4};
  EXPECT_TRUE(ngram.propose(shorter, 2)->empty());
  NgramDrafter unigram(3, 1);
  EXPECT_EQ(*unigram.propose(shorter, 2), (std::vector<int32_t>{5, 6}));
  const std::vector<int32_t> none = {1, 2, 3};
  EXPECT_TRUE(ngram.propose(none, 4)->empty());
}

TEST(Speculative, ADraftWithAnotherVocabularyOrTokenizerIsRefused) {
  const auto root = std::filesystem::temp_directory_path() / fmt::format("day0_spec_{}", ::getpid());
  std::filesystem::create_directories(root / "target");
  std::filesystem::create_directories(root / "draft");
  auto write = [](const std::filesystem::path& p, const std::string& text) { std::ofstream(p) << text; };
  write(root / "target" / "tokenizer.json", "{\"model\": 1}");
  write(root / "draft" / "tokenizer.json", "{\"model\": 1}");
  ModelSpec target;
  target.vocab_size = 256;
  ModelSpec draft = target;
  EXPECT_TRUE(
      check_draft_matches(target, (root / "target").string(), draft, (root / "draft").string()).is_ok());
  draft.vocab_size = 300;
  const Status vocab =
      check_draft_matches(target, (root / "target").string(), draft, (root / "draft").string());
  EXPECT_EQ(vocab.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(vocab.to_string().find("300"), std::string::npos) << vocab.to_string();
  draft.vocab_size = 256;
  write(root / "draft" / "tokenizer.json", "{\"model\": 2}");
  const Status tok =
      check_draft_matches(target, (root / "target").string(), draft, (root / "draft").string());
  EXPECT_EQ(tok.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(tok.to_string().find("tokenizer.json differs"), std::string::npos) << tok.to_string();
  std::filesystem::remove_all(root);
}

// Pearson's chi-square of `counts` against `p` (n draws).
double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& p, int64_t n) {
  double chi = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double expected = p[i] * static_cast<double>(n);
    chi +=
        (static_cast<double>(counts[i]) - expected) * (static_cast<double>(counts[i]) - expected) / expected;
  }
  return chi;
}

TEST(Speculative, AcceptOrResampleReproducesTheTargetDistribution) {
  // Five tokens; the draft q favours what the target p does not.
  const std::vector<double> p = {0.40, 0.25, 0.15, 0.12, 0.08};
  const std::vector<double> q = {0.10, 0.15, 0.20, 0.25, 0.30};
  std::mt19937_64 rng(12345);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::discrete_distribution<int32_t> from_q(q.begin(), q.end());
  const int64_t n = 40000;
  std::vector<int64_t> counts(p.size(), 0), drafted(p.size(), 0);
  int64_t accepted = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t x = from_q(rng);
    const double u1 = uniform(rng), u2 = uniform(rng);
    const DraftVerdict v = accept_or_resample(p, q, x, u1, u2);
    ++counts[static_cast<size_t>(v.token)];
    ++drafted[static_cast<size_t>(x)];
    accepted += v.accepted ? 1 : 0;
  }
  // 4 degrees of freedom: P(chi-square > 18.47) = 0.001. Always accepting gives q, far beyond.
  EXPECT_LT(chi_square(counts, p, n), 18.47);
  EXPECT_GT(chi_square(drafted, p, n), 1000.0);
  // The acceptance rate is sum(min(p, q)) = 0.1 + 0.15 + 0.15 + 0.12 + 0.08 = 0.60.
  EXPECT_NEAR(static_cast<double>(accepted) / static_cast<double>(n), 0.60, 0.015);

  // A one-hot draft (a greedy drafter): accepted with probability p(x), otherwise p without x.
  std::vector<int64_t> one_hot_counts(p.size(), 0);
  const std::vector<double> hot = {0, 0, 1, 0, 0};
  for (int64_t i = 0; i < n; ++i) {
    const DraftVerdict v = accept_or_resample(p, hot, 2, uniform(rng), uniform(rng));
    ++one_hot_counts[static_cast<size_t>(v.token)];
  }
  EXPECT_LT(chi_square(one_hot_counts, p, n), 18.47);
}

}  // namespace
}  // namespace day0::testing
