// The server's scheduler end to end over HTTP on the llama3 golden miniature (token-id prompts, no
// tokenizer: each generated token comes back as "token_id:N" in the logprobs): many concurrent
// streams give what each request gives alone; a pool too small for everyone preempts and still gives
// the same tokens (max-utilization), or never preempts (guaranteed-no-evict); a client that hangs up
// mid-stream frees its blocks; a repeated prompt is served from the prefix cache with the same
// tokens; a step that throws fails only its own request.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <stdexcept>
#include <thread>

#include "day0/serve/bench_client.h"
#include "serve_harness.h"

namespace day0::testing {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr int kConcurrentStreams = 64;  // the sanitizer build is ~10x slower
#else
constexpr int kConcurrentStreams = 256;
#endif

std::vector<int32_t> prompt_for(int i, int length) {
  std::vector<int32_t> p;
  for (int j = 0; j < length; ++j) p.push_back((i * 37 + j * 11 + 5) % 250);
  return p;
}

std::string completion_body(const std::vector<int32_t>& prompt, int max_tokens, bool stream,
                            const nlohmann::json& extra = nlohmann::json::object()) {
  nlohmann::json j = {{"model", "mini"},  {"prompt", prompt}, {"max_tokens", max_tokens},
                      {"temperature", 0}, {"logprobs", 0},    {"stream", stream}};
  if (stream) j["stream_options"] = {{"include_usage", true}};
  for (const auto& [k, v] : extra.items()) j[k] = v;
  return j.dump();
}

int32_t token_id(const nlohmann::json& t) {
  const std::string s = t.get<std::string>();
  EXPECT_EQ(s.rfind("token_id:", 0), 0u) << s;
  return std::stoi(s.substr(9));
}

std::vector<int32_t> tokens_of(const HttpReply& r) {
  std::vector<int32_t> out;
  const auto j = r.json();
  if (!j.contains("choices")) return out;
  for (const auto& t : j["choices"][0]["logprobs"]["tokens"]) out.push_back(token_id(t));
  return out;
}

std::vector<int32_t> tokens_of(const SseReply& r) {
  std::vector<int32_t> out;
  for (const auto& e : r.events) {
    if (!e.contains("choices") || e["choices"].empty()) continue;
    const auto& lp = e["choices"][0]["logprobs"];
    if (lp.is_null()) continue;
    for (const auto& t : lp["tokens"]) out.push_back(token_id(t));
  }
  return out;
}

double metric(ServeHarness& h, const std::string& name, const std::string& extra_labels = "") {
  const std::string labels = "model_name=\"mini\"" + (extra_labels.empty() ? "" : "," + extra_labels);
  return metric_value(http_get(h.port(), "/metrics").body, name, labels);
}

// Polls /metrics until `done` holds (or 30 s pass: a loaded machine is slow, not wrong).
bool eventually(ServeHarness& h, const std::function<bool(const std::string&)>& done) {
  for (const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
       std::chrono::steady_clock::now() < deadline;) {
    if (done(http_get(h.port(), "/metrics").body)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::vector<std::vector<int32_t>> served_alone(ServeHarness& h,
                                               const std::vector<std::vector<int32_t>>& prompts,
                                               int max_tokens) {
  std::vector<std::vector<int32_t>> out;
  for (const auto& p : prompts) {
    const HttpReply r = http_post(h.port(), "/v1/completions", completion_body(p, max_tokens, false));
    EXPECT_EQ(r.status, 200) << r.body;
    out.push_back(tokens_of(r));
    EXPECT_EQ(out.back().size(), static_cast<size_t>(max_tokens));
  }
  return out;
}

TEST(ServeScheduler, ManyConcurrentStreamsGiveWhatEachRequestGivesAlone) {
  ServeHarness h({});
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < kConcurrentStreams; ++i) prompts.push_back(prompt_for(i, 3 + i % 29));
  const int max_tokens = 8;
  const auto alone = served_alone(h, prompts, max_tokens);

  std::vector<SseReply> replies(prompts.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i) {
    clients.emplace_back([&, i] {
      replies[i] = http_stream(h.port(), "/v1/completions", completion_body(prompts[i], max_tokens, true));
    });
  }
  for (auto& t : clients) t.join();
  int errors = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const SseReply& r = replies[i];
    if (r.status != 200 || !r.done) ++errors;
    EXPECT_EQ(r.status, 200) << "stream " << i;
    EXPECT_TRUE(r.done) << "stream " << i << " did not end with [DONE]: " << r.raw.substr(0, 300);
    EXPECT_EQ(tokens_of(r), alone[i]) << "stream " << i;
    ASSERT_FALSE(r.events.empty());
    EXPECT_EQ(r.events.back()["usage"]["completion_tokens"], max_tokens) << "stream " << i;
    EXPECT_EQ(r.events.back()["usage"]["prompt_tokens"], prompts[i].size()) << "stream " << i;
  }
  EXPECT_EQ(errors, 0);
  EXPECT_EQ(metric(h, "day0:request_success_total", "finished_reason=\"length\""), 2.0 * kConcurrentStreams);
  EXPECT_EQ(metric(h, "day0:generation_tokens_total"), 2.0 * kConcurrentStreams * max_tokens);
}

// A pool that holds three of the eight sequences at their full length.
void run_small_pool(serve::AdmissionPolicy policy, bool expect_preemption) {
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 8; ++i) prompts.push_back(prompt_for(i + 100, 20 + i));
  const int max_tokens = 36;  // up to 63 tokens: 2 blocks of 32 a layer, 4 blocks a sequence
  std::vector<std::vector<int32_t>> alone;
  {
    HarnessOptions big;
    big.server.scheduler.prefix_caching = false;
    ServeHarness reference(big);
    alone = served_alone(reference, prompts, max_tokens);
  }
  HarnessOptions small;
  small.server.scheduler.kv_blocks = 12;
  small.server.scheduler.max_seqs = 8;
  small.server.scheduler.policy = policy;
  small.server.scheduler.prefix_caching = false;
  ServeHarness h(small);
  std::vector<HttpReply> replies(prompts.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i) {
    clients.emplace_back([&, i] {
      replies[i] = http_post(h.port(), "/v1/completions", completion_body(prompts[i], max_tokens, false));
    });
  }
  for (auto& t : clients) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(replies[i].status, 200) << replies[i].body;
    EXPECT_EQ(tokens_of(replies[i]), alone[i]) << "request " << i;
  }
  const double preemptions = metric(h, "day0:num_preemptions_total");
  if (expect_preemption) {
    EXPECT_GT(preemptions, 0.0);
  } else {
    EXPECT_EQ(preemptions, 0.0);
  }
  // Everything returned to the pool. The gauges are refreshed at the end of a scheduler step, after
  // that step's last events went out, so a loaded machine can show the old figure just after a reply.
  double used = metric(h, "day0:kv_cache_used_blocks");
  for (int i = 0; i < 250 && used != 0.0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    used = metric(h, "day0:kv_cache_used_blocks");
  }
  EXPECT_EQ(used, 0.0);
}

TEST(ServeScheduler, MaxUtilizationPreemptsWhenThePoolIsTooSmallAndStillGivesTheSameTokens) {
  run_small_pool(serve::AdmissionPolicy::kMaxUtilization, true);
}

TEST(ServeScheduler, GuaranteedNoEvictNeverPreemptsAndGivesTheSameTokens) {
  run_small_pool(serve::AdmissionPolicy::kGuaranteedNoEvict, false);
}

TEST(ServeScheduler, AClientThatHangsUpMidStreamFreesItsBlocks) {
  // Three tokens come out (prefill, two decode steps), then the engine waits until the client has
  // hung up after two events; from then on a step takes 10 ms, so the 207 tokens left would take
  // two seconds while the hang-up is seen at once.
  StepGate gate(3, std::chrono::milliseconds(10));
  HarnessOptions o;
  o.server.scheduler.prefix_caching = false;
  o.before_embedding = gate.hook();
  ServeHarness h(o);
  const SseReply r =
      http_stream(h.port(), "/v1/completions", completion_body(prompt_for(1, 40), 210, true), 2);
  gate.open();
  EXPECT_EQ(r.events.size(), 2u);
  EXPECT_FALSE(r.done);
  EXPECT_TRUE(eventually(h, [](const std::string& m) {
    return metric_value(m, "day0:request_success_total", "model_name=\"mini\",finished_reason=\"abort\"") ==
               1.0 &&
           metric_value(m, "day0:kv_cache_used_blocks", "model_name=\"mini\"") == 0.0 &&
           metric_value(m, "day0:num_requests_running", "model_name=\"mini\"") == 0.0;
  })) << http_get(h.port(), "/metrics").body;
  EXPECT_LT(metric(h, "day0:generation_tokens_total"), 210.0);
  // The server goes on.
  EXPECT_EQ(http_post(h.port(), "/v1/completions", completion_body(prompt_for(2, 5), 3, false)).status, 200);
}

TEST(ServeScheduler, ARepeatedPromptIsServedFromThePrefixCacheWithTheSameTokens) {
  const std::vector<int32_t> prompt = prompt_for(7, 80);  // two whole blocks of 32, and 16 more
  std::vector<int32_t> other = prompt;
  for (size_t j = 70; j < other.size(); ++j) other[j] = (other[j] + 1) % 250;  // same first 70 tokens
  std::vector<std::vector<int32_t>> fresh;
  {
    HarnessOptions no_cache;
    no_cache.server.scheduler.prefix_caching = false;
    ServeHarness reference(no_cache);
    fresh = served_alone(reference, {prompt, other}, 6);
  }
  ServeHarness h({});
  const auto first = tokens_of(http_post(h.port(), "/v1/completions", completion_body(prompt, 6, false)));
  EXPECT_EQ(metric(h, "day0:prefix_cache_hits_total"), 0.0);
  EXPECT_GT(metric(h, "day0:prefix_cache_blocks"), 0.0);
  const auto again = tokens_of(http_post(h.port(), "/v1/completions", completion_body(prompt, 6, false)));
  EXPECT_EQ(metric(h, "day0:prefix_cache_hits_total"), 64.0);
  const auto branch = tokens_of(http_post(h.port(), "/v1/completions", completion_body(other, 6, false)));
  EXPECT_EQ(metric(h, "day0:prefix_cache_hits_total"), 128.0);
  EXPECT_EQ(first, fresh[0]);
  EXPECT_EQ(again, fresh[0]);
  EXPECT_EQ(branch, fresh[1]);
  EXPECT_NEAR(metric(h, "day0:prefix_cache_hit_rate"), 128.0 / 240.0, 1e-9);
  // A longer prompt that extends the first makes an entry of three blocks sharing the first entry's two:
  // each block counts once, and with no request running every used block is the cache's alone (used =
  // sequences' blocks + exclusive ones).
  std::vector<int32_t> longer = prompt;
  for (int32_t i = 0; i < 30; ++i) longer.push_back((i * 37 + 11) % 250);
  EXPECT_EQ(tokens_of(http_post(h.port(), "/v1/completions", completion_body(longer, 6, false))).size(), 6u);
  EXPECT_TRUE(eventually(h, [](const std::string& m) {
    return metric_value(m, "day0:num_requests_running", "model_name=\"mini\"") == 0.0;
  }));
  const double used = metric(h, "day0:kv_cache_used_blocks");
  EXPECT_GT(used, 0.0);
  EXPECT_EQ(metric(h, "day0:prefix_cache_blocks"), used);
  EXPECT_EQ(metric(h, "day0:prefix_cache_exclusive_blocks"), used) << http_get(h.port(), "/metrics").body;
  EXPECT_NEAR(metric(h, "day0:kv_cache_usage_perc"), used / metric(h, "day0:kv_cache_capacity_blocks"),
              1e-12);
}

// A hybrid model (Qwen3-Next's golden: three Gated DeltaNet layers, one attention layer): sequences
// batched by continuous batching, prefill chunks beside decodes, each keep their own recurrent state,
// so every stream gives what its request gives alone. Prefix caching runs: the prompts served again
// concurrently start from the entries (KV blocks and the recurrent state saved at their last whole
// block) their first run left, with the same tokens.
TEST(ServeScheduler, AHybridModelKeepsEachSequencesRecurrentStateAndServesCachedPrefixes) {
  HarnessOptions o;
  o.model_dir = golden_model_dir("qwen3-next");
  o.kv_dtype = KvDtype::kF32;
  o.server.scheduler.max_batch_tokens = 24;  // long prompts go in chunks beside the others' decodes
  ServeHarness h(o);
  EXPECT_EQ(metric(h, "day0:prefix_caching_enabled"), 1.0);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 12; ++i) prompts.push_back(prompt_for(i + 40, 5 + 7 * (i % 6)));
  prompts.push_back(prompts[0]);  // a repeated prompt: served again, same tokens
  const int max_tokens = 6;
  const auto alone = served_alone(h, prompts, max_tokens);
  EXPECT_EQ(alone.front(), alone.back());
  EXPECT_EQ(metric(h, "day0:prefix_cache_hits_total"), 0.0);  // no prompt shares a whole block
  EXPECT_GT(metric(h, "day0:prefix_cache_blocks"), 0.0);      // the prompts of 33 and 40 tokens
  EXPECT_GT(metric(h, "day0:prefix_cache_state_bytes"), 0.0);
  std::vector<SseReply> replies(prompts.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i) {
    clients.emplace_back([&, i] {
      replies[i] = http_stream(h.port(), "/v1/completions", completion_body(prompts[i], max_tokens, true));
    });
  }
  for (auto& t : clients) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(replies[i].status, 200) << "stream " << i;
    EXPECT_EQ(tokens_of(replies[i]), alone[i]) << "stream " << i;
  }
  EXPECT_GT(metric(h, "day0:prefix_cache_hits_total"), 0.0);
  // Every sequence gives its blocks back: what is left is the prefix cache's alone (KV blocks and state
  // blocks). The gauges are published after the step that answered.
  EXPECT_TRUE(eventually(h, [](const std::string& m) {
    const std::string l = "model_name=\"mini\"";
    return metric_value(m, "day0:num_requests_running", l) == 0.0 &&
           metric_value(m, "day0:kv_cache_used_blocks", l) ==
               metric_value(m, "day0:prefix_cache_exclusive_blocks", l) &&
           metric_value(m, "day0:recurrent_state_bytes", l) ==
               metric_value(m, "day0:prefix_cache_state_bytes", l);
  })) << http_get(h.port(), "/metrics").body;
}

TEST(ServeScheduler, APromptArrivingWhileAnotherDecodesSharesItsWrittenBlocks) {
  const std::vector<int32_t> prompt = prompt_for(9, 70);  // two whole blocks of 32, and 6 more
  std::vector<std::vector<int32_t>> fresh;
  {
    HarnessOptions no_cache;
    no_cache.server.scheduler.prefix_caching = false;
    ServeHarness reference(no_cache);
    fresh = served_alone(reference, {prompt}, 2);
  }
  // 20 ms a step: the first request's 60 tokens take over a second; the second asks for two.
  StepGate pace(0, std::chrono::milliseconds(20));
  pace.open();
  HarnessOptions o;
  o.before_embedding = pace.hook();
  ServeHarness h(o);
  HttpReply first;
  std::thread long_one(
      [&] { first = http_post(h.port(), "/v1/completions", completion_body(prompt, 60, false)); });
  EXPECT_TRUE(eventually(h, [](const std::string& m) {
    return metric_value(m, "day0:generation_tokens_total", "model_name=\"mini\"") >= 1.0;  // prefilled
  }));
  const auto second = tokens_of(http_post(h.port(), "/v1/completions", completion_body(prompt, 2, false)));
  // Served from the first one's blocks while it was still running.
  EXPECT_EQ(metric(h, "day0:request_success_total", "finished_reason=\"length\""), 1.0);
  EXPECT_EQ(metric(h, "day0:prefix_cache_hits_total"), 64.0);
  EXPECT_EQ(second, fresh[0]);
  long_one.join();
  EXPECT_EQ(first.status, 200);
  const auto first_tokens = tokens_of(first);
  ASSERT_EQ(first_tokens.size(), 60u);
  EXPECT_EQ(std::vector<int32_t>(first_tokens.begin(), first_tokens.begin() + 2), fresh[0]);
}

TEST(ServeScheduler, AStepThatThrowsFailsOnlyItsOwnRequest) {
  // Token 249 followed by 248 in one step is the poison: the batched step throws, the retry alone
  // throws only for the request that carries it.
  HarnessOptions o;
  o.before_embedding = [](std::span<const int32_t> ids) {
    for (size_t i = 0; i + 1 < ids.size(); ++i)
      if (ids[i] == 249 && ids[i + 1] == 248) throw std::runtime_error("poisoned step");
  };
  ServeHarness h(o);
  std::vector<std::vector<int32_t>> prompts = {prompt_for(1, 9), {1, 2, 249, 248, 3}, prompt_for(2, 12)};
  std::vector<HttpReply> replies(prompts.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i) {
    clients.emplace_back([&, i] {
      replies[i] = http_post(h.port(), "/v1/completions", completion_body(prompts[i], 6, false));
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(replies[0].status, 200) << replies[0].body;
  EXPECT_EQ(replies[2].status, 200) << replies[2].body;
  EXPECT_EQ(replies[1].status, 500) << replies[1].body;
  EXPECT_EQ(replies[1].json()["error"]["type"], "server_error");
  EXPECT_NE(replies[1].json()["error"]["message"].get<std::string>().find("poisoned step"),
            std::string::npos);
  EXPECT_EQ(http_post(h.port(), "/v1/completions", completion_body(prompt_for(3, 4), 2, false)).status, 200);
}

TEST(ServeScheduler, ShutdownLetsRunningRequestsFinishAndRefusesNewOnes) {
  // The request's first decode step waits at the gate until the server is shutting down (/health
  // says so), so the shutdown surely finds it running.
  StepGate gate(1);
  HarnessOptions o;
  o.before_embedding = gate.hook();
  ServeHarness h(o);
  SseReply running;
  std::thread client([&] {
    running = http_stream(h.port(), "/v1/completions", completion_body(prompt_for(4, 10), 100, true));
  });
  EXPECT_TRUE(eventually(h, [](const std::string& m) {
    return metric_value(m, "day0:num_requests_running", "model_name=\"mini\"") == 1.0;
  }));
  std::thread stopper([&] { h.stop(); });
  bool stopping = false;
  for (const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
       !stopping && std::chrono::steady_clock::now() < deadline;) {
    stopping = http_get(h.port(), "/health").status == 503;
    if (!stopping) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(stopping);
  EXPECT_LE(gate.steps(), 2);  // still held: the request was running when the shutdown began
  gate.open();
  stopper.join();
  client.join();
  EXPECT_TRUE(running.done);
  ASSERT_GE(running.events.size(), 2u);
  EXPECT_EQ(running.events[running.events.size() - 2]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(tokens_of(running).size(), 100u);
  EXPECT_EQ(http_post(h.port(), "/v1/completions", completion_body(prompt_for(5, 4), 2, false)).status, 0);
}

// A second signal (end_grace) cuts the grace period: the running request is cancelled at the next
// step instead of decoding on for the minute the grace period allows.
TEST(ServeScheduler, EndGraceCancelsTheRunningRequestsAtOnce) {
  StepGate gate(1, std::chrono::milliseconds(20));  // once open, each step takes 20 ms: 200 tokens, 4 s
  HarnessOptions o;
  o.before_embedding = gate.hook();
  o.server.shutdown_grace = std::chrono::seconds(60);
  ServeHarness h(o);
  SseReply running;
  std::thread client([&] {
    running = http_stream(h.port(), "/v1/completions", completion_body(prompt_for(4, 10), 200, true));
  });
  EXPECT_TRUE(eventually(h, [](const std::string& m) {
    return metric_value(m, "day0:num_requests_running", "model_name=\"mini\"") == 1.0;
  }));
  const auto t0 = std::chrono::steady_clock::now();
  std::thread stopper([&] { h.stop(); });
  bool stopping = false;
  for (const auto deadline = t0 + std::chrono::seconds(30);
       !stopping && std::chrono::steady_clock::now() < deadline;) {
    stopping = http_get(h.port(), "/health").status == 503;
    if (!stopping) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(stopping);
  gate.open();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // a few paced steps run in the grace period
  h.server().end_grace();
  stopper.join();
  client.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 3.0) << "the shutdown waited for the request instead of cancelling it";
  EXPECT_LT(tokens_of(running).size(), 200u);
  EXPECT_TRUE(running.done) << running.raw.substr(0, 300);
}

// echo with logprobs: the prompt's tokens come back first, the first with a null log-probability and
// each other with what a teacher-forced forward of the whole prompt gives it (one forward, every row);
// a prefill split into chunks over several steps gives every position too; a request beside it
// without echo gets what it gets alone; streamed, the prompt is the first chunk.
TEST(ServeScheduler, EchoGivesThePromptsTeacherForcedLogprobsOverChunkedPrefill) {
  const std::vector<int32_t> prompt = prompt_for(9, 40);
  const int max_tokens = 4;
  // The reference: one forward of the prompt with a row per token, log-softmax in double.
  auto model = load_model(golden_model_dir("llama3"));
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  EngineOptions eo;
  eo.kv_dtype = KvDtype::kF32;
  auto engine = open_engine(*model, "cpu", eo);
  ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
  KvCache cache = engine->engine->new_cache();
  SequenceStep step{&cache, prompt};
  auto rows = engine->engine->forward(std::span<const SequenceStep>(&step, 1));
  ASSERT_TRUE(rows.is_ok()) << rows.status().to_string();
  std::vector<double> want;  // want[i - 1]: the log-probability of prompt[i]
  for (size_t i = 1; i < prompt.size(); ++i) {
    const auto row = rows->row_span(static_cast<int64_t>(i - 1));
    double mx = row[0], sum = 0;
    for (float v : row) mx = std::max(mx, static_cast<double>(v));
    for (float v : row) sum += std::exp(static_cast<double>(v) - mx);
    want.push_back(static_cast<double>(row[static_cast<size_t>(prompt[i])]) - mx - std::log(sum));
  }

  HarnessOptions o;
  o.kv_dtype = KvDtype::kF32;
  o.server.scheduler.max_batch_tokens = 8;  // the 40-token prompt takes five steps
  ServeHarness h(o);
  const std::vector<int32_t> other = prompt_for(3, 12);
  const std::vector<std::vector<int32_t>> alone = served_alone(h, {other}, 6);
  HttpReply echoed, beside;
  {
    std::thread a([&] {
      echoed = http_post(h.port(), "/v1/completions",
                         completion_body(prompt, max_tokens, false, {{"echo", true}, {"logprobs", 2}}));
    });
    std::thread b([&] { beside = http_post(h.port(), "/v1/completions", completion_body(other, 6, false)); });
    a.join();
    b.join();
  }
  ASSERT_EQ(echoed.status, 200) << echoed.body;
  ASSERT_EQ(beside.status, 200) << beside.body;
  EXPECT_EQ(tokens_of(beside), alone[0]);
  const auto j = echoed.json();
  const auto& lp = j["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), prompt.size() + max_tokens);
  for (size_t i = 0; i < prompt.size(); ++i) EXPECT_EQ(token_id(lp["tokens"][i]), prompt[i]) << i;
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  for (size_t i = 1; i < prompt.size(); ++i) {
    EXPECT_NEAR(lp["token_logprobs"][i].get<double>(), want[i - 1], 1e-4) << "prompt token " << i;
    EXPECT_EQ(lp["top_logprobs"][i].size(), 2u) << i;
  }
  // The generated tokens follow, as a request without echo gets them.
  const HttpReply plain = http_post(h.port(), "/v1/completions", completion_body(prompt, max_tokens, false));
  const std::vector<int32_t> generated = tokens_of(plain);
  for (int k = 0; k < max_tokens; ++k)
    EXPECT_EQ(token_id(lp["tokens"][prompt.size() + k]), generated[k]) << "generated token " << k;
  EXPECT_EQ(j["usage"]["prompt_tokens"], prompt.size());

  // A one-token prompt: its token comes back unscored, then the generated ones.
  const HttpReply single = http_post(
      h.port(), "/v1/completions", completion_body({prompt[0]}, 2, false, {{"echo", true}, {"logprobs", 0}}));
  ASSERT_EQ(single.status, 200) << single.body;
  const auto single_doc = single.json();
  const auto& single_lp = single_doc["choices"][0]["logprobs"];
  ASSERT_EQ(single_lp["tokens"].size(), 3u) << single.body;
  EXPECT_EQ(token_id(single_lp["tokens"][0]), prompt[0]);
  EXPECT_TRUE(single_lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(single_lp["token_logprobs"][1].is_number());

  // Streamed: the first chunk is the prompt with its log-probabilities, then the tokens.
  const SseReply sse =
      http_stream(h.port(), "/v1/completions",
                  completion_body(prompt, max_tokens, true, {{"echo", true}, {"logprobs", 0}}));
  ASSERT_FALSE(sse.events.empty());
  const auto& first = sse.events.front()["choices"][0]["logprobs"];
  ASSERT_EQ(first["tokens"].size(), prompt.size());
  EXPECT_NEAR(first["token_logprobs"][prompt.size() - 1].get<double>(), want.back(), 1e-4);
  std::vector<int32_t> streamed = tokens_of(sse);
  ASSERT_EQ(streamed.size(), prompt.size() + max_tokens);
  EXPECT_EQ(
      std::vector<int32_t>(streamed.begin() + static_cast<std::ptrdiff_t>(prompt.size()), streamed.end()),
      generated);
}

// The acceptance on the Qwen3.5-MoE miniature (tests/golden/qwen3.5-moe: three Gated DeltaNet
// layers and one gated attention layer, MoE of 8 experts; F32 KV cache and activations).

std::vector<double> logprobs_of(const HttpReply& r) {
  std::vector<double> out;
  const auto j = r.json();
  if (!j.contains("choices")) return out;
  for (const auto& v : j["choices"][0]["logprobs"]["token_logprobs"]) out.push_back(v.get<double>());
  return out;
}

HarnessOptions hybrid_golden(bool prefix_caching, const std::string& golden = "qwen3.5-moe") {
  HarnessOptions o;
  o.model_dir = golden_model_dir(golden);
  o.kv_dtype = KvDtype::kF32;
  o.server.scheduler.prefix_caching = prefix_caching;
  return o;
}
HarnessOptions hybrid_moe(bool prefix_caching) {
  return hybrid_golden(prefix_caching);
}

// A 64-token prefix (two blocks of 32) and two different tails of 16.
std::vector<int32_t> shared_prefix_prompt(int tail_seed) {
  std::vector<int32_t> p = prompt_for(77, 64);
  for (int j = 0; j < 16; ++j) p.push_back((tail_seed * 53 + j * 29 + 1) % 250);
  return p;
}

// A second request sharing a 64-token prefix reuses it: the prefix cache counts 64 hit tokens in
// /metrics, and the tokens are those of a server without the cache. Their log-probabilities are the
// same to the last bit on the dense Qwen3.5 miniature; on the MoE one within 1e-5: the hit pre-fills 16
// rows where the server without the cache pre-fills 80, and the cpu MoE kernel takes its row-dot path
// for an expert's few rows, its GEMM for many (the recurrent state restored is the same bits either
// way: tests/runtime/recurrent_snapshot_test.cpp).
void shared_prefix(const std::string& golden, bool same_bits) {
  SCOPED_TRACE(golden);
  const std::vector<int32_t> first = shared_prefix_prompt(1), second = shared_prefix_prompt(2);
  const int max_tokens = 8;
  std::vector<HttpReply> fresh;
  {
    ServeHarness reference(hybrid_golden(false, golden));
    EXPECT_EQ(metric(reference, "day0:prefix_caching_enabled"), 0.0);
    for (const auto& p : {first, second})
      fresh.push_back(http_post(reference.port(), "/v1/completions", completion_body(p, max_tokens, false)));
  }
  ServeHarness h(hybrid_golden(true, golden));
  EXPECT_EQ(metric(h, "day0:prefix_caching_enabled"), 1.0);
  const HttpReply a = http_post(h.port(), "/v1/completions", completion_body(first, max_tokens, false));
  EXPECT_EQ(metric(h, "day0:prefix_cache_hits_total"), 0.0);
  EXPECT_GT(metric(h, "day0:prefix_cache_state_bytes"), 0.0);  // the entry holds the state at 64
  const HttpReply b = http_post(h.port(), "/v1/completions", completion_body(second, max_tokens, false));
  EXPECT_EQ(metric(h, "day0:prefix_cache_hits_total"), 64.0);
  ASSERT_EQ(a.status, 200) << a.body;
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_EQ(tokens_of(a), tokens_of(fresh[0]));
  EXPECT_EQ(tokens_of(b), tokens_of(fresh[1]));
  EXPECT_EQ(tokens_of(b).size(), static_cast<size_t>(max_tokens));
  EXPECT_EQ(logprobs_of(a), logprobs_of(fresh[0]));  // no hit: the same steps
  const std::vector<double> got = logprobs_of(b), want = logprobs_of(fresh[1]);
  ASSERT_EQ(got.size(), want.size());
  if (same_bits) {
    EXPECT_EQ(got, want);
  } else {
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << "token " << i;
  }
  EXPECT_GT(metric(h, "day0:recurrent_state_bytes"), 0.0);
}

TEST(ServeHybrid, ASecondRequestSharingA64TokenPrefixReusesItWithTheSameTokens) {
  shared_prefix("qwen3.5-moe", false);
  shared_prefix("qwen3.5", true);
}

// DeepSeek-V4's compressed KV attention: the entry keeps the entries pooled from the first 64 tokens
// (pool blocks) and the partial groups at 64 (its state block); the hit continues from there. Its MoE
// takes other kernel paths for the hit's 16 rows than for 80, as Qwen3.5-MoE's does.
TEST(ServeHybrid, DeepSeekV4ReusesACachedPrefixOfCompressedKv) {
  shared_prefix("deepseek-v4", false);
}

// 32 concurrent streams (half of them sharing a 64-token prefix, so that hits happen while others run)
// give the tokens each request gives alone on a server without the cache.
TEST(ServeHybrid, ThirtyTwoConcurrentStreamsGiveWhatEachGivesAlone) {
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 32; ++i)
    prompts.push_back(i % 2 == 0 ? shared_prefix_prompt(i) : prompt_for(i + 300, 10 + 3 * i));
  const int max_tokens = 6;
  std::vector<std::vector<int32_t>> alone;
  {
    ServeHarness reference(hybrid_moe(false));
    alone = served_alone(reference, prompts, max_tokens);
  }
  ServeHarness h(hybrid_moe(true));
  // One request first, so that the others can hit its entry.
  EXPECT_EQ(tokens_of(http_post(h.port(), "/v1/completions", completion_body(prompts[0], max_tokens, false))),
            alone[0]);
  std::vector<SseReply> replies(prompts.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i) {
    clients.emplace_back([&, i] {
      replies[i] = http_stream(h.port(), "/v1/completions", completion_body(prompts[i], max_tokens, true));
    });
  }
  for (auto& t : clients) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(replies[i].status, 200) << "stream " << i;
    EXPECT_TRUE(replies[i].done) << "stream " << i;
    EXPECT_EQ(tokens_of(replies[i]), alone[i]) << "stream " << i;
  }
  EXPECT_GE(metric(h, "day0:prefix_cache_hits_total"), 16.0 * 64.0);
}

// A pool too small for everyone: sequences are preempted (their blocks and recurrent state freed) and
// recomputed from their tokens, or resumed from a prefix entry, and still give the tokens of a big pool.
void run_small_hybrid_pool(bool prefix_caching) {
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 8; ++i) prompts.push_back(prompt_for(i + 500, 34 + i));
  const int max_tokens = 28;  // up to 69 tokens: 3 blocks of the one attention layer
  std::vector<std::vector<int32_t>> alone;
  {
    ServeHarness reference(hybrid_moe(false));
    alone = served_alone(reference, prompts, max_tokens);
  }
  HarnessOptions small = hybrid_moe(prefix_caching);
  small.server.scheduler.kv_blocks = 8;
  small.server.scheduler.max_seqs = 8;
  ServeHarness h(small);
  std::vector<HttpReply> replies(prompts.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i) {
    clients.emplace_back([&, i] {
      replies[i] = http_post(h.port(), "/v1/completions", completion_body(prompts[i], max_tokens, false));
    });
  }
  for (auto& t : clients) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(replies[i].status, 200) << replies[i].body;
    EXPECT_EQ(tokens_of(replies[i]), alone[i]) << "request " << i;
  }
  EXPECT_GT(metric(h, "day0:num_preemptions_total"), 0.0);
  EXPECT_TRUE(eventually(h, [](const std::string& m) {
    const std::string l = "model_name=\"mini\"";
    return metric_value(m, "day0:num_requests_running", l) == 0.0 &&
           metric_value(m, "day0:kv_cache_used_blocks", l) ==
               metric_value(m, "day0:prefix_cache_exclusive_blocks", l) &&
           metric_value(m, "day0:recurrent_state_bytes", l) ==
               metric_value(m, "day0:prefix_cache_state_bytes", l);
  })) << http_get(h.port(), "/metrics").body;
}

TEST(ServeHybrid, PreemptedSequencesAreRecomputedWithTheSameTokens) {
  run_small_hybrid_pool(false);
}

TEST(ServeHybrid, PreemptedSequencesWithPrefixCachingGiveTheSameTokens) {
  run_small_hybrid_pool(true);
}

}  // namespace
}  // namespace day0::testing

namespace day0::testing {
namespace {

TEST(ServeBench, CountsEveryTokenAndReportsOrderedPercentiles) {
  ServeHarness h({});
  serve::BenchOptions o;
  o.url = "http://127.0.0.1:" + std::to_string(h.port());
  o.concurrency = 4;
  o.requests = 12;
  o.prompt_len = {8, 24};
  o.output_len = {5, 9};
  auto r = serve::run_serve_bench(o);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->requests, 12);
  EXPECT_EQ(r->failed, 0) << r->first_error;
  // What the server counted is what the client counted.
  EXPECT_EQ(static_cast<double>(r->output_tokens), metric(h, "day0:generation_tokens_total"));
  EXPECT_EQ(static_cast<double>(r->prompt_tokens), metric(h, "day0:prompt_tokens_total"));
  EXPECT_GE(r->output_tokens, 12 * 5);
  EXPECT_LE(r->output_tokens, 12 * 9);
  EXPECT_GT(r->output_throughput, 0.0);
  EXPECT_LE(r->ttft.p50, r->ttft.p90);
  EXPECT_LE(r->ttft.p90, r->ttft.p99);
  EXPECT_LE(r->ttft.p99, r->e2e.p99);
  EXPECT_GT(r->itl.p50, 0.0);
  // With log-probabilities asked the tokens are counted from their lists: the same count again.
  const double generated = metric(h, "day0:generation_tokens_total");
  o.logprobs = 2;
  o.seed = 1;
  auto with_logprobs = serve::run_serve_bench(o);
  ASSERT_TRUE(with_logprobs.is_ok()) << with_logprobs.status().to_string();
  EXPECT_EQ(with_logprobs->failed, 0) << with_logprobs->first_error;
  EXPECT_EQ(static_cast<double>(with_logprobs->output_tokens),
            metric(h, "day0:generation_tokens_total") - generated);
  // A wrong model name fails every request and says why.
  o.model = "other";
  o.requests = 2;
  auto wrong = serve::run_serve_bench(o);
  ASSERT_TRUE(wrong.is_ok());
  EXPECT_EQ(wrong->failed, 2);
  EXPECT_NE(wrong->first_error.find("404"), std::string::npos) << wrong->first_error;
  EXPECT_FALSE(serve::parse_length_dist("9:3").is_ok());
  EXPECT_FALSE(serve::parse_length_dist("12x").is_ok());
  EXPECT_EQ(serve::parse_length_dist("4:7")->hi, 7);
}

}  // namespace
}  // namespace day0::testing
