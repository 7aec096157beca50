// Every class of bad request gets its HTTP status and an OpenAI error object
// {"error": {"message", "type", "param", "code"}}, never reaching the engine; the parser's own cases
// (types, ranges, unsupported options) one by one; /metrics through promtool.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "day0/serve/api_request.h"
#include "serve_harness.h"

namespace day0::testing {
namespace {

using serve::Endpoint;

void expect_error(const HttpReply& r, int status, const std::string& code, const std::string& param = "") {
  EXPECT_EQ(r.status, status) << r.body;
  const auto j = r.json();
  ASSERT_TRUE(j.contains("error")) << r.body;
  const auto& e = j["error"];
  EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << r.body;
  EXPECT_TRUE(e["type"].is_string()) << r.body;
  EXPECT_TRUE(e.contains("param") && e.contains("code")) << r.body;
  if (!code.empty()) {
    EXPECT_EQ(e["code"], code) << r.body;
  }
  if (!param.empty()) {
    EXPECT_EQ(e["param"], param) << r.body;
  }
}

const std::vector<std::pair<std::string, std::string>> kAuth = {{"Authorization", "Bearer sekret"}};

class BadRequests : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    HarnessOptions o;
    o.server.api_key = "sekret";
    harness_ = new ServeHarness(o);
  }
  static void TearDownTestSuite() {
    delete harness_;
    harness_ = nullptr;
  }
  HttpReply post(const std::string& path, const std::string& body) {
    return http_post(harness_->port(), path, body, kAuth);
  }
  static ServeHarness* harness_;
};
ServeHarness* BadRequests::harness_ = nullptr;

TEST_F(BadRequests, EachClassGetsItsStatusAndErrorObject) {
  const std::string path = "/v1/completions";
  // A good request first: the server works with the key.
  EXPECT_EQ(post(path, R"({"model":"mini","prompt":[1,2,3],"max_tokens":2})").status, 200);
  expect_error(http_post(harness_->port(), path, R"({"model":"mini","prompt":[1,2,3]})"), 401,
               "invalid_api_key");
  expect_error(
      http_post(harness_->port(), path, R"({"model":"mini","prompt":[1]})", {{"Authorization", "Bearer x"}}),
      401, "invalid_api_key");
  expect_error(post(path, R"({"model":"mini","prompt":[1,2)"), 400, "invalid_json");
  expect_error(post(path, "[1,2,3]"), 400, "invalid_json");
  expect_error(post(path, std::string(100, '[') + std::string(100, ']')), 400, "invalid_json");
  expect_error(post(path, R"({"model":"mini","prompt":[1],"temperature":"hot"})"), 400, "invalid_type",
               "temperature");
  expect_error(post(path, R"({"model":"mini","prompt":[1],"max_tokens":"8"})"), 400, "invalid_type",
               "max_tokens");
  expect_error(post(path, R"({"model":"mini","prompt":[1],"stream":1})"), 400, "invalid_type", "stream");
  expect_error(post(path, R"({"model":7,"prompt":[1]})"), 400, "invalid_type", "model");
  expect_error(post(path, R"({"model":"gpt-4","prompt":[1]})"), 404, "model_not_found", "model");
  expect_error(post(path, R"({"model":"mini","prompt":[1],"max_tokens":-1})"), 400, "invalid_value",
               "max_tokens");
  expect_error(post(path, R"({"model":"mini","prompt":[1],"n":2})"), 400, "unsupported_value", "n");
  expect_error(post(path, R"({"model":"mini","prompt":[1],"top_p":0})"), 400, "invalid_value", "top_p");
  expect_error(post(path, R"({"model":"mini","prompt":[1],"presence_penalty":3})"), 400, "invalid_value",
               "presence_penalty");
  expect_error(post(path, R"({"model":"mini","prompt":[1, 300]})"), 400, "invalid_value", "prompt");
  expect_error(post(path, R"({"model":"mini","prompt":[]})"), 400, "empty_prompt", "prompt");
  // The golden's context is 256 tokens.
  nlohmann::json long_prompt = {{"model", "mini"}, {"prompt", std::vector<int>(300, 5)}};
  expect_error(post(path, long_prompt.dump()), 400, "context_length_exceeded", "prompt");
  nlohmann::json too_many = {{"model", "mini"}, {"prompt", std::vector<int>(200, 5)}, {"max_tokens", 100}};
  expect_error(post(path, too_many.dump()), 400, "context_length_exceeded", "max_tokens");
  const std::string chat = "/v1/chat/completions";
  expect_error(post(chat, R"({"model":"mini","messages":[]})"), 400, "empty_array", "messages");
  expect_error(post(chat, R"({"model":"mini","messages":"hi"})"), 400, "invalid_type", "messages");
  expect_error(post(chat, R"({"model":"mini","messages":[{"content":"hi"}]})"), 400,
               "missing_required_parameter");
  expect_error(post(chat, R"({"model":"mini","messages":[{"role":"user","content":"hi"}]})"), 400,
               "no_tokenizer");
  expect_error(post(path, std::string(serve::kMaxRequestBytes + 10, ' ')), 413, "request_too_large");
  expect_error(http_get(harness_->port(), "/v1/nothing"), 404, "not_found");
  // Nothing of that reached the engine: one request's tokens were generated.
  const std::string m = http_get(harness_->port(), "/metrics").body;
  EXPECT_EQ(metric_value(m, "day0:generation_tokens_total", "model_name=\"mini\""), 2.0);
  EXPECT_GE(metric_value(m, "day0:http_errors_total", "model_name=\"mini\",status=\"400\""), 15.0);
}

TEST(TooManyRequests, BeyondMaxSeqsAndWaitingIs429) {
  // The busy request's prefill passes; its first decode step waits at the gate until the refused
  // request has had its answer, however slow the machine is.
  StepGate gate(1);
  HarnessOptions o;
  o.server.scheduler.max_seqs = 1;
  o.server.scheduler.max_waiting = 0;
  o.before_embedding = gate.hook();
  ServeHarness h(o);
  int busy_status = 0;
  std::thread busy([&] {
    busy_status =
        http_post(h.port(), "/v1/completions", R"({"model":"mini","prompt":[1,2,3],"max_tokens":100})")
            .status;
  });
  bool running = false;
  for (const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
       !running && std::chrono::steady_clock::now() < deadline;) {
    running = metric_value(http_get(h.port(), "/metrics").body, "day0:num_requests_running",
                           "model_name=\"mini\"") == 1.0;
    if (!running) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(running);
  EXPECT_LE(gate.steps(), 2);  // not past the first decode step
  const HttpReply refused =
      http_post(h.port(), "/v1/completions", R"({"model":"mini","prompt":[4],"max_tokens":1})");
  expect_error(refused, 429, "too_many_requests");
  gate.open();
  busy.join();
  EXPECT_EQ(busy_status, 200);
  EXPECT_EQ(http_post(h.port(), "/v1/completions", R"({"model":"mini","prompt":[4],"max_tokens":1})").status,
            200);
}

// The parser alone: what each field accepts.
serve::ApiError parse_error(const std::string& body, Endpoint e = Endpoint::kCompletion) {
  auto r = serve::parse_api_request(body, e);
  if (auto* err = std::get_if<serve::ApiError>(&r)) return *err;
  ADD_FAILURE() << "accepted: " << body;
  return {};
}

TEST(ApiRequestParser, ReadsEveryParameter) {
  auto r = serve::parse_api_request(
      R"({"model":"m","messages":[{"role":"system","content":[{"type":"text","text":"be "},{"type":"text","text":"brief"}]},
          {"role":"user","content":"hi"}],"max_completion_tokens":9,"max_tokens":3,"temperature":0.5,"top_p":0.9,
          "top_k":40,"seed":-3,"stop":["a","bc"],"stream":true,"stream_options":{"include_usage":true},"logprobs":true,
          "top_logprobs":4,"presence_penalty":-1,"frequency_penalty":1.5,"ignore_eos":true,"user":"ignored"})",
      Endpoint::kChat);
  ASSERT_TRUE(std::holds_alternative<serve::ApiRequest>(r)) << std::get<serve::ApiError>(r).to_json();
  const auto& q = std::get<serve::ApiRequest>(r);
  EXPECT_EQ(q.messages[0]["content"], "be brief");
  EXPECT_EQ(q.max_tokens, 9);  // max_completion_tokens wins
  EXPECT_FLOAT_EQ(q.temperature, 0.5f);
  EXPECT_FLOAT_EQ(q.top_p, 0.9f);
  EXPECT_EQ(q.top_k, 40);
  EXPECT_EQ(q.seed, static_cast<uint64_t>(int64_t{-3}));
  EXPECT_EQ(q.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_TRUE(q.stream && q.include_usage && q.logprobs && q.ignore_eos);
  EXPECT_EQ(q.top_logprobs, 4);
  EXPECT_FLOAT_EQ(q.presence_penalty, -1.0f);
  EXPECT_FLOAT_EQ(q.frequency_penalty, 1.5f);

  auto c = serve::parse_api_request(R"({"model":"m","prompt":["once upon"],"logprobs":2,"stop":"x"})",
                                    Endpoint::kCompletion);
  ASSERT_TRUE(std::holds_alternative<serve::ApiRequest>(c));
  EXPECT_EQ(std::get<serve::ApiRequest>(c).prompt_text, "once upon");
  EXPECT_EQ(std::get<serve::ApiRequest>(c).top_logprobs, 2);
  EXPECT_TRUE(std::get<serve::ApiRequest>(c).logprobs);
}

TEST(ApiRequestParser, RefusesWhatItDoesNotDo) {
  EXPECT_EQ(parse_error(R"({"model":"m","prompt":"x","echo":1})").param, "echo");
  EXPECT_EQ(parse_error(R"({"model":"m","prompt":"x","best_of":2})").param, "best_of");
  EXPECT_EQ(parse_error(R"({"model":"m","prompt":"x","suffix":"y"})").param, "suffix");
  EXPECT_EQ(parse_error(R"({"model":"m","prompt":[[1],[2]]})").code, "unsupported_value");
  EXPECT_EQ(parse_error(R"({"model":"m","prompt":"x","logprobs":true})").param, "logprobs");
  EXPECT_EQ(parse_error(R"({"model":"m","prompt":"x","logprobs":21})").param, "logprobs");
  EXPECT_EQ(parse_error(R"({"model":"m","messages":[{"role":"user","content":"x"}],"top_logprobs":2})",
                        Endpoint::kChat)
                .param,
            "top_logprobs");
  EXPECT_EQ(parse_error(R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url"}]}]})",
                        Endpoint::kChat)
                .code,
            "unsupported_content");
  EXPECT_EQ(parse_error(R"({"model":"m","prompt":"x","stop":["a",""]})").param, "stop");
  EXPECT_EQ(parse_error(R"({"model":"m","prompt":"x","stop":[1]})").param, "stop[0]");
  EXPECT_EQ(parse_error(R"({"model":"m","prompt":"x","temperature":1e400})").code, "invalid_json");
  EXPECT_EQ(parse_error(R"({"model":"m","prompt":"x","max_tokens":1.5})").param, "max_tokens");
  EXPECT_EQ(parse_error(R"({"model":"m","prompt":[-1]})").param, "prompt");
  EXPECT_EQ(parse_error(R"({"model":"m","prompt":[4294967296]})").param, "prompt");
  EXPECT_EQ(parse_error(R"({"model":"m","prompt":"x","stream_options":{"include_usage":"yes"}})").param,
            "stream_options.include_usage");
  // Depth beyond the cap is refused before anything recursive runs.
  EXPECT_EQ(
      parse_error("{\"model\":\"m\",\"prompt\":" + std::string(5000, '[') + std::string(5000, ']') + "}")
          .code,
      "invalid_json");
  EXPECT_EQ(parse_error(std::string(serve::kMaxRequestBytes + 1, ' ')).status, 413);
}

// promtool accepts /metrics. Its linter also flags the ':' in every name: the day0:* names the issue
// asks for (as vllm:* does) are recording-rule style, so that one finding is expected and nothing else.
// Debian's promtool (2.42) has no --lint switch for `check metrics` (only for rules and config); it
// keeps the two apart by its exit code instead: 1 for a parse error ("error while linting: text
// format parsing error"), 3 for lint findings only. So the parse check is strict (exit 1 fails, as
// does any line but the ':' finding) and the lint finding is counted apart.
TEST(Metrics, PromtoolAcceptsTheExposition) {
  ServeHarness h({});
  ASSERT_EQ(
      http_post(h.port(), "/v1/completions", R"({"model":"mini","prompt":[1,2,3],"max_tokens":4})").status,
      200);
  const std::string text = http_get(h.port(), "/metrics").body;
  for (const char* name :
       {"day0:time_to_first_token_seconds_bucket", "day0:inter_token_latency_seconds_count",
        "day0:e2e_request_latency_seconds_sum", "day0:prompt_tokens_total", "day0:generation_tokens_total",
        "day0:num_requests_running", "day0:num_requests_waiting", "day0:num_preemptions_total",
        "day0:kv_cache_used_blocks", "day0:kv_cache_capacity_blocks", "day0:kv_cache_usage_perc",
        "day0:prefix_cache_hit_rate", "day0:request_success_total", "day0:operator_seconds_total",
        "day0:kv_cache_fragmentation_ratio", "day0:communication_idle_ratio", "day0:recurrent_state_bytes",
        "day0:prefix_cache_state_bytes"}) {
    EXPECT_NE(text.find(std::string(name)), std::string::npos) << name;
  }
  EXPECT_GT(metric_value(text, "day0:operator_seconds_total", "model_name=\"mini\",op=\"matmul\""), 0.0);
  EXPECT_EQ(metric_value(text, "day0:time_to_first_token_seconds_count", ""), 1.0);
  EXPECT_EQ(metric_value(text, "day0:inter_token_latency_seconds_count", ""), 3.0);
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "promtool not installed (Debian package prometheus): /metrics not checked by promtool";
  }
  const std::string dir = ::testing::TempDir();
  const std::string in = dir + "/day0_metrics.prom", out = dir + "/day0_promtool.txt";
  std::ofstream(in) << text;
  const int rc = std::system(("promtool check metrics < " + in + " > " + out + " 2>&1").c_str());
  std::ifstream report(out);
  std::string line, unexpected;
  int colon_findings = 0;
  while (std::getline(report, line)) {
    if (line.find("metric names should not contain ':'") != std::string::npos) {
      ++colon_findings;
    } else if (!line.empty()) {
      unexpected += line + "\n";
    }
  }
  EXPECT_TRUE(WIFEXITED(rc) && (WEXITSTATUS(rc) == 0 || WEXITSTATUS(rc) == 3)) << "promtool rc " << rc;
  EXPECT_EQ(unexpected, "") << "promtool found problems";
  EXPECT_GT(colon_findings, 10);
  std::filesystem::remove(in);
  std::filesystem::remove(out);
}

}  // namespace
}  // namespace day0::testing
