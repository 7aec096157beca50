// Speculative decoding inside `day0 serve`'s continuous batching (n-gram drafts, and the model's INT4
// copy drafting for every sequence in batched draft steps): concurrent requests of different lengths
// give, greedy, the tokens of a server without speculation and of plain decoding alone (`run`), on a
// dense golden and on a hybrid one (recurrent state rolled back to a checkpoint), with chunked prefill
// beside the verification rows, prefix caching and preemption on, with and without the draft-row cap;
// after a rollback to a checkpoint, the kept tokens are fed before the next one (no step feeds more
// than k + 1 of a sequence's own tokens);
// sampled, every seed gives plain decoding's tokens and the tokens after a verified draft follow the
// target's distribution (chi-square); the /metrics counters add up, the cap's among them. With the
// checkpoint's MTP layer drafting (DeepSeek-V3 and V4 miniatures) the same, and its drafts are `run`'s.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "day0/backends/backend.h"
#include "day0/runtime/generate.h"
#include "day0/runtime/mtp_drafter.h"
#include "day0/runtime/speculative.h"
#include "day0/serve/bench_client.h"
#include "day0/serve/metrics.h"
#include "serve_harness.h"

namespace day0::testing {
namespace {

// A prompt with a repeated stretch, so that n-gram lookup finds drafts from the first decoding step.
std::vector<int32_t> repetitive_prompt(int seed, int length) {
  std::vector<int32_t> p;
  for (int j = 0; j < length; ++j) p.push_back((seed * 37 + j * 11 + 5) % 250);
  for (int j = 0; j < length / 2; ++j) p.push_back(p[static_cast<size_t>(j)]);
  return p;
}

std::string completion_body(const std::vector<int32_t>& prompt, int max_tokens,
                            const nlohmann::json& extra = nlohmann::json::object()) {
  nlohmann::json j = {{"model", "mini"},  {"prompt", prompt}, {"max_tokens", max_tokens},
                      {"temperature", 0}, {"logprobs", 0},    {"stream", false}};
  for (const auto& [k, v] : extra.items()) j[k] = v;
  return j.dump();
}

std::vector<int32_t> tokens_of(const HttpReply& r) {
  std::vector<int32_t> out;
  const auto j = r.json();
  if (!j.contains("choices")) return out;
  for (const auto& t : j["choices"][0]["logprobs"]["tokens"]) {
    const std::string s = t.get<std::string>();
    EXPECT_EQ(s.rfind("token_id:", 0), 0u) << s;
    out.push_back(std::stoi(s.substr(9)));
  }
  return out;
}

// Every request at once (one client thread each); the tokens of each reply.
std::vector<std::vector<int32_t>> serve_concurrently(ServeHarness& h,
                                                     const std::vector<std::vector<int32_t>>& prompts,
                                                     const std::vector<int>& max_tokens,
                                                     const nlohmann::json& extra = nlohmann::json::object()) {
  std::vector<HttpReply> replies(prompts.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i) {
    clients.emplace_back([&, i] {
      replies[i] = http_post(h.port(), "/v1/completions", completion_body(prompts[i], max_tokens[i], extra));
    });
  }
  for (auto& t : clients) t.join();
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < replies.size(); ++i) {
    EXPECT_EQ(replies[i].status, 200) << "request " << i << ": " << replies[i].body;
    out.push_back(tokens_of(replies[i]));
  }
  return out;
}

// Plain decoding of each prompt alone on a fresh engine over the golden's weights (what `day0 run`
// does).
std::vector<std::vector<int32_t>> run_alone(const std::string& golden,
                                            const std::vector<std::vector<int32_t>>& prompts,
                                            const std::vector<int>& max_tokens) {
  auto model = load_model(golden_model_dir(golden));
  EXPECT_TRUE(model.is_ok());
  BackendOptions bo;
  bo.n_threads = 2;
  bo.quiet = true;
  auto backend = open_backend("cpu", bo);
  EXPECT_TRUE(backend.is_ok());
  EngineOptions eo;
  eo.kv_dtype = KvDtype::kF32;
  auto engine = Engine::create(model->spec, model->weights, **backend, eo);
  EXPECT_TRUE(engine.is_ok());
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest r;
    r.prompt = prompts[i];
    r.max_new = max_tokens[i];
    auto g = generate_batch(**engine, std::span(&r, 1));
    EXPECT_TRUE(g.is_ok());
    out.push_back(g.is_ok() ? (*g)[0].tokens() : std::vector<int32_t>{});
  }
  return out;
}

// Prompts whose continuation n-gram lookup can guess: X, the first `echoed` tokens plain decoding
// gives after X, then X again (a random miniature rarely repeats itself otherwise). Models that
// continue the second X as they did the first get drafts accepted; where they part, drafts are
// rejected.
std::vector<std::vector<int32_t>> echo_prompts(const std::string& golden,
                                               const std::vector<std::vector<int32_t>>& xs,
                                               const std::vector<int>& echoed) {
  const auto continuations = run_alone(golden, xs, echoed);
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < xs.size(); ++i) {
    std::vector<int32_t> p = xs[i];
    p.insert(p.end(), continuations[i].begin(), continuations[i].end());
    p.insert(p.end(), xs[i].begin(), xs[i].end());
    out.push_back(std::move(p));
  }
  return out;
}

SpecStats spec_metrics(ServeHarness& h) {
  const auto st = serve::spec_stats_from_metrics(http_get(h.port(), "/metrics").body);
  EXPECT_TRUE(st.has_value());
  return st.value_or(SpecStats{});
}

// The counters' own invariants: accepted within proposed, in all and at every position; a draft at
// position i + 1 exists only after one at i, and is accepted only after i was.
void expect_consistent(const SpecStats& st, int64_t k) {
  EXPECT_LE(st.accepted, st.drafted);
  ASSERT_EQ(st.position_drafted.size(), static_cast<size_t>(k));
  int64_t drafted = 0, accepted = 0;
  for (size_t i = 0; i < st.position_drafted.size(); ++i) {
    EXPECT_LE(st.position_accepted[i], st.position_drafted[i]) << "position " << i + 1;
    if (i > 0) {
      EXPECT_LE(st.position_drafted[i], st.position_drafted[i - 1]) << "position " << i + 1;
      EXPECT_LE(st.position_accepted[i], st.position_accepted[i - 1]) << "position " << i + 1;
    }
    drafted += st.position_drafted[i];
    accepted += st.position_accepted[i];
  }
  EXPECT_EQ(drafted, st.drafted);
  EXPECT_EQ(accepted, st.accepted);
}

struct Case {
  std::string golden;
  int64_t kv_blocks = 0;  // 0: the harness's (no preemption)
  DraftSource source = DraftSource::kNgram;
  int64_t max_rows = 0;         // the draft-row cap (0: none)
  int64_t draft_kv_blocks = 0;  // self-int4: the draft pool's capacity (0: the scheduler's rule)
};

// Greedy: with speculation, every concurrent stream gives the tokens of the same server without it
// and of plain decoding alone; drafts were proposed, some accepted and some rejected.
void greedy_identical(const Case& c, int64_t k) {
  SCOPED_TRACE(c.golden + " " + draft_source_name(c.source) + " k " + std::to_string(k) + " kv_blocks " +
               std::to_string(c.kv_blocks) + " max rows " + std::to_string(c.max_rows) + " draft blocks " +
               std::to_string(c.draft_kv_blocks));
  std::vector<std::vector<int32_t>> xs;
  std::vector<int> max_tokens, echoed;
  for (int i = 0; i < 10; ++i) {
    xs.push_back(repetitive_prompt(i, 4 + 6 * (i % 5)));
    max_tokens.push_back(10 + 5 * (i % 4));
    echoed.push_back(6 + 3 * (i % 3));
  }
  std::vector<std::vector<int32_t>> prompts = echo_prompts(c.golden, xs, echoed);
  prompts.push_back(prompts[1]);  // served again: a prefix-cache hit
  max_tokens.push_back(max_tokens[1]);
  HarnessOptions o;
  o.model_dir = golden_model_dir(c.golden);
  o.kv_dtype = KvDtype::kF32;
  o.server.scheduler.max_batch_tokens = 24;  // prefill chunks beside the verification rows
  o.server.scheduler.max_seqs = 8;
  if (c.kv_blocks > 0) o.server.scheduler.kv_blocks = c.kv_blocks;
  std::vector<std::vector<int32_t>> plain, spec, alone;
  {
    ServeHarness h(o);
    plain = serve_concurrently(h, prompts, max_tokens);
  }
  o.server.scheduler.spec = c.source;
  o.server.scheduler.spec_tokens = k;
  o.server.scheduler.spec_max_rows = c.max_rows;
  o.server.scheduler.draft_kv_blocks = c.draft_kv_blocks;
  {
    ServeHarness h(o);
    spec = serve_concurrently(h, prompts, max_tokens);
    const SpecStats st = spec_metrics(h);
    expect_consistent(st, k);
    EXPECT_GT(st.drafted, 0);
    // Without the cap every sequence verifies the drafts its own tokens give, so some are accepted
    // whatever the arrival order. Under the cap, which sequences draft depends on what shares their
    // steps (no drafts beside a prefill chunk), that is on the clients' timing: a loaded machine can
    // leave only drafts that are rejected.
    if (c.max_rows == 0) {
      EXPECT_GT(st.accepted, 0);
    }
    EXPECT_LT(st.accepted, st.drafted);
    if (c.kv_blocks > 0) {
      EXPECT_GT(h.server().metrics().preemptions(), 0);
    }
    if (c.source == DraftSource::kSelfInt4) {
      // The draft pool stays within its capacity; a tiny one turns sequences away, and /metrics says so.
      const serve::SchedulerGauges g = h.server().metrics().gauges();
      EXPECT_GT(g.draft_kv_blocks_total, 0);
      EXPECT_LE(g.draft_kv_blocks_used, g.draft_kv_blocks_total);
      const int64_t pool_full = h.server().metrics().spec_draft_pool_full();
      if (c.draft_kv_blocks > 0) {
        EXPECT_EQ(g.draft_kv_blocks_total, c.draft_kv_blocks);
        EXPECT_GT(pool_full, 0);
      } else if (c.kv_blocks == 0) {
        EXPECT_EQ(pool_full, 0);  // as many tokens as the target's pool: room for every sequence
      }
      const std::string text = http_get(h.port(), "/metrics").body;
      EXPECT_EQ(metric_value(text, "day0:spec_decode_draft_pool_full_total", "model_name=\"mini\""),
                static_cast<double>(pool_full));
      EXPECT_EQ(metric_value(text, "day0:spec_decode_draft_kv_capacity_blocks", "model_name=\"mini\""),
                static_cast<double>(g.draft_kv_blocks_total));
    }
  }
  alone = run_alone(c.golden, prompts, max_tokens);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(spec[i].size(), static_cast<size_t>(max_tokens[i])) << "request " << i;
    EXPECT_EQ(spec[i], plain[i]) << "request " << i;
    EXPECT_EQ(spec[i], alone[i]) << "request " << i;
  }
}

TEST(ServeSpec, GreedyStreamsGiveThePlainTokensOnADenseModel) {
  greedy_identical({"llama3"}, 3);
  greedy_identical({"llama3"}, 5);
  // The cap: up to 12 rows a step, drafts to the sequences accepting most.
  greedy_identical({.golden = "llama3", .max_rows = 12}, 4);
}

TEST(ServeSpec, GreedyStreamsGiveThePlainTokensUnderPreemption) {
  // 16 blocks: each sequence takes two layers x up to 2 blocks of 32; eight running do not fit.
  greedy_identical({"llama3", 16}, 4);
}

TEST(ServeSpec, GreedyStreamsGiveThePlainTokensOnAHybridModel) {
  greedy_identical({"qwen3-next"}, 4);
  // One attention layer takes blocks: 6 blocks hold two sequences at their longest, and eight run.
  greedy_identical({"qwen3-next", 6}, 3);
}

// The model's INT4 copy drafts for every decoding sequence (one draft step per draft position for all
// of them), its caches following each sequence's accepted and rejected drafts, preemptions and all, on
// a dense and on a hybrid model.
TEST(ServeSpec, GreedyStreamsGiveThePlainTokensWithTheSelfInt4Draft) {
  greedy_identical({.golden = "llama3", .source = DraftSource::kSelfInt4}, 3);
  greedy_identical({.golden = "llama3", .kv_blocks = 16, .source = DraftSource::kSelfInt4, .max_rows = 8}, 4);
  // A hybrid draft: its recurrent state goes back to the checkpoint after the accepted history.
  greedy_identical({.golden = "qwen3-next", .source = DraftSource::kSelfInt4}, 3);
}

// A draft pool of 4 blocks (two sequences of up to 32 tokens on the two-layer model) under eight
// streams: the sequences it has no room for decode without drafts that step, and the tokens stay plain
// decoding's; the target's pool is never touched for it.
TEST(ServeSpec, ATinyDraftPoolTurnsSequencesAwayWithoutChangingTokens) {
  greedy_identical({.golden = "llama3", .source = DraftSource::kSelfInt4, .draft_kv_blocks = 4}, 3);
  // One attention layer takes blocks: 2 blocks hold two short sequences.
  greedy_identical({.golden = "qwen3-next", .source = DraftSource::kSelfInt4, .draft_kv_blocks = 2}, 3);
}

// A model with recurrent state (or DeepSeek-V4's partial compression groups) goes back only to the
// checkpoint taken before the step when a draft is rejected, and the tokens it keeps are fed again. As
// `run` does, they are fed first in a call of their own, and the next checkpoint follows them: with the
// new drafts beside them the checkpoint stayed before them, and each further rejection fed them again
// one token longer, the cache never moving on. No row cap and k = 2, drafts that the miniatures' INT4
// copies and MTP layers often get wrong: no step feeds more than k + 1 of a sequence's own tokens, the
// cache moves on over any two steps, a step with drafts after a rollback feeds all its own tokens but
// the last before the checkpoint, and the tokens are plain decoding's.
void rollbacks_move_on(const std::string& golden, DraftSource source) {
  SCOPED_TRACE(golden + " " + draft_source_name(source));
  const int64_t k = 2;
  std::vector<std::vector<int32_t>> xs;
  std::vector<int> max_tokens, echoed;
  for (int i = 0; i < 8; ++i) {
    xs.push_back(repetitive_prompt(i + 20, 6 + 4 * (i % 4)));
    max_tokens.push_back(16 + 4 * (i % 3));
    echoed.push_back(4 + 2 * (i % 3));
  }
  const std::vector<std::vector<int32_t>> prompts = echo_prompts(golden, xs, echoed);
  HarnessOptions o;
  o.model_dir = golden_model_dir(golden);
  o.kv_dtype = KvDtype::kF32;
  o.server.scheduler.max_seqs = 8;
  o.server.scheduler.spec = source;
  o.server.scheduler.spec_tokens = k;
  o.server.scheduler.spec_max_rows = 0;
  std::mutex mutex;
  std::map<uint64_t, std::vector<serve::VerifiedStep>> steps;  // by sequence, in order
  o.server.scheduler.on_verified = [&](const serve::VerifiedStep& v) {
    std::lock_guard lock(mutex);
    steps[v.sequence].push_back(v);
  };
  std::vector<std::vector<int32_t>> spec;
  {
    ServeHarness h(o);
    spec = serve_concurrently(h, prompts, max_tokens);
    expect_consistent(spec_metrics(h), k);
  }
  std::lock_guard lock(mutex);
  ASSERT_EQ(steps.size(), prompts.size());
  int64_t rollbacks = 0, refeeds = 0;
  for (const auto& [id, seq] : steps) {
    for (size_t i = 0; i < seq.size(); ++i) {
      const serve::VerifiedStep& v = seq[i];
      SCOPED_TRACE(
          fmt::format("sequence {} step {}: start {} known {} refed {} drafts {} accepted {} length {}", id,
                      i, v.start, v.known, v.refed, v.drafts, v.accepted, v.length));
      EXPECT_LE(v.known, k + 1);
      if (i == 0) continue;
      const serve::VerifiedStep& before = seq[i - 1];
      EXPECT_EQ(v.start, before.length);
      EXPECT_GT(v.length, before.start);
      // The one before went back to its checkpoint: this one's drafts come after the tokens it keeps.
      const bool rolled_back = before.drafts > 0 && before.length == before.start + before.refed;
      EXPECT_EQ(v.refed, rolled_back && v.drafts > 0 ? v.known - 1 : 0);
      rollbacks += rolled_back ? 1 : 0;
      refeeds += v.refed > 0 ? 1 : 0;
    }
  }
  EXPECT_GT(rollbacks, 0);
  EXPECT_GT(refeeds, 0);
  const auto alone = run_alone(golden, prompts, max_tokens);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(spec[i], alone[i]) << "request " << i;
}

TEST(ServeSpec, AfterARollbackTheKeptTokensAreFedBeforeTheNextCheckpoint) {
  rollbacks_move_on("qwen3.5", DraftSource::kSelfInt4);      // Gated DeltaNet
  rollbacks_move_on("olmo-hybrid", DraftSource::kSelfInt4);  // its own linear-attention layers
  rollbacks_move_on("deepseek-v4-mtp", DraftSource::kMtp);   // compressed KV's partial groups
}

// A cap the decoding rows alone fill: no step verifies a draft, every drafts the n-gram lookup found
// is counted as withheld, and the tokens are plain decoding's.
TEST(ServeSpec, ACapTheDecodingRowsFillWithholdsEveryDraft) {
  const std::vector<std::vector<int32_t>> prompts =
      echo_prompts("llama3", {repetitive_prompt(1, 10), repetitive_prompt(2, 14)}, {8, 8});
  const std::vector<int> max_tokens = {12, 12};
  HarnessOptions o;
  o.kv_dtype = KvDtype::kF32;
  o.server.scheduler.spec = DraftSource::kNgram;
  o.server.scheduler.spec_tokens = 3;
  o.server.scheduler.spec_max_rows = 1;
  ServeHarness h(o);
  const auto spec = serve_concurrently(h, prompts, max_tokens);
  const std::string text = http_get(h.port(), "/metrics").body;
  const SpecStats st = spec_metrics(h);
  EXPECT_EQ(st.drafted, 0);
  EXPECT_GT(st.verify_steps, 0);
  const int64_t withheld = h.server().metrics().spec_withheld_drafts();
  EXPECT_GT(withheld, 0);
  EXPECT_EQ(metric_value(text, "day0:spec_decode_cap_withheld_draft_tokens_total", "model_name=\"mini\""),
            static_cast<double>(withheld));
  EXPECT_EQ(metric_value(text, "day0:spec_decode_max_rows", "model_name=\"mini\""), 1.0);
  const auto alone = run_alone("llama3", prompts, max_tokens);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(spec[i], alone[i]) << "request " << i;
}

// Sampled (temperature 0.25: peaked enough for the test's bins): each seed gives plain decoding's tokens with
// speculation on (the one-hot rule draws the target's own token with plain decoding's seed stream), and the
// token after each verified draft position follows the target's distribution: over many seeds the second
// token's counts, against the probabilities the model gives after each sample's first token, pass a
// chi-square test at p > 1e-4.
TEST(ServeSpec, SamplingKeepsTheTargetDistribution) {
  const std::vector<int32_t> prompt = echo_prompts("llama3", {repetitive_prompt(3, 12)}, {8})[0];
  const int max_tokens = 6, n_seeds = 200;
  const double temperature = 0.25;
  HarnessOptions o;
  o.kv_dtype = KvDtype::kF32;
  o.server.scheduler.spec = DraftSource::kNgram;
  o.server.scheduler.spec_tokens = 3;
  std::vector<std::vector<int32_t>> spec, plain;
  SpecStats st;
  {
    ServeHarness h(o);
    for (int seed = 0; seed < n_seeds; ++seed) {
      const HttpReply r =
          http_post(h.port(), "/v1/completions",
                    completion_body(prompt, max_tokens, {{"temperature", temperature}, {"seed", seed}}));
      ASSERT_EQ(r.status, 200) << r.body;
      spec.push_back(tokens_of(r));
    }
    st = spec_metrics(h);
  }
  expect_consistent(st, 3);
  EXPECT_GT(st.drafted, 0);
  o.server.scheduler.spec = DraftSource::kNone;
  {
    ServeHarness h(o);
    for (int seed = 0; seed < 24; ++seed) {
      const HttpReply r =
          http_post(h.port(), "/v1/completions",
                    completion_body(prompt, max_tokens, {{"temperature", temperature}, {"seed", seed}}));
      plain.push_back(tokens_of(r));
    }
    for (int seed = 0; seed < 24; ++seed)
      EXPECT_EQ(spec[static_cast<size_t>(seed)], plain[static_cast<size_t>(seed)]) << "seed " << seed;

    // Expected counts of the second token: p(. | prompt, first token) summed over the samples.
    BackendOptions bo;
    bo.n_threads = 2;
    bo.quiet = true;
    auto backend = open_backend("cpu", bo);
    ASSERT_TRUE(backend.is_ok());
    EngineOptions eo;
    eo.kv_dtype = KvDtype::kF32;
    auto engine = Engine::create(h.model().spec, h.model().weights, **backend, eo);
    ASSERT_TRUE(engine.is_ok());
    const auto vocab = static_cast<size_t>(h.model().spec.vocab_size);
    std::vector<double> expected(vocab, 0.0), observed(vocab, 0.0);
    std::map<int32_t, std::vector<double>> p_after;  // first token -> p [vocab]
    for (const auto& tokens : spec) {
      ASSERT_GE(tokens.size(), 2u);
      auto& p = p_after[tokens[0]];
      if (p.empty()) {
        KvCache cache = (*engine)->new_cache();
        std::vector<int32_t> fed = prompt;
        fed.push_back(tokens[0]);
        const SequenceStep step{&cache, fed};
        auto logits = (*engine)->forward(std::span(&step, 1), true);  // [1, vocab]
        ASSERT_TRUE(logits.is_ok());
        const std::span<const float> row = logits->row_span(0);
        const float mx = *std::max_element(row.begin(), row.end());
        double sum = 0;
        for (float v : row) sum += std::exp((static_cast<double>(v) - mx) / temperature);
        for (float v : row) p.push_back(std::exp((static_cast<double>(v) - mx) / temperature) / sum);
      }
      for (size_t t = 0; t < vocab; ++t) expected[t] += p[t];
      observed[static_cast<size_t>(tokens[1])] += 1;
    }
    // Bins of at least 5 expected samples; the rest pooled into one.
    double chi2 = 0, rest_expected = 0, rest_observed = 0;
    int bins = 0;
    for (size_t t = 0; t < vocab; ++t) {
      if (expected[t] >= 5) {
        chi2 += (observed[t] - expected[t]) * (observed[t] - expected[t]) / expected[t];
        ++bins;
      } else {
        rest_expected += expected[t];
        rest_observed += observed[t];
      }
    }
    if (rest_expected > 0) {
      chi2 += (rest_observed - rest_expected) * (rest_observed - rest_expected) / rest_expected;
      ++bins;
    }
    ASSERT_GE(bins, 2);
    // The chi-square quantile at 1 - 1e-4 for bins - 1 degrees of freedom (Wilson-Hilferty).
    const double dof = bins - 1, z = 3.719;
    const double bound = dof * std::pow(1 - 2 / (9 * dof) + z * std::sqrt(2 / (9 * dof)), 3);
    EXPECT_LT(chi2, bound) << bins << " bins";
  }
}

// `day0 bench serve` against a speculating server reports the drafts of its run (the growth of the
// server's counters), consistent with the metrics.
TEST(ServeSpec, BenchServeReportsTheRunsAcceptance) {
  HarnessOptions o;
  o.server.scheduler.spec = DraftSource::kNgram;
  o.server.scheduler.spec_tokens = 4;
  ServeHarness h(o);
  serve::BenchOptions b;
  b.url = "http://127.0.0.1:" + std::to_string(h.port());
  b.concurrency = 4;
  b.requests = 8;
  b.prompt_len = {6, 6};
  b.output_len = {24, 24};
  b.max_token_id = 14;  // few distinct ids: prompts repeat themselves, so drafts are found
  auto r = serve::run_serve_bench(b);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->failed, 0) << r->first_error;
  ASSERT_TRUE(r->spec.has_value());
  expect_consistent(*r->spec, 4);
  EXPECT_GT(r->spec->drafted, 0);
  // Every token after a request's first came from a verification step.
  EXPECT_EQ(r->spec->accepted + r->spec->verify_steps, 8 * 23);
  EXPECT_EQ(serve::to_json(*r)["speculative"]["drafted"].get<int64_t>(), r->spec->drafted);
  const SpecStats total = spec_metrics(h);
  EXPECT_EQ(total.drafted, r->spec->drafted);
}

TEST(ServeSpec, MetricsParseBackAndSubtract) {
  serve::ServeMetrics m;
  m.enable_spec(3);
  m.count_verification(3, 1);
  m.count_verification(2, 2);
  m.count_verification(0, 0);
  const auto before = serve::spec_stats_from_metrics(m.render("mini"));
  ASSERT_TRUE(before.has_value());
  EXPECT_EQ(before->verify_steps, 3);
  EXPECT_EQ(before->drafted, 5);
  EXPECT_EQ(before->accepted, 3);
  EXPECT_EQ(before->position_drafted, (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(before->position_accepted, (std::vector<int64_t>{2, 1, 0}));
  m.count_verification(3, 3);
  const SpecStats d = serve::spec_stats_between(*before, *serve::spec_stats_from_metrics(m.render("mini")));
  EXPECT_EQ(d.verify_steps, 1);
  EXPECT_EQ(d.drafted, 3);
  EXPECT_EQ(d.accepted, 3);
  EXPECT_EQ(d.position_accepted, (std::vector<int64_t>{1, 1, 1}));
  // A server that does not speculate has none of the counters.
  EXPECT_FALSE(serve::spec_stats_from_metrics(serve::ServeMetrics().render("mini")).has_value());
}

// --spec mtp: each sequence drafts from the checkpoint's MTP layer on a cache of its own, fed with the
// target's hidden states of the rows each step keeps, on the DeepSeek-V3 (eh_proj) and DeepSeek-V4
// (hyper-connection streams) miniatures.
std::vector<std::vector<int32_t>> mtp_prompts() {
  // The first: DeepSeek-V3's MTP layer guesses one of its tokens right (`run --spec mtp` with a BF16 KV
  // cache accepts it).
  std::vector<std::vector<int32_t>> prompts = {{5, 9, 2, 6, 5, 3, 5, 9, 2}};
  for (int i = 0; i < 6; ++i) prompts.push_back(repetitive_prompt(i + 3, 5 + 3 * i));
  return prompts;
}

// The replies of serve_then_last_twice (`spec`, and a server's without speculation, `plain`) against
// plain decoding of each request alone: every one the requested length, the same tokens.
void expect_plain_and_alone(const std::string& golden, std::vector<std::vector<int32_t>> prompts,
                            std::vector<int> max_tokens, const std::vector<std::vector<int32_t>>& spec,
                            const std::vector<std::vector<int32_t>>& plain) {
  for (int again = 0; again < 2; ++again) {  // the last prompt came again alone, twice
    prompts.push_back(prompts.back());
    max_tokens.push_back(max_tokens.back());
  }
  const auto alone = run_alone(golden, prompts, max_tokens);
  ASSERT_EQ(spec.size(), prompts.size());
  ASSERT_EQ(plain.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(spec[i].size(), static_cast<size_t>(max_tokens[i])) << "request " << i;
    EXPECT_EQ(spec[i], plain[i]) << "request " << i;
    EXPECT_EQ(spec[i], alone[i]) << "request " << i;
  }
}

// Every prompt concurrently, then the last one alone twice: with prefix caching the second is a hit (the
// first one's entries are the newest; the concurrent run's may be gone, as past max_seqs entries'
// recurrent states the least recently used go). The tokens of each reply.
std::vector<std::vector<int32_t>> serve_then_last_twice(ServeHarness& h,
                                                        const std::vector<std::vector<int32_t>>& prompts,
                                                        const std::vector<int>& max_tokens) {
  auto out = serve_concurrently(h, prompts, max_tokens);
  for (int again = 0; again < 2; ++again) {
    const HttpReply reply =
        http_post(h.port(), "/v1/completions", completion_body(prompts.back(), max_tokens.back()));
    EXPECT_EQ(reply.status, 200) << reply.body;
    out.push_back(tokens_of(reply));
  }
  return out;
}

// Concurrent greedy streams give the tokens of a server without speculation and of plain decoding
// alone, with prefix caching on and off; then a long prompt served before comes again alone, twice: with
// prefix caching a hit, whose sequence the MTP layer never saw and which drafts nothing.
void mtp_greedy_identical(const std::string& golden, int64_t k, bool prefix_caching) {
  SCOPED_TRACE(golden + " k " + std::to_string(k) + (prefix_caching ? " prefix caching" : ""));
  std::vector<std::vector<int32_t>> prompts = mtp_prompts();
  prompts.push_back(repetitive_prompt(11, 48));  // 72 tokens: whole KV blocks for the prefix cache
  std::vector<int> max_tokens;
  for (size_t i = 0; i < prompts.size(); ++i) max_tokens.push_back(8 + 3 * static_cast<int>(i % 3));
  HarnessOptions o;
  o.model_dir = golden_model_dir(golden);
  o.kv_dtype = KvDtype::kF32;
  o.server.scheduler.max_batch_tokens = 24;  // prefill chunks beside the verification rows
  o.server.scheduler.max_seqs = 4;
  o.server.scheduler.prefix_caching = prefix_caching;
  auto serve_all = [&](ServeHarness& h) { return serve_then_last_twice(h, prompts, max_tokens); };
  std::vector<std::vector<int32_t>> plain, spec;
  {
    ServeHarness h(o);
    plain = serve_all(h);
  }
  o.server.scheduler.spec = DraftSource::kMtp;
  o.server.scheduler.spec_tokens = k;
  o.server.scheduler.spec_max_rows = 0;
  {
    ServeHarness h(o);
    spec = serve_all(h);
    const SpecStats st = spec_metrics(h);
    expect_consistent(st, k);
    EXPECT_GT(st.drafted, 0);
    EXPECT_EQ(h.server().metrics().prefix_cache_hit_tokens() > 0, prefix_caching);
  }
  expect_plain_and_alone(golden, prompts, max_tokens, spec, plain);
}

TEST(ServeSpec, MtpGreedyStreamsGiveThePlainTokens) {
  for (const char* golden : {"deepseek-v3-mtp", "deepseek-v4-mtp"}) {
    mtp_greedy_identical(golden, 3, true);
    mtp_greedy_identical(golden, 2, false);
  }
}

// Concurrent greedy streams drafting with the MTP layer, with and without the draft-row cap: every step
// drafts for all its drafting sequences in one forward_mtp call per draft depth (the engine's count of
// forward_mtp calls equals the step's longest drafts, not their sum), steps where several sequences draft
// are among them (without the cap, with allotments of their own: a sequence near its token budget asks
// fewer; under it, some sequences' drafts withheld), each sequence gets every draft allotted, and the tokens
// are those of a server without speculation and of plain decoding alone. Then the last prompt alone twice,
// the second a prefix-cache hit: its blind sequence drafts nothing, with no call. (That a sequence's drafts
// are the ones it drafts alone: MtpBatch in tests/runtime/mtp_test.)
void mtp_batched_drafting(const std::string& golden, int64_t k, int64_t max_rows) {
  SCOPED_TRACE(golden + " k " + std::to_string(k) + " max rows " + std::to_string(max_rows));
  std::vector<std::vector<int32_t>> prompts = mtp_prompts();
  prompts.push_back(repetitive_prompt(11, 48));  // 72 tokens: whole KV blocks for the prefix cache
  std::vector<int> max_tokens;
  for (size_t i = 0; i < prompts.size(); ++i) max_tokens.push_back(10 + 4 * static_cast<int>(i % 3));
  HarnessOptions o;
  o.model_dir = golden_model_dir(golden);
  o.kv_dtype = KvDtype::kF32;
  o.server.scheduler.max_batch_tokens = 256;
  o.server.scheduler.max_seqs = 8;
  auto serve_all = [&](ServeHarness& h) { return serve_then_last_twice(h, prompts, max_tokens); };
  std::vector<std::vector<int32_t>> plain, spec;
  {
    ServeHarness h(o);
    plain = serve_all(h);
  }
  o.server.scheduler.spec = DraftSource::kMtp;
  o.server.scheduler.spec_tokens = k;
  o.server.scheduler.spec_max_rows = max_rows;
  std::mutex mutex;
  std::vector<serve::DraftedStep> steps;
  o.server.scheduler.on_drafted = [&](const serve::DraftedStep& d) {
    std::lock_guard lock(mutex);
    steps.push_back(d);
  };
  {
    ServeHarness h(o);
    spec = serve_all(h);
    EXPECT_GT(spec_metrics(h).drafted, 0);
    EXPECT_GT(h.server().metrics().prefix_cache_hit_tokens(), 0);
    if (max_rows > 0) {
      EXPECT_GT(h.server().metrics().spec_withheld_drafts(), 0);  // the cap cut some allotments
    }
  }
  expect_plain_and_alone(golden, prompts, max_tokens, spec, plain);
  std::lock_guard lock(mutex);
  ASSERT_FALSE(steps.empty());
  int64_t shared = 0, mixed = 0, calls = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const serve::DraftedStep& d = steps[i];
    SCOPED_TRACE(fmt::format("step {}: {} sequences", i, d.sequences.size()));
    ASSERT_EQ(d.allotted.size(), d.sequences.size());
    ASSERT_EQ(d.drafts.size(), d.sequences.size());
    size_t depth = 0, drafting = 0;
    for (size_t j = 0; j < d.sequences.size(); ++j) {
      EXPECT_GE(d.allotted[j], 1);
      depth = std::max(depth, d.drafts[j].size());
      drafting += d.drafts[j].empty() ? 0 : 1;
      // The last request (the highest id) is a prefix-cache hit: blind, no drafts; the one before it may
      // be; the others get all they were allotted.
      const auto drafts = static_cast<int64_t>(d.drafts[j].size());
      const size_t requests = prompts.size() + 2;  // the last prompt came again alone, twice
      if (d.sequences[j] == requests - 1) {
        EXPECT_EQ(drafts, 0) << "the prefix-cache hit";
      } else if (d.sequences[j] != requests - 2 || drafts > 0) {
        EXPECT_EQ(drafts, d.allotted[j]) << "sequence " << d.sequences[j];
      }
    }
    EXPECT_EQ(d.mtp_calls, static_cast<int64_t>(depth)) << "one forward_mtp call per draft depth";
    calls += d.mtp_calls;
    if (drafting >= 2) {
      ++shared;
      if (std::adjacent_find(d.allotted.begin(), d.allotted.end(), std::not_equal_to<>()) != d.allotted.end())
        ++mixed;
    }
  }
  EXPECT_GT(shared, 0) << "no step drafted for several sequences";
  if (max_rows == 0) {
    EXPECT_GT(mixed, 0) << "no step drafted for sequences of different allotments";
  }
  std::printf(
      "%s k=%lld max rows %lld: %zu drafting steps, %lld of them for several sequences, %lld "
      "forward_mtp calls\n",
      golden.c_str(), static_cast<long long>(k), static_cast<long long>(max_rows), steps.size(),
      static_cast<long long>(shared), static_cast<long long>(calls));
}

TEST(ServeSpec, MtpDraftsOfAllSequencesRunInOneCallPerDepth) {
  for (const char* golden : {"deepseek-v3-mtp", "deepseek-v4-mtp"}) {
    mtp_batched_drafting(golden, 3, 0);
    // The cap: some sequences get fewer drafts than they ask, or none.
    mtp_batched_drafting(golden, 4, 12);
  }
}

// One request at a time (each prompt prefilled in one chunk, as `run` does), the server's MTP drafts
// are `run --spec mtp`'s: /metrics's drafts and acceptances, position by position, are the sums of
// generate_speculative's with an MtpDrafter over each prompt alone, and on DeepSeek-V3 every embedding
// call (target's and MTP layer's) is run's: drafts from misplaced or stale hidden states would differ.
TEST(ServeSpec, MtpDraftsMatchRunsPositionByPosition) {
  const int64_t k = 3;
  const int max_tokens = 12;
  for (const char* golden : {"deepseek-v3-mtp", "deepseek-v4-mtp"}) {
    SCOPED_TRACE(golden);
    const std::vector<std::vector<int32_t>> prompts = mtp_prompts();
    LoadOptions load;
    load.mtp_layers = true;
    auto model = load_model(golden_model_dir(golden), load);
    ASSERT_TRUE(model.is_ok()) << model.status().to_string();
    BackendOptions bo;
    bo.n_threads = 2;
    bo.quiet = true;
    auto backend = open_backend("cpu", bo);
    ASSERT_TRUE(backend.is_ok());
    // Every embedding call's tokens, target's and MTP layer's alike: the prefill, then per step the MTP
    // layer's inputs (the kept rows' next tokens, then each chained draft) and the verification's feed.
    std::vector<std::vector<int32_t>> run_calls, serve_calls;
    HookBackend hook(**backend);
    hook.before_embedding = [&](std::span<const int32_t> ids) {
      run_calls.emplace_back(ids.begin(), ids.end());
    };
    EngineOptions eo;
    eo.kv_dtype = KvDtype::kBF16;  // `run`'s default
    eo.mtp_layers = true;
    auto engine = Engine::create(model->spec, model->weights, hook, eo);
    ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
    SpecStats expected;
    expected.position_drafted.assign(k, 0);
    expected.position_accepted.assign(k, 0);
    std::vector<std::vector<int32_t>> run_tokens;
    for (const auto& prompt : prompts) {
      GenerationRequest r;
      r.prompt = prompt;
      r.max_new = max_tokens;
      MtpDrafter drafter(**engine);
      auto g = generate_speculative(**engine, r, drafter, SpecOptions{.tokens = k});
      ASSERT_TRUE(g.is_ok()) << g.status().to_string();
      run_tokens.push_back(g->result.tokens());
      expected.drafted += g->stats.drafted;
      expected.accepted += g->stats.accepted;
      for (size_t i = 0; i < static_cast<size_t>(k); ++i) {
        expected.position_drafted[i] += g->stats.position_drafted[i];
        expected.position_accepted[i] += g->stats.position_accepted[i];
      }
    }
    HarnessOptions o;
    o.model_dir = golden_model_dir(golden);
    o.kv_dtype = KvDtype::kBF16;
    o.server.scheduler.max_batch_tokens = 32;
    o.server.scheduler.prefix_caching = false;
    o.server.scheduler.spec = DraftSource::kMtp;
    o.server.scheduler.spec_tokens = k;
    o.server.scheduler.spec_max_rows = 0;
    o.before_embedding = [&](std::span<const int32_t> ids) {
      serve_calls.emplace_back(ids.begin(), ids.end());
    };
    ServeHarness h(o);
    for (size_t i = 0; i < prompts.size(); ++i) {
      const HttpReply reply = http_post(h.port(), "/v1/completions", completion_body(prompts[i], max_tokens));
      ASSERT_EQ(reply.status, 200) << reply.body;
      EXPECT_EQ(tokens_of(reply), run_tokens[i]) << "request " << i;
    }
    const SpecStats st = spec_metrics(h);
    EXPECT_GT(expected.drafted, 0);
    EXPECT_EQ(st.drafted, expected.drafted);
    EXPECT_EQ(st.accepted, expected.accepted);
    EXPECT_EQ(st.position_drafted, expected.position_drafted);
    EXPECT_EQ(st.position_accepted, expected.position_accepted);
    // The miniatures' MTP drafts are rarely accepted (random weights): the figures above could match
    // with other drafts. The calls show the drafts themselves, and the hidden states they came from.
    // DeepSeek-V4's compressed cache goes back to its checkpoint instead, and the server feeds the kept
    // rows again in the next step, after the MTP layer drafted (run feeds them before it drafts), so its
    // calls are not compared.
    if (std::string(golden) == "deepseek-v3-mtp") {
      EXPECT_GT(expected.accepted, 0);  // a kept draft's rows feed the MTP layer too
      EXPECT_EQ(serve_calls, run_calls);
    }
  }
}

}  // namespace
}  // namespace day0::testing
