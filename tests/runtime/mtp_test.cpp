// Drafts from the checkpoint's multi-token-prediction layers (Engine::forward_mtp, MtpDrafter) on the
// DeepSeek-V3 miniature with one MTP layer (tests/golden/deepseek-v3-mtp, eh_proj) and the DeepSeek-V4 one
// (tests/golden/deepseek-v4-mtp: e_proj / h_proj over the hyper-connection streams, its own hc_head): the
// MTP layer's logits against tools/reference/make_mtp_golden.py's and make_v4_mtp_golden.py's torch
// references (transformers' decoder layers, the report's and the V4 inference code's math), the tokens of
// plain decoding with drafts of 1, 2 and 3 tokens, and the refusals of checkpoints whose MTP layers are
// absent or laid out otherwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "day0/backends/cpu/simd_level.h"
#include "day0/io/safetensors_file.h"
#include "day0/model/config_parser.h"
#include "day0/model/tensor_manifest.h"
#include "day0/runtime/mtp_drafter.h"
#include "golden.h"

namespace day0::testing {
namespace {

const char* const kGolden = "deepseek-v3-mtp";
const char* const kV4Golden = "deepseek-v4-mtp";

// A float32 tensor [rows, cols] of the reference file.
FloatMatrix reference_matrix(const SafetensorsFile& file, const std::string& name) {
  auto t = file.tensor(name);
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  if (!t.is_ok() || t->dtype != DType::kF32 || t->shape.size() != 2) return {};
  FloatMatrix m(t->shape[0], t->shape[1]);
  std::memcpy(m.data.data(), t->data.data(), m.data.size() * sizeof(float));
  return m;
}

struct MtpRun {
  LoadedModel model;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Engine> engine;
};

Result<MtpRun> open_mtp(EngineOptions options, const char* golden = kGolden) {
  MtpRun run;
  D0_ASSIGN_OR_RETURN(run.model, load_model(golden_dir(golden), LoadOptions{.mtp_layers = true}));
  BackendOptions bo;
  bo.n_threads = 2;
  D0_ASSIGN_OR_RETURN(run.backend, open_backend("cpu", bo));
  options.mtp_layers = true;
  D0_ASSIGN_OR_RETURN(run.engine, Engine::create(run.model.spec, run.model.weights, *run.backend, options));
  return run;
}

// Teacher-forced: the target's hidden state at every prompt position (V4: its hyper-connection streams) and
// the next prompt token give the MTP layer's logits of the token after; the same rows the reference computes.
class MtpGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(MtpGolden, DraftLogitsAndHiddenStatesMatchTheTorchReference) {
  const char* golden = GetParam();
  EngineOptions exact;
  exact.kv_dtype = KvDtype::kF32;
  auto run = open_mtp(exact, golden);
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  Engine& engine = *run->engine;
  ASSERT_EQ(engine.mtp_layers(), 1);
  auto file = SafetensorsFile::open(golden_dir(golden) + "/reference.safetensors");
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  auto reference = read_reference_dump(golden_dir(golden) + "/reference.safetensors");
  ASSERT_TRUE(reference.is_ok()) << reference.status().to_string();
  ASSERT_EQ(reference->prompts.size(), 3u);
  for (size_t i = 0; i < reference->prompts.size(); ++i) {
    SCOPED_TRACE(i);
    const std::vector<int32_t> ids(reference->prompts[i].input_ids.begin(),
                                   reference->prompts[i].input_ids.end());
    const auto rows = static_cast<int64_t>(ids.size()) - 1;
    KvCache cache = engine.new_cache();
    ForwardCapture target{.want_last_hidden = true};
    const SequenceStep prompt{&cache, ids};
    ASSERT_TRUE(engine.forward(std::span(&prompt, 1), true, &target).is_ok());
    ASSERT_EQ(target.last_hidden.rows, rows + 1);
    ASSERT_EQ(target.last_hidden.cols, engine.residual_width());
    KvCache mtp_cache = engine.new_mtp_cache(0);
    ForwardCapture mtp_out{.want_last_hidden = true};
    const SequenceStep next{&mtp_cache, std::span<const int32_t>(ids).subspan(1)};
    auto logits = engine.forward_mtp(
        0, std::span(&next, 1), ConstMatrix(target.last_hidden.data.data(), rows, target.last_hidden.cols),
        false, &mtp_out);
    ASSERT_TRUE(logits.is_ok()) << logits.status().to_string();
    const FloatMatrix want = reference_matrix(*file, fmt::format("mtp.{}.logits", i));
    const FloatMatrix want_hidden = reference_matrix(*file, fmt::format("mtp.{}.hidden", i));
    ASSERT_EQ(logits->rows, want.rows);
    ASSERT_EQ(logits->cols, want.cols);
    ASSERT_TRUE(mtp_out.last_hidden.same_shape(want_hidden));
    const auto [lo, hi] = std::minmax_element(want.data.begin(), want.data.end());
    const double range = *hi - *lo;
    double worst = 0, worst_hidden = 0, hidden_range = 0;
    for (int64_t r = 0; r < rows; ++r) {
      int64_t mine_top = 0, want_top = 0;
      for (int64_t v = 0; v < want.cols; ++v) {
        worst = std::max(worst, std::abs(static_cast<double>(logits->row(r)[v]) - want.row(r)[v]));
        if (logits->row(r)[v] > logits->row(r)[mine_top]) mine_top = v;
        if (want.row(r)[v] > want.row(r)[want_top]) want_top = v;
      }
      EXPECT_EQ(mine_top, want_top) << "row " << r;
      for (int64_t c = 0; c < want_hidden.cols; ++c) {
        worst_hidden = std::max(worst_hidden, std::abs(static_cast<double>(mtp_out.last_hidden.row(r)[c]) -
                                                       want_hidden.row(r)[c]));
        hidden_range = std::max(hidden_range, std::abs(static_cast<double>(want_hidden.row(r)[c])));
      }
    }
    EXPECT_LE(worst, 1e-5 * range) << "worst |logit difference| " << worst << " of a range of " << range;
    EXPECT_LE(worst_hidden, 1e-5 * hidden_range) << worst_hidden;
    std::printf("%s prompt %zu: MTP logits within %.2e of the range, hidden within %.2e of its largest\n",
                golden, i, worst / range, worst_hidden / hidden_range);
  }
}

INSTANTIATE_TEST_SUITE_P(Goldens, MtpGolden, ::testing::Values(kGolden, kV4Golden),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           return std::string(p.param == kGolden ? "DeepSeekV3" : "DeepSeekV4");
                         });

// Greedy speculative decoding of plain's length with k MTP drafts a step: its tokens must be plain
// decoding's, and every token after the first comes from a verification step (accepted drafts plus one a
// step). The run's statistics go to *stats (fatal failures return early: callers check
// ::testing::Test::HasFatalFailure).
void expect_mtp_run_is_plain(Engine& engine, const std::vector<int32_t>& prompt,
                             const GenerationResult& plain, int64_t k, SpecStats* stats) {
  MtpDrafter drafter(engine);
  GenerationRequest request;
  request.prompt = prompt;
  request.max_new = static_cast<int64_t>(plain.steps.size());
  request.sampling.greedy = true;
  auto spec = generate_speculative(engine, request, drafter, SpecOptions{.tokens = k});
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  ASSERT_EQ(spec->result.steps.size(), plain.steps.size());
  for (size_t s = 0; s < plain.steps.size(); ++s)
    EXPECT_EQ(spec->result.steps[s].chosen.token, plain.steps[s].chosen.token) << "step " << s;
  *stats = spec->stats;
  EXPECT_EQ(stats->accepted + stats->verify_steps, request.max_new - 1);
}

class MtpDrafts : public ::testing::TestWithParam<std::tuple<const char*, ActivationPrecision>> {};

TEST_P(MtpDrafts, EveryDraftLengthGivesPlainDecodingsTokens) {
  const auto [golden, precision] = GetParam();
  EngineOptions options;
  options.precision = precision;
  auto run = open_mtp(options, golden);
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  Engine& engine = *run->engine;
  const std::vector<int32_t> prompt = {5, 9, 2, 6, 5, 3, 5, 9, 2, 6, 5, 3, 5};
  constexpr int64_t kNew = 16;
  SamplingParams greedy;
  greedy.greedy = true;
  auto plain = generate(engine, prompt, kNew, greedy);
  ASSERT_TRUE(plain.is_ok()) << plain.status().to_string();
  ASSERT_EQ(plain->steps.size(), static_cast<size_t>(kNew));
  for (int64_t k = 1; k <= 3; ++k) {
    SCOPED_TRACE(k);
    SpecStats st;
    expect_mtp_run_is_plain(engine, prompt, *plain, k, &st);
    if (::testing::Test::HasFatalFailure()) return;
    // The MTP layer drafts at every step (up to k, fewer only where the token budget ends).
    EXPECT_GE(st.drafted, st.verify_steps - 1);  // the last step may have no budget left for drafts
    EXPECT_LE(st.drafted, k * st.verify_steps);
    std::printf("%s %s k=%lld: %lld of %lld MTP drafts accepted (%.1f%%), %.2f a step\n", golden,
                precision_name(precision), static_cast<long long>(k), static_cast<long long>(st.accepted),
                static_cast<long long>(st.drafted), 100 * st.acceptance_rate(), st.mean_accepted_per_step());
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, MtpDrafts,
                         ::testing::Combine(::testing::Values(kGolden, kV4Golden),
                                            ::testing::Values(ActivationPrecision::kF32,
                                                              ActivationPrecision::kBF16)),
                         [](const auto& p) {
                           return std::string(std::get<0>(p.param) == kGolden ? "DeepSeekV3_"
                                                                              : "DeepSeekV4_") +
                                  precision_name(std::get<1>(p.param));
                         });

// Greedy speculative decoding on `engine` (whose MTP layer copies its one-layer target) gives plain
// decoding's 24 tokens for 1 to 3 drafts a step, and accepts at least `min_rate` of the drafts.
void expect_copying_drafts_accepted(Engine& engine, double min_rate, const char* what) {
  const std::vector<int32_t> prompt = {17, 4, 200, 31, 9, 77, 4, 120, 63, 8, 150, 2, 99};
  constexpr int64_t kNew = 24;
  SamplingParams greedy;
  auto plain = generate(engine, prompt, kNew, greedy);
  ASSERT_TRUE(plain.is_ok()) << plain.status().to_string();
  for (int64_t k = 1; k <= 3; ++k) {
    SCOPED_TRACE(k);
    SpecStats st;
    expect_mtp_run_is_plain(engine, prompt, *plain, k, &st);
    if (::testing::Test::HasFatalFailure()) return;
    EXPECT_GE(st.acceptance_rate(), min_rate) << st.accepted << " of " << st.drafted;
    std::printf("copying %s MTP layer, k=%lld: %lld of %lld drafts accepted (%.1f%%), %.2f a step\n", what,
                static_cast<long long>(k), static_cast<long long>(st.accepted),
                static_cast<long long>(st.drafted), 100 * st.acceptance_rate(), st.mean_accepted_per_step());
  }
}

// A one-layer target (the golden's last layer, embedding rows scaled to unit RMS) and an MTP layer made to
// copy it: its decoder layer, shared_head.norm and head are the target's, enorm's gain is 1 (a unit-RMS row
// passes it unchanged) and eh_proj = [I | 0] keeps the next token's embedding and drops h. MTP row t then
// computes the target's step at position t + 1 with x_0 missing from its context (RoPE sees only position
// differences), and a chained draft the target's next step: most drafts should be the target's own tokens.
TEST(MtpDrafts, AnMtpLayerCopyingTheTargetIsMostlyAccepted) {
  EngineOptions exact;
  exact.kv_dtype = KvDtype::kF32;
  auto run = open_mtp(exact);
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  const ModelSpec& full = run->model.spec;
  const ModelWeights& w = *run->model.weights;
  const int64_t vocab = full.vocab_size, hidden = full.hidden_size;
  FloatMatrix table(vocab, hidden);  // [V, H] the embedding, each row scaled to RMS 1
  for (int64_t i = 0; i < vocab; ++i) {
    double squares = 0;
    for (int64_t j = 0; j < hidden; ++j) squares += std::pow(w.embedding.at(i, j), 2);
    const double scale = 1.0 / std::sqrt(squares / static_cast<double>(hidden));
    for (int64_t j = 0; j < hidden; ++j) table.row(i)[j] = static_cast<float>(w.embedding.at(i, j) * scale);
  }
  FloatMatrix pass(hidden, 2 * hidden);  // [H, 2H] = [I | 0]
  for (int64_t i = 0; i < hidden; ++i) pass.row(i)[i] = 1.0f;
  const std::vector<float> ones(static_cast<size_t>(hidden), 1.0f);
  auto one_layer = [&] {
    auto m = std::make_shared<ModelWeights>();
    m->embedding =
        WeightView{.format = WeightFormat::kF32, .rows = vocab, .cols = hidden, .data = table.data.data()};
    m->lm_head = w.lm_head;
    m->final_norm = w.final_norm;
    m->layers = {w.layers.back()};
    m->held_layers = {0, 1};
    m->vocab = w.vocab;
    m->source = w.source;
    return m;
  };
  auto copy = one_layer();
  copy->mtp_input = {
      ones, ones,
      Linear{WeightView{
          .format = WeightFormat::kF32, .rows = hidden, .cols = 2 * hidden, .data = pass.data.data()}}};
  auto target_weights = one_layer();
  target_weights->mtp = {copy};
  ModelSpec spec = full;
  spec.n_layers = 1;
  spec.layers = {full.layers.back()};
  EngineOptions options = exact;
  options.mtp_layers = true;
  auto target = Engine::create(spec, target_weights, *run->backend, options);
  ASSERT_TRUE(target.is_ok()) << target.status().to_string();
  Engine& engine = **target;

  expect_copying_drafts_accepted(engine, 0.5, "V3");
}

// DeepSeek-V4's layout: a one-layer target (the golden MTP layer's own decoder layer, a sliding one, with
// the main model's hc_head, norm and head; embedding rows scaled to unit RMS) and an MTP layer made to copy
// it: the same layer, hc_head, norm and head, enorm's gain 1, e_proj = I and h_proj = 0, so every stream of
// row t's input is the embedding of x_{t+1}, as the target's streams at t + 1 start. Past the window (8) the
// MTP row t attends to the keys the target's position t + 1 does: its drafts are the target's own tokens,
// chained ones too, on the hyper-connection streams, the MTP cache's window and its forks.
TEST(MtpDrafts, ADeepSeekV4MtpLayerCopyingTheTargetIsAccepted) {
  EngineOptions exact;
  exact.kv_dtype = KvDtype::kF32;
  auto run = open_mtp(exact, kV4Golden);
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  const ModelSpec& full = run->model.spec;
  const ModelWeights& w = *run->model.weights;
  ASSERT_EQ(w.mtp.size(), 1u);
  const int64_t vocab = full.vocab_size, hidden = full.hidden_size;
  FloatMatrix table(vocab, hidden);  // [V, H] the embedding, each row scaled to RMS 1
  for (int64_t i = 0; i < vocab; ++i) {
    double squares = 0;
    for (int64_t j = 0; j < hidden; ++j) squares += std::pow(w.embedding.at(i, j), 2);
    const double scale = 1.0 / std::sqrt(squares / static_cast<double>(hidden));
    for (int64_t j = 0; j < hidden; ++j) table.row(i)[j] = static_cast<float>(w.embedding.at(i, j) * scale);
  }
  FloatMatrix identity(hidden, hidden), zero(hidden, hidden);  // [H, H] e_proj and h_proj
  for (int64_t i = 0; i < hidden; ++i) identity.row(i)[i] = 1.0f;
  const std::vector<float> ones(static_cast<size_t>(hidden), 1.0f);
  auto f32 = [&](const FloatMatrix& m) {
    return Linear{
        WeightView{.format = WeightFormat::kF32, .rows = m.rows, .cols = m.cols, .data = m.data.data()}};
  };
  auto one_layer = [&] {
    auto m = std::make_shared<ModelWeights>();
    m->embedding =
        WeightView{.format = WeightFormat::kF32, .rows = vocab, .cols = hidden, .data = table.data.data()};
    m->lm_head = w.lm_head;
    m->final_norm = w.final_norm;
    m->hc_head = w.hc_head;
    m->layers = {w.mtp[0]->layers[0]};
    m->held_layers = {0, 1};
    m->vocab = w.vocab;
    m->source = w.source;
    return m;
  };
  auto copy = one_layer();
  copy->mtp_input.embedding_norm = ones;
  copy->mtp_input.hidden_norm = ones;
  copy->mtp_input.embedding_projection = f32(identity);
  copy->mtp_input.hidden_projection = f32(zero);
  auto target_weights = one_layer();
  target_weights->mtp = {copy};
  ModelSpec spec = full;
  spec.n_layers = 1;
  spec.layers = {mtp_layer_spec(full)};
  spec.n_mtp_layers = 0;
  EngineOptions options = exact;
  options.mtp_layers = true;
  auto target = Engine::create(spec, target_weights, *run->backend, options);
  ASSERT_TRUE(target.is_ok()) << target.status().to_string();
  Engine& engine = **target;

  expect_copying_drafts_accepted(engine, 0.9, "V4");
}

// Several sequences drafting together (serve's continuous batching): mtp_propose_batch runs one forward_mtp
// call per draft depth for all of them, and each sequence's drafts are the ones it drafts alone
// (MtpDrafter::propose). Five prefilled sequences, one blind (its drafter saw none of its first rows, as
// after a prefix-cache hit), ask for 0 to 3 drafts over four rounds (a sequence asking none lets its target
// rows pile up: the next round feeds several); each round the target takes every draft and its own next
// token, and both drafters of a sequence see the same hidden states. First the row-invariant forward_mtp
// itself: the sequences' teacher-forced rows (different counts) in one call give each row's logits and hidden
// state bit for bit as the sequence's call alone. At every SIMD level here, F32 and BF16 activations.
class MtpBatch : public ::testing::TestWithParam<const char*> {};

TEST_P(MtpBatch, SequencesDraftingTogetherDraftWhatEachDraftsAlone) {
  const char* golden = GetParam();
  auto model = load_model(golden_dir(golden), LoadOptions{.mtp_layers = true});
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  constexpr size_t kSequences = 5, kBlind = 4;
  constexpr int64_t kRounds = 4;
  const auto vocab = static_cast<int32_t>(model->spec.vocab_size);
  std::vector<std::vector<int32_t>> prompts(kSequences);  // [kSequences][5 .. 13]
  for (size_t s = 0; s < kSequences; ++s)
    for (size_t i = 0; i < 5 + 2 * s; ++i)
      prompts[s].push_back(static_cast<int32_t>((i * 37 + s * 61 + 11) % static_cast<size_t>(vocab)));
  for (SimdLevel level : available_simd_levels()) {
    BackendOptions bo;
    bo.n_threads = 2;
    bo.quiet = true;
    bo.simd = level;
    auto backend = open_backend("cpu", bo);
    ASSERT_TRUE(backend.is_ok()) << backend.status().to_string();
    for (ActivationPrecision precision : {ActivationPrecision::kF32, ActivationPrecision::kBF16}) {
      const std::string what =
          fmt::format("{} {} {}", golden, simd_level_name(level), precision_name(precision));
      SCOPED_TRACE(what);
      EngineOptions options;
      options.precision = precision;
      options.mtp_layers = true;
      auto created = Engine::create(model->spec, model->weights, **backend, options);
      ASSERT_TRUE(created.is_ok()) << created.status().to_string();
      Engine& engine = **created;
      const int64_t width = engine.residual_width();
      std::vector<KvCache> caches;       // the target's
      std::vector<FloatMatrix> prefill;  // [kSequences] x [prompt, width] the prompt's hidden states
      std::vector<int32_t> next;         // [kSequences] the target's token after the prompt
      caches.reserve(kSequences);
      for (size_t s = 0; s < kSequences; ++s) {
        caches.push_back(engine.new_cache());
        ForwardCapture capture{.want_last_hidden = true};
        const SequenceStep step{&caches[s], prompts[s]};
        auto logits = engine.forward(std::span(&step, 1), true, &capture);  // [1, vocab]
        ASSERT_TRUE(logits.is_ok()) << logits.status().to_string();
        next.push_back(pick_token(engine.backend(), logits->row_span(0), SamplingParams{}, 0));
        prefill.push_back(std::move(capture.last_hidden));
      }

      // forward_mtp, row-invariant: teacher-forced rows of every sequence in one call, then each alone.
      {
        std::vector<KvCache> together, alone;
        std::vector<SequenceStep> batch;
        std::vector<float> hidden;  // [rows of all sequences, width]
        std::vector<std::vector<int32_t>> ids(kSequences);
        together.reserve(kSequences);
        alone.reserve(kSequences);
        for (size_t s = 0; s < kSequences; ++s) {
          together.push_back(engine.new_mtp_cache(0));
          alone.push_back(engine.new_mtp_cache(0));
          ids[s].assign(prompts[s].begin() + 1, prompts[s].end());
          batch.push_back({&together[s], ids[s]});
          hidden.insert(hidden.end(), prefill[s].data.begin(),
                        prefill[s].data.begin() + static_cast<std::ptrdiff_t>(ids[s].size()) * width);
        }
        engine.set_row_invariant(true);
        ForwardCapture all{.want_last_hidden = true};
        auto logits = engine.forward_mtp(
            0, batch, ConstMatrix(hidden.data(), static_cast<int64_t>(hidden.size()) / width, width), false,
            &all);
        ASSERT_TRUE(logits.is_ok()) << logits.status().to_string();
        const FloatMatrix batched = copy_matrix(*logits);  // [rows of all sequences, vocab]
        int64_t row = 0;
        for (size_t s = 0; s < kSequences; ++s) {
          ForwardCapture one{.want_last_hidden = true};
          const SequenceStep step{&alone[s], ids[s]};
          const auto rows = static_cast<int64_t>(ids[s].size());
          auto own =
              engine.forward_mtp(0, std::span(&step, 1), ConstMatrix(prefill[s].data.data(), rows, width),
                                 false, &one);  // [rows, vocab]
          ASSERT_TRUE(own.is_ok()) << own.status().to_string();
          for (int64_t r = 0; r < rows; ++r, ++row) {
            EXPECT_EQ(std::memcmp(batched.row(row).data(), own->row(r),
                                  static_cast<size_t>(batched.cols) * sizeof(float)),
                      0)
                << "sequence " << s << " row " << r << ": logits";
            EXPECT_EQ(std::memcmp(all.last_hidden.row(row).data(), one.last_hidden.row(r).data(),
                                  static_cast<size_t>(width) * sizeof(float)),
                      0)
                << "sequence " << s << " row " << r << ": hidden state";
          }
        }
        engine.set_row_invariant(false);
      }

      // mtp_propose_batch against each sequence's lone proposals, round by round.
      std::vector<std::unique_ptr<MtpDrafter>> together, alone;
      std::vector<std::vector<int32_t>> history(kSequences);
      for (size_t s = 0; s < kSequences; ++s) {
        together.push_back(std::make_unique<MtpDrafter>(engine));
        alone.push_back(std::make_unique<MtpDrafter>(engine));
        const ConstMatrix h(prefill[s].data.data(), prefill[s].rows, width);
        for (auto* d : {together[s].get(), alone[s].get()}) {
          if (s == kBlind) {
            d->observe_target(h.row_slice(2, h.rows - 2), 2);  // its first two rows came from elsewhere
          } else {
            d->observe_target(h, 0);
          }
        }
        history[s] = prompts[s];
        history[s].push_back(next[s]);
      }
      int64_t drafted_together = 0;
      for (int64_t round = 0; round < kRounds; ++round) {
        SCOPED_TRACE(fmt::format("round {}", round));
        std::vector<MtpAsk> asks;
        int64_t depth = 0;
        for (size_t s = 0; s < kSequences; ++s) {
          const int64_t k = (static_cast<int64_t>(s) + round) % 4;  // 0 .. 3, each sequence its own
          asks.push_back({.drafter = together[s].get(), .history = history[s], .k = k});
          if (s != kBlind) depth = std::max(depth, k);
        }
        const int64_t calls = engine.mtp_calls();
        ASSERT_TRUE(mtp_propose_batch(engine, asks).is_ok());
        EXPECT_EQ(engine.mtp_calls() - calls, depth) << "one forward_mtp call per draft depth";
        EXPECT_FALSE(engine.row_invariant());  // the batch's setting went back
        for (size_t s = 0; s < kSequences; ++s) {
          const MtpAsk& ask = asks[s];
          EXPECT_TRUE(ask.status.is_ok()) << ask.status.to_string();
          const int64_t before = engine.mtp_calls();
          auto own = alone[s]->propose(history[s], ask.k);
          ASSERT_TRUE(own.is_ok()) << own.status().to_string();
          EXPECT_EQ(ask.drafts, *own) << "sequence " << s << " k " << ask.k;
          EXPECT_EQ(static_cast<int64_t>(own->size()), s == kBlind ? 0 : ask.k) << "sequence " << s;
          EXPECT_EQ(engine.mtp_calls() - before, static_cast<int64_t>(own->size()));
          drafted_together += static_cast<int64_t>(ask.drafts.size());
        }
        // The target takes every draft and its own token after them; both drafters see its hidden states.
        for (size_t s = 0; s < kSequences; ++s) {
          std::vector<int32_t> feed = {history[s].back()};
          feed.insert(feed.end(), asks[s].drafts.begin(), asks[s].drafts.end());
          const int64_t first = caches[s].length();
          ForwardCapture capture{.want_last_hidden = true};
          const SequenceStep step{&caches[s], feed};
          auto logits = engine.forward(std::span(&step, 1), true, &capture);  // [1, vocab]
          ASSERT_TRUE(logits.is_ok()) << logits.status().to_string();
          history[s].insert(history[s].end(), asks[s].drafts.begin(), asks[s].drafts.end());
          history[s].push_back(pick_token(engine.backend(), logits->row_span(0), SamplingParams{}, 0));
          const ConstMatrix h(capture.last_hidden.data.data(), capture.last_hidden.rows, width);
          together[s]->observe_target(h, first);
          alone[s]->observe_target(h, first);
        }
      }
      EXPECT_GT(drafted_together, 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Goldens, MtpBatch, ::testing::Values(kGolden, kV4Golden),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           return std::string(p.param == kGolden ? "DeepSeekV3" : "DeepSeekV4");
                         });

TEST(Mtp, ForwardMtpRefusesBadInputsAndEnginesWithoutMtpLayers) {
  auto run = open_mtp({});
  ASSERT_TRUE(run.is_ok()) << run.status().to_string();
  Engine& engine = *run->engine;
  KvCache cache = engine.new_mtp_cache(0);
  const std::vector<int32_t> ids = {3, 4};
  const SequenceStep step{&cache, ids};
  FloatMatrix hidden(1, engine.spec().hidden_size);  // one row for two tokens
  auto wrong_rows =
      engine.forward_mtp(0, std::span(&step, 1), ConstMatrix(hidden.data.data(), 1, hidden.cols));
  ASSERT_FALSE(wrong_rows.is_ok());
  EXPECT_EQ(wrong_rows.status().code(), StatusCode::kInvalidArgument);
  auto wrong_layer =
      engine.forward_mtp(1, std::span(&step, 1), ConstMatrix(hidden.data.data(), 1, hidden.cols));
  ASSERT_FALSE(wrong_layer.is_ok());
  EXPECT_EQ(wrong_layer.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cache.length(), 0);

  // DeepSeek-V4's MTP layer reads the target's hyper-connection streams [rows, hc_mult * hidden]: one
  // stream's width is refused.
  auto v4 = open_mtp({}, kV4Golden);
  ASSERT_TRUE(v4.is_ok()) << v4.status().to_string();
  ASSERT_EQ(v4->engine->residual_width(),
            v4->engine->spec().hidden_size * v4->engine->spec().hyper_connections->streams);
  KvCache v4_cache = v4->engine->new_mtp_cache(0);
  const SequenceStep v4_step{&v4_cache, std::span<const int32_t>(ids).first(1)};
  FloatMatrix one_stream(1, v4->engine->spec().hidden_size);
  auto narrow = v4->engine->forward_mtp(0, std::span(&v4_step, 1),
                                        ConstMatrix(one_stream.data.data(), 1, one_stream.cols));
  EXPECT_EQ(narrow.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(v4_cache.length(), 0);

  // The same weights without EngineOptions::mtp_layers: a plain engine, no MTP layer to run.
  auto plain = Engine::create(run->model.spec, run->model.weights, *run->backend, {});
  ASSERT_TRUE(plain.is_ok()) << plain.status().to_string();
  EXPECT_EQ((*plain)->mtp_layers(), 0);
  auto refused =
      (*plain)->forward_mtp(0, std::span(&step, 1), ConstMatrix(hidden.data.data(), 1, hidden.cols));
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);

  // Weights bound without their MTP layers cannot make an MTP engine.
  auto unbound = load_model(golden_dir(kGolden));
  ASSERT_TRUE(unbound.is_ok()) << unbound.status().to_string();
  EXPECT_TRUE(unbound->weights->mtp.empty());
  auto asked =
      Engine::create(unbound->spec, unbound->weights, *run->backend, EngineOptions{.mtp_layers = true});
  ASSERT_FALSE(asked.is_ok());
  EXPECT_NE(asked.status().message().find("LoadOptions::mtp_layers"), std::string::npos)
      << asked.status().to_string();
}

TEST(Mtp, CheckpointsWithoutDeepSeekV3MtpLayersAreRefusedByName) {
  // No MTP layers: the config key is named.
  auto none = load_model(golden_dir("deepseek-v3"), LoadOptions{.mtp_layers = true});
  ASSERT_FALSE(none.is_ok());
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("num_nextn_predict_layers"), std::string::npos)
      << none.status().to_string();
  // Qwen3.5's MTP module (mtp.fc over [embedding | hidden], mtp.layers.N): another layout, refused by name.
  auto spec = load_model_config(golden_dir("qwen3.5") + "/config.json");
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  spec->n_mtp_layers = 1;
  auto manifest = build_tensor_manifest(*spec);
  ASSERT_TRUE(manifest.is_ok()) << manifest.status().to_string();
  auto shapes = make_shape_only_source(*manifest);
  ASSERT_TRUE(shapes.is_ok()) << shapes.status().to_string();
  auto bound = bind_model_weights(*spec, *shapes, {}, {}, {}, /*mtp_layers=*/true);
  ASSERT_FALSE(bound.is_ok());
  EXPECT_EQ(bound.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(bound.status().message().find("not laid out as DeepSeek-V3's"), std::string::npos)
      << bound.status().to_string();
}

}  // namespace
}  // namespace day0::testing
