// `day0 audit` against `day0 serve` in-process: on a miniature with a real tokenizer every stage passes;
// through a fault-injecting proxy between the audit and the server each fault fails exactly the stage
// that should catch it, naming it, and the clean proxy passes. On the trained SmolLM2 (when its GGUF is
// cached, tests/trained/smollm2_test.cpp) every stage passes too. The reply parser's own cases close.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <thread>

#include "day0/audit/audit.h"
#include "day0/audit/target_reply.h"
#include "day0/model/catalog.h"
#include "day0/quant/quantize_checkpoint.h"
#include "day0/report/adapt.h"
#include "day0/report/json_schema.h"
#include "day0/synth/synth_checkpoint.h"
#include "day0/tokenizer/chat_template.h"
#include "day0/tokenizer/tokenizer.h"
#include "serve/serve_harness.h"

namespace day0::testing {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr const char* kInjected503 =
    "{\"error\": {\"message\": \"overloaded, injected\", \"type\": \"server_error\"}}";

enum class Fault {
  kNone,
  kPerturbLogprobs,
  kDoubleBos,
  kDropLastToken,
  kStreamDiffers,
  kFlaky5xx,
  kMangleTools,
  kShiftLogprobs,          // every chat logprob moved by `logprob_shift` (order and KL kept, |Δ| grows)
  kPerturbPromptLogprobs,  // an echoed prompt's log-probabilities lowered by 0.2 each
  // The first request with tools answered as if the model had called get_weather for Paris in the
  // tokenizer's template's format (Mistral's [TOOL_CALLS] [...]), its tokens in the logprobs:
  kToolCallParsed,         // and parsed into tool_calls (a correct server)
  kToolCallLeftInContent,  // the markup left in content, tool_calls empty (a parser that missed it)
  kToolCallDisagrees,      // tool_calls naming another city than the raw text
  kBadRequest500,          // a malformed JSON body refused with HTTP 500 (llama-server's answer)
  kBadRequest200,          // a malformed JSON body answered 200 with a completion
  // llama-server's way with a token whose bytes end inside a UTF-8 character: held back and listed with
  // the next one (one logprob entry, both tokens' bytes, the text whole), in every chat reply:
  kMergeHeldBackToken,
  kStreamLosesHeldBackToken  // the first streamed token dropped, its text and its entry (text lost)
};

// What the faked model generated: a call in the Mistral template's tool-call format.
constexpr const char* kRawToolCall =
    R"([TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}])";

// Between the audit and the server: forwards every request, offers vLLM's POST /tokenize (rendered
// with the served tokenizer's template, as a server does), and injects one fault.
class FaultProxy {
 public:
  FaultProxy(int upstream, const tokenizer::Tokenizer& tok) : upstream_(upstream), tok_(tok) {
    server_.Get(".*", [this](const httplib::Request& q, httplib::Response& r) { forward_get(q, r); });
    server_.Post("/tokenize", [this](const httplib::Request& q, httplib::Response& r) { tokenize(q, r); });
    server_.Post(".*", [this](const httplib::Request& q, httplib::Response& r) { forward_post(q, r); });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FaultProxy() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  Fault fault = Fault::kNone;
  double logprob_shift = 0;

 private:
  void forward_get(const httplib::Request& q, httplib::Response& r) {
    httplib::Client cli("127.0.0.1", upstream_);
    auto res = cli.Get(q.path);
    if (!res) return void(r.status = 502);
    r.status = res->status;
    r.set_content(res->body, res->get_header_value("Content-Type"));
  }

  void tokenize(const httplib::Request& q, httplib::Response& r) {
    Json body = Json::parse(q.body, nullptr, false);
    tokenizer::ChatRequest request;
    if (!body.is_object() || !body.contains("messages")) return void(r.status = 400);
    request.messages = nlohmann::ordered_json::parse(body["messages"].dump());
    auto text = tokenizer::apply_chat_template(tok_, request);
    if (!text.is_ok()) return void(r.status = 400);
    std::vector<int32_t> ids = tok_.encode(*text);
    if (fault == Fault::kDoubleBos) ids.insert(ids.begin(), tok_.special_tokens().bos_id.value_or(1));
    r.set_content(Json({{"tokens", ids}, {"count", ids.size()}}).dump(), "application/json");
  }

  void forward_post(const httplib::Request& q, httplib::Response& r) {
    const int n = ++posts_;
    if (fault == Fault::kFlaky5xx && n % 5 == 0) {
      r.status = 503;
      r.set_content(kInjected503, "application/json");
      return;
    }
    Json request = Json::parse(q.body, nullptr, false);
    const bool chat = q.path == "/v1/chat/completions";
    if (chat && request.is_discarded() && fault == Fault::kBadRequest500) {
      r.status = 500;
      r.set_content(R"({"error": {"code": 500, "message": "parse error", "type": "server_error"}})",
                    "application/json");
      return;
    }
    if (chat && request.is_discarded() && fault == Fault::kBadRequest200) {
      r.set_content(R"({"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
          "finish_reason": "stop"}], "usage": {"prompt_tokens": 1, "completion_tokens": 1}})",
                    "application/json");
      return;
    }
    const bool stream = request.is_object() && request.value("stream", false);
    bool asked_logprobs = true;
    if (request.is_object() && chat) {
      if (fault == Fault::kDropLastToken && !stream) {
        // The proxy needs each token's text to drop the last one.
        asked_logprobs = request.value("logprobs", false);
        request["logprobs"] = true;
      }
      if (fault == Fault::kMangleTools && request.contains("messages")) {
        for (Json& m : request["messages"])
          if (m.is_object() && m.value("role", "") == "tool") m["content"] = "";
      }
    }
    httplib::Client cli("127.0.0.1", upstream_);
    cli.set_read_timeout(120, 0);
    auto res = cli.Post(q.path, request.is_discarded() ? q.body : request.dump(), "application/json");
    if (!res) return void(r.status = 502);
    r.status = res->status;
    std::string body = res->body;
    if (res->status == 200 && chat) body = stream ? mutate_stream(body) : mutate_reply(body, asked_logprobs);
    if (res->status == 200 && chat && !stream && asks_for_a_call(request)) body = fake_tool_call(body);
    if (res->status == 200 && !chat && stream && fault == Fault::kMergeHeldBackToken)
      body = merge_completion_chunks(body);
    if (res->status == 200 && !chat && fault == Fault::kPerturbPromptLogprobs && request.is_object() &&
        request.value("echo", false) && !stream) {
      Json j = Json::parse(body, nullptr, false);
      if (j.is_object() && j["choices"][0]["logprobs"].is_object()) {
        for (Json& lp : j["choices"][0]["logprobs"]["token_logprobs"])
          if (lp.is_number()) lp = lp.get<double>() - 0.2;
        body = j.dump();
      }
    }
    r.set_content(body, res->get_header_value("Content-Type"));
  }

  std::string mutate_reply(const std::string& body, bool asked_logprobs) {
    Json j = Json::parse(body, nullptr, false);
    if (!j.is_object() || !j.contains("choices") || j["choices"].empty()) return body;
    Json& choice = j["choices"][0];
    Json& usage = j["usage"];
    if (fault == Fault::kDoubleBos) usage["prompt_tokens"] = usage["prompt_tokens"].get<int64_t>() + 1;
    if (fault == Fault::kPerturbLogprobs && choice["logprobs"].is_object()) {
      // As if the target computed its log-probabilities at another temperature.
      for (Json& step : choice["logprobs"]["content"]) {
        step["logprob"] = step["logprob"].get<double>() * 1.5 - 0.5;
        for (Json& alt : step["top_logprobs"]) alt["logprob"] = alt["logprob"].get<double>() * 1.5 - 0.5;
      }
    }
    if (fault == Fault::kShiftLogprobs && choice["logprobs"].is_object()) {
      for (Json& step : choice["logprobs"]["content"]) {
        step["logprob"] = step["logprob"].get<double>() + logprob_shift;
        for (Json& alt : step["top_logprobs"]) alt["logprob"] = alt["logprob"].get<double>() + logprob_shift;
      }
    }
    if (fault == Fault::kDropLastToken && choice["logprobs"].is_object()) {
      Json& content = choice["logprobs"]["content"];
      if (!content.empty()) {
        const std::string last = content.back()["token"].get<std::string>();
        content.erase(content.size() - 1);
        std::string text =
            choice["message"]["content"].is_string() ? choice["message"]["content"].get<std::string>() : "";
        if (text.size() >= last.size() && text.compare(text.size() - last.size(), last.size(), last) == 0)
          text.resize(text.size() - last.size());
        choice["message"]["content"] = text;
        usage["completion_tokens"] = usage["completion_tokens"].get<int64_t>() - 1;
      }
      if (!asked_logprobs) choice["logprobs"] = nullptr;
    }
    if (fault == Fault::kMergeHeldBackToken && choice["logprobs"].is_object()) {
      Json& content = choice["logprobs"]["content"];
      if (content.is_array() && content.size() >= 2) {
        content[1] = merged_entry(content[0], content[1]);
        content.erase(0);
      }
    }
    if (fault == Fault::kMangleTools && choice["message"].contains("tool_calls")) {
      for (Json& call : choice["message"]["tool_calls"]) {
        std::string a = call["function"]["arguments"].get<std::string>();
        call["function"]["arguments"] = a.substr(0, a.size() / 2);
      }
    }
    return j.dump();
  }

  // A request with tools that is not the follow-up turn (no tool result in it).
  bool asks_for_a_call(const Json& request) const {
    if (fault != Fault::kToolCallParsed && fault != Fault::kToolCallLeftInContent &&
        fault != Fault::kToolCallDisagrees)
      return false;
    if (!request.is_object() || !request.contains("tools") || !request["messages"].is_array()) return false;
    for (const Json& m : request["messages"])
      if (m.is_object() && m.value("role", "") == "tool") return false;
    return true;
  }

  // The reply as the faked model's call makes it: its tokens (4-byte pieces of kRawToolCall) in the
  // logprobs, and the call parsed, left in content, or parsed wrong.
  std::string fake_tool_call(const std::string& body) const {
    Json j = Json::parse(body, nullptr, false);
    if (!j.is_object() || !j.contains("choices") || j["choices"].empty()) return body;
    Json& choice = j["choices"][0];
    const std::string raw = kRawToolCall;
    Json content = Json::array();
    for (size_t i = 0; i < raw.size(); i += 4)
      content.push_back({{"token", raw.substr(i, 4)}, {"logprob", -0.1}, {"top_logprobs", Json::array()}});
    choice["logprobs"] = {{"content", content}};
    const std::string city = fault == Fault::kToolCallDisagrees ? "London" : "Paris";
    if (fault == Fault::kToolCallLeftInContent) {
      choice["message"] = {{"role", "assistant"}, {"content", raw}};
      choice["finish_reason"] = "stop";
    } else {
      choice["message"] = {
          {"role", "assistant"},
          {"content", nullptr},
          {"tool_calls",
           Json::array(
               {{{"id", "call1"},
                 {"type", "function"},
                 {"function", {{"name", "get_weather"}, {"arguments", Json({{"city", city}}).dump()}}}}})}};
      choice["finish_reason"] = "tool_calls";
    }
    return j.dump();
  }

  // `held`'s entry folded into `next`'s: the pair's text and bytes, the second token's id.
  static Json merged_entry(const Json& held, const Json& next) {
    Json entry = next;
    entry["token"] = held.value("token", std::string()) + next.value("token", std::string());
    if (held.contains("bytes") && held["bytes"].is_array() && next.contains("bytes") &&
        next["bytes"].is_array()) {
      Json bytes = held["bytes"];
      for (const Json& b : next["bytes"]) bytes.push_back(b);
      entry["bytes"] = bytes;
    }
    return entry;
  }

  // Streamed chat: a double BOS shows in the usage; differing streams lose their second text piece;
  // a held-back token's chunk is folded into the next (or, losing it, dropped).
  std::string mutate_stream(const std::string& body) {
    if (fault != Fault::kStreamDiffers && fault != Fault::kDoubleBos && fault != Fault::kMergeHeldBackToken &&
        fault != Fault::kStreamLosesHeldBackToken)
      return body;
    std::string out;
    int pieces = 0;
    Json held;  // the first token's chunk choice, held back
    size_t pos = 0;
    while (pos < body.size()) {
      size_t end = body.find("\n\n", pos);
      if (end == std::string::npos) end = body.size();
      std::string event = body.substr(pos, end - pos);
      pos = end + 2;
      if (event.rfind("data: ", 0) == 0 && event != "data: [DONE]") {
        Json j = Json::parse(event.substr(6), nullptr, false);
        if (j.is_object()) {
          if (fault == Fault::kDoubleBos && j["usage"].is_object())
            j["usage"]["prompt_tokens"] = j["usage"]["prompt_tokens"].get<int64_t>() + 1;
          if (fault == Fault::kStreamDiffers && !j["choices"].empty() &&
              j["choices"][0]["delta"].is_object() &&
              j["choices"][0]["delta"].value("content", std::string()).size() > 0 && ++pieces == 2)
            j["choices"][0]["delta"]["content"] = "";
          const bool token_chunk = !j["choices"].empty() && j["choices"][0]["logprobs"].is_object() &&
                                   !j["choices"][0]["logprobs"]["content"].empty();
          if ((fault == Fault::kMergeHeldBackToken || fault == Fault::kStreamLosesHeldBackToken) &&
              token_chunk && ++pieces <= 2) {
            Json& choice = j["choices"][0];
            if (pieces == 1) {
              held = choice;
              continue;  // held back: no event
            }
            if (fault == Fault::kMergeHeldBackToken) {
              choice["delta"]["content"] = held["delta"].value("content", std::string()) +
                                           choice["delta"].value("content", std::string());
              choice["logprobs"]["content"][0] =
                  merged_entry(held["logprobs"]["content"][0], choice["logprobs"]["content"][0]);
            }
          }
          event = "data: " + j.dump();
        }
      }
      out += event + "\n\n";
    }
    return out;
  }

  // Streamed completions (the load and the soak): the first token's chunk folded into the second's, its
  // text kept and its logprob entry dropped, the usage unchanged: one chunk short of the usage.
  static std::string merge_completion_chunks(const std::string& body) {
    std::string out, held_text;
    int pieces = 0;
    size_t pos = 0;
    while (pos < body.size()) {
      size_t end = body.find("\n\n", pos);
      if (end == std::string::npos) end = body.size();
      std::string event = body.substr(pos, end - pos);
      pos = end + 2;
      if (event.rfind("data: ", 0) == 0 && event != "data: [DONE]") {
        Json j = Json::parse(event.substr(6), nullptr, false);
        const bool token_chunk = j.is_object() && j["choices"].is_array() && !j["choices"].empty() &&
                                 j["choices"][0]["finish_reason"].is_null();
        if (token_chunk && ++pieces <= 2) {
          if (pieces == 1) {
            held_text = j["choices"][0].value("text", std::string());
            continue;  // held back: no event
          }
          j["choices"][0]["text"] = held_text + j["choices"][0].value("text", std::string());
          event = "data: " + j.dump();
        }
      }
      out += event + "\n\n";
    }
    return out;
  }

  int upstream_;
  const tokenizer::Tokenizer& tok_;
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<int> posts_ = 0;
};

class Audit : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tokenizer_ = std::string(DAY0_SHARED_DIR) + "/tokenizers/mistral-7b-instruct-v0.3";
    if (!fs::exists(tokenizer_)) return;
    dir_ = (fs::path(::testing::TempDir()) / ("day0_audit_" + std::to_string(::getpid()))).string();
    fs::remove_all(dir_);
    auto full = resolve_model("llama-3.1-8b");
    ASSERT_TRUE(full.is_ok());
    MiniatureOptions dims;
    dims.layers = 2;
    dims.vocab = 32768;  // the tokenizer's ids
    auto synth = synthesize_miniature(full->spec, dims, SynthOptions{}, dir_);
    ASSERT_TRUE(synth.is_ok()) << synth.status().to_string();
    // The folder carries its tokenizer too, as a checkpoint does (adapt --target reads it from there).
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"})
      fs::copy_file(fs::path(tokenizer_) / f, fs::path(dir_) / f);
    HarnessOptions o;
    o.model_dir = dir_;
    o.tokenizer_dir = tokenizer_;
    o.kv_dtype = KvDtype::kF32;
    o.server.scheduler.context = 320;  // the context edge stage fills it
    harness_ = new ServeHarness(o);
    auto tok = tokenizer::load_tokenizer(tokenizer_);
    ASSERT_TRUE(tok.is_ok());
    tok_ = new std::shared_ptr<const tokenizer::Tokenizer>(*tok);
  }
  static void TearDownTestSuite() {
    delete harness_;
    harness_ = nullptr;
    delete tok_;
    tok_ = nullptr;
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  void SetUp() override {
    if (harness_ == nullptr) GTEST_SKIP() << "shared tokenizers not found at " << tokenizer_;
  }
  static audit::AuditOptions options(const std::string& url) {
    audit::AuditOptions o;
    o.model = dir_;
    o.tokenizer = tokenizer_;
    o.target = url;
    o.concurrency = {1, 3};
    o.bench_requests_per_level = 6;
    o.new_tokens = 12;
    o.timeout_s = 60;
    return o;
  }
  static report::Report audit_of(const audit::AuditOptions& o) {
    auto rep = audit::run_audit(o, nullptr);
    EXPECT_TRUE(rep.is_ok()) << rep.status().to_string();
    if (!rep.is_ok()) return {};
    // The report is one adapt's schema validates.
    auto errors = report::validate_json(report::to_json(*rep), report::report_json_schema());
    EXPECT_TRUE(errors.empty()) << (errors.empty() ? "" : errors.front());
    return *rep;
  }
  static std::string failed_stages(const report::Report& rep) {
    std::string out;
    for (const auto& s : rep.stages)
      if (s.verdict == report::Verdict::kFail) out += (out.empty() ? "" : ",") + s.id;
    return out;
  }
  static std::string describe(const report::Report& rep) {
    std::string out;
    for (const auto& s : rep.stages)
      out += s.id + " " + report::verdict_name(s.verdict) + ": " + s.summary + " " + s.reason + "\n";
    return out;
  }
  static inline std::string tokenizer_, dir_;
  static inline ServeHarness* harness_ = nullptr;
  static inline std::shared_ptr<const tokenizer::Tokenizer>* tok_ = nullptr;
};

TEST_F(Audit, EveryStagePassesAgainstDay0Serve) {
  auto o = options("http://127.0.0.1:" + std::to_string(harness_->port()) + "/v1");
  o.soak_seconds = 1.5;
  report::Report rep = audit_of(o);
  ASSERT_EQ(rep.stages.size(), audit::audit_stages().size());
  for (const auto& s : rep.stages) EXPECT_EQ(s.verdict, report::Verdict::kPass) << describe(rep);
  EXPECT_EQ(rep.verdict, report::Verdict::kPass);
  // The evidence a person reads: the reference agrees closely with a server running the same weights.
  const auto* lp = rep.find_stage("target-logprobs");
  ASSERT_NE(lp, nullptr);
  EXPECT_GT(lp->evidence["positions"].get<int64_t>(), 12);
  EXPECT_LT(lp->evidence["max_abs_dlogprob"].get<double>(), 1e-3);
  EXPECT_EQ(lp->evidence["unresolved_tokens"].get<int64_t>(), 0);
  // day0 serve echoes the prompt with its logprobs: the perplexity is compared, not skipped.
  const Json& ppl = lp->evidence["prompt_perplexity"];
  ASSERT_TRUE(ppl.is_object()) << ppl;
  EXPECT_EQ(ppl["target_tokens"], ppl["reference_tokens"]);
  EXPECT_LT(ppl["abs_log_ratio"]["target"].get<double>(), 1e-3) << ppl;
  const auto* speed = rep.find_stage("target-speed");
  ASSERT_NE(speed, nullptr);
  EXPECT_EQ(speed->evidence["levels"].size(), 2u);
  EXPECT_GT(speed->evidence["soak"]["requests"].get<int64_t>(), 0);
  // The server runs in this process, on this host: found by its listening port, its memory sampled.
  EXPECT_EQ(speed->evidence["soak"]["process"].get<std::string>(),
            fmt::format("process {} (listening on port {})", ::getpid(), harness_->port()));
  ASSERT_FALSE(speed->evidence["soak"]["samples"].empty());
  EXPECT_GT(speed->evidence["soak"]["samples"][0]["rss_mb"].get<double>(), 1.0);
  const auto* limits = rep.find_stage("target-limits");
  EXPECT_EQ(limits->evidence["checks"]["context"]["context"].get<int64_t>(), 320);
}

struct FaultCase {
  Fault fault;
  const char* name;
  const char* stage;     // the one stage that must fail
  const char* mentions;  // what its reason must name
};

TEST_F(Audit, EachFaultFailsExactlyItsStage) {
  FaultProxy proxy(harness_->port(), **tok_);
  {
    report::Report clean = audit_of(options(proxy.url()));
    EXPECT_EQ(failed_stages(clean), "") << describe(clean);
    // Through the proxy the target offers /tokenize: the ids are compared too.
    EXPECT_EQ(clean.find_stage("target-tokens")->evidence["tokenize"], "messages") << describe(clean);
  }
  {
    // A model that calls the tool and a server that parses the call: the matching passes.
    proxy.fault = Fault::kToolCallParsed;
    report::Report called = audit_of(options(proxy.url()));
    EXPECT_EQ(failed_stages(called), "") << describe(called);
    const Json& tools = called.find_stage("target-tools")->evidence;
    EXPECT_EQ(tools["target_raw_output"], kRawToolCall);
    EXPECT_EQ(tools["target_raw_call"]["arguments"]["city"], "Paris") << tools;
    EXPECT_EQ(tools["target_tool_calls"].size(), 1u);
  }
  const FaultCase cases[] = {
      {Fault::kPerturbLogprobs, "logprobs perturbed", "target-logprobs", "logprob"},
      {Fault::kDoubleBos, "a second BOS", "target-tokens", "a second BOS"},
      {Fault::kDropLastToken, "last token dropped", "target-limits", "max_tokens"},
      {Fault::kStreamDiffers, "stream differs", "target-limits", "stream"},
      {Fault::kFlaky5xx, "5xx now and then", "target-speed", "failed"},
      {Fault::kMangleTools, "tool turns mangled", "target-tools", "tool"},
      {Fault::kPerturbPromptLogprobs, "prompt logprobs perturbed", "target-logprobs", "prompt perplexity"},
      {Fault::kToolCallLeftInContent, "tool call left in content", "target-tools", "no tool_calls"},
      {Fault::kToolCallDisagrees, "tool call parsed wrong", "target-tools", "disagree"},
      {Fault::kStreamLosesHeldBackToken, "a held-back token's text lost in the stream", "target-limits",
       "stream: streamed and non-streamed greedy replies differ at byte 0"},
      {Fault::kBadRequest200, "bad request answered 200", "target-limits",
       "malformed JSON answered HTTP 200"},
  };
  for (const FaultCase& c : cases) {
    proxy.fault = c.fault;
    report::Report rep = audit_of(options(proxy.url()));
    EXPECT_EQ(failed_stages(rep), c.stage) << "fault " << c.name << "\n" << describe(rep);
    const auto* stage = rep.find_stage(c.stage);
    ASSERT_NE(stage, nullptr);
    EXPECT_NE(stage->reason.find(c.mentions), std::string::npos) << stage->reason;
    std::cout << "fault " << c.name << " -> " << failed_stages(rep) << ": " << stage->reason << "\n";
    EXPECT_EQ(rep.verdict, report::Verdict::kFail);
  }
}

// A bad request refused with a 5xx (llama-server answers malformed JSON with 500) is a named warning:
// the run passes with it counted and shown; under --strict it fails target-limits.
TEST_F(Audit, BadRequestAnswered500IsAWarningThatStrictFails) {
  FaultProxy proxy(harness_->port(), **tok_);
  proxy.fault = Fault::kBadRequest500;
  auto o = options(proxy.url());
  o.concurrency = {1};
  report::Report warned = audit_of(o);
  EXPECT_EQ(failed_stages(warned), "") << describe(warned);
  EXPECT_EQ(warned.verdict, report::Verdict::kPass);
  const auto* limits = warned.find_stage("target-limits");
  ASSERT_NE(limits, nullptr);
  ASSERT_EQ(limits->warnings.size(), 1u);
  EXPECT_EQ(limits->warnings[0].id, "bad_request_5xx");
  EXPECT_NE(limits->warnings[0].message.find("malformed JSON answered HTTP 500"), std::string::npos)
      << limits->warnings[0].message;
  EXPECT_EQ(warned.warning_count(), 1u);
  EXPECT_NE(report::verdict_text(warned).find("1 warning: target-limits bad_request_5xx"), std::string::npos)
      << report::verdict_text(warned);
  const Json doc = report::to_json(warned);
  EXPECT_EQ(doc["warnings"], 1);
  auto back = report::report_from_json(doc);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->find_stage("target-limits")->warnings.size(), 1u);
  o.strict = true;
  report::Report strict = audit_of(o);
  EXPECT_EQ(failed_stages(strict), "target-limits") << describe(strict);
  EXPECT_EQ(strict.verdict, report::Verdict::kFail);
  EXPECT_NE(strict.find_stage("target-limits")->reason.find("--strict"), std::string::npos);
  EXPECT_TRUE(report::to_json(strict)["strict"].get<bool>());
}

// A token held back at a split UTF-8 character and listed with the next (llama-server's way): the text
// is whole, the logprob entries one short of usage in each reply with logprobs. A named warning, not a
// lost token; under --strict it fails target-limits.
TEST_F(Audit, HeldBackTokenIsAWarningThatStrictFails) {
  FaultProxy proxy(harness_->port(), **tok_);
  proxy.fault = Fault::kMergeHeldBackToken;
  auto o = options(proxy.url());
  o.concurrency = {1};
  report::Report warned = audit_of(o);
  EXPECT_EQ(failed_stages(warned), "") << describe(warned);
  const auto* limits = warned.find_stage("target-limits");
  ASSERT_NE(limits, nullptr);
  ASSERT_EQ(limits->warnings.size(), 1u) << describe(warned);
  EXPECT_EQ(limits->warnings[0].id, "logprobs_short");
  // max_tokens, streamed and non-streamed: each one entry short.
  EXPECT_NE(limits->warnings[0].message.find("3 of 3 replies"), std::string::npos)
      << limits->warnings[0].message;
  EXPECT_NE(limits->warnings[0].message.find("the streamed reply"), std::string::npos)
      << limits->warnings[0].message;
  // Every reply of the logprob stage is one entry short: none is compared out of step.
  const auto* logprobs = warned.find_stage("target-logprobs");
  ASSERT_NE(logprobs, nullptr);
  EXPECT_EQ(logprobs->verdict, report::Verdict::kSkipped) << describe(warned);
  EXPECT_NE(logprobs->reason.find("fewer than their tokens"), std::string::npos) << logprobs->reason;
  // The load's streams, one chunk short each: counted by their usage, a warning of target-speed.
  const auto* speed = warned.find_stage("target-speed");
  ASSERT_NE(speed, nullptr);
  ASSERT_EQ(speed->warnings.size(), 1u) << describe(warned);
  EXPECT_EQ(speed->warnings[0].id, "stream_chunks_short");
  EXPECT_NE(speed->warnings[0].message.find("fewer chunks than their usage"), std::string::npos)
      << speed->warnings[0].message;
  o.strict = true;
  report::Report strict = audit_of(o);
  EXPECT_EQ(failed_stages(strict), "target-limits,target-speed") << describe(strict);
  EXPECT_NE(strict.find_stage("target-limits")->reason.find("logprobs_short"), std::string::npos)
      << strict.find_stage("target-limits")->reason;
}

// A quantized target: the miniature quantized to int4 by Day0 and served. The logprob bounds come from
// Day0's own BF16 run of the int4 weights against the F32 reference, scaled: a shift of every logprob
// that the fixed quantized bound (|Δ| 2.0) let through fails, the clean target passes.
TEST_F(Audit, QuantizedTargetIsBoundedByDay0sOwnRun) {
  const std::string qdir = dir_ + "_int4";
  fs::remove_all(qdir);
  QuantizeOptions qo;
  qo.bits = 4;
  qo.group_size = 32;
  auto quantized = quantize_checkpoint(dir_, qdir, qo);
  ASSERT_TRUE(quantized.is_ok()) << quantized.status().to_string();
  HarnessOptions ho;
  ho.model_dir = qdir;
  ho.tokenizer_dir = tokenizer_;
  ho.kv_dtype = KvDtype::kF32;
  ho.server.scheduler.context = 320;
  ServeHarness served(ho);
  FaultProxy proxy(served.port(), **tok_);
  auto o = options(proxy.url());
  o.model = qdir;
  o.concurrency = {1};
  report::Report clean = audit_of(o);
  EXPECT_EQ(failed_stages(clean), "") << describe(clean);
  const auto* lp = clean.find_stage("target-logprobs");
  ASSERT_NE(lp, nullptr);
  EXPECT_EQ(lp->evidence["weight_format"], "int4");
  EXPECT_EQ(lp->evidence["weight_format_source"], "config.json quantization_config");
  const Json& dlp = lp->evidence["bounds"]["max_abs_dlogprob"];
  // Day0's BF16 path over int4 weights is not the exact F32 reference: its own figure is measured.
  EXPECT_GT(dlp["day0_own"].get<double>(), 0) << dlp;
  EXPECT_GT(lp->evidence["own_run_positions"].get<int64_t>(), 12);
  EXPECT_NEAR(dlp["bound"].get<double>(), std::max(0.25, 4.0 * dlp["day0_own"].get<double>()), 1e-9);
  // The measured bound is tighter than the fixed quantized constant it replaces.
  ASSERT_LT(dlp["bound"].get<double>(), 1.5) << dlp;
  proxy.fault = Fault::kShiftLogprobs;
  proxy.logprob_shift = -(dlp["bound"].get<double>() + 2.0) / 2;
  report::Report shifted = audit_of(o);
  EXPECT_EQ(failed_stages(shifted), "target-logprobs") << describe(shifted);
  const std::string reason = shifted.find_stage("target-logprobs")->reason;
  EXPECT_NE(reason.find("Day0's own"), std::string::npos) << reason;
  EXPECT_NE(reason.find("int4 bound"), std::string::npos) << reason;

  // A float MODEL that the target serves as int4: the bounds need Day0's own int4 copy, named.
  proxy.fault = Fault::kNone;
  o.model = dir_;
  o.target_format = "int4";
  auto refused = audit::run_audit(o, nullptr);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("--quantized-reference"), std::string::npos)
      << refused.status().to_string();
  o.quantized_reference = qdir;
  report::Report via_copy = audit_of(o);
  lp = via_copy.find_stage("target-logprobs");
  ASSERT_NE(lp, nullptr);
  EXPECT_EQ(lp->verdict, report::Verdict::kPass) << describe(via_copy);
  EXPECT_EQ(lp->evidence["weight_format_source"], "--target-format");
  EXPECT_NE(lp->evidence["own_run"].get<std::string>().find(qdir), std::string::npos);
  // A quantized MODEL's format is what it is: another one named is refused, as is a bad name.
  o.model = qdir;
  o.quantized_reference.clear();
  o.target_format = "bf16";
  EXPECT_FALSE(audit::run_audit(o, nullptr).is_ok());
  o.target_format = "int3";
  auto bad = audit::run_audit(o, nullptr);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("expected one of"), std::string::npos);
  fs::remove_all(qdir);
}

// Through the CLI (adapt's distributed stage runs its own executable under mpirun, which must be day0).
TEST_F(Audit, AdaptWithTargetAddsTheAuditStages) {
  const fs::path out = fs::path(dir_).parent_path() / ("day0_audit_adapt_" + std::to_string(::getpid()));
  auto adapt = [&](const std::string& target, const std::string& extra) {
    fs::remove_all(out);
    const std::string cmd = std::string(DAY0_CLI_PATH) + " adapt " + dir_ + " --out " + out.string() +
                            " --prompt-tokens 6 --new-tokens 3 --soak-requests 12 --soak-seconds 20"
                            " --reference-python none --target " +
                            target + " --target-concurrency 2 " + extra + " --json 2>/dev/null";
    std::string text;
    if (FILE* f = ::popen(cmd.c_str(), "r")) {
      char buf[4096];
      for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
      ::pclose(f);
    }
    return Json::parse(text, nullptr, false);
  };
  auto stage_of = [](const Json& rep, const std::string& id) {
    for (const auto& st : rep["stages"])
      if (st["id"] == id) return st;
    return Json();
  };
  Json rep = adapt("http://127.0.0.1:" + std::to_string(harness_->port()), "--optional target-speed");
  ASSERT_TRUE(rep.is_object()) << "adapt --json printed no report";
  ASSERT_EQ(rep["stages"].size(), report::adapt_stages().size() + audit::audit_stages().size());
  for (const auto& d : audit::audit_stages()) {
    const Json st = stage_of(rep, d.id);
    ASSERT_TRUE(st.is_object()) << d.id;
    EXPECT_EQ(st["verdict"], "pass") << d.id << ": " << st["reason"];
    EXPECT_EQ(st["required"], d.id != "target-speed") << d.id;
  }
  EXPECT_TRUE(report::validate_json(rep, report::report_json_schema()).empty());
  // An unreachable target fails every audit stage with the reason, and the run.
  Json down = adapt("http://127.0.0.1:1", "");
  ASSERT_TRUE(down.is_object());
  const Json tokens = stage_of(down, "target-tokens");
  EXPECT_EQ(tokens["verdict"], "fail");
  EXPECT_NE(tokens["reason"].get<std::string>().find("could not start"), std::string::npos)
      << tokens["reason"];
  EXPECT_EQ(down["verdict"], "fail");
  fs::remove_all(out);
}

// The trained SmolLM2-135M-Instruct (Q4_1 GGUF) served by day0 serve (BF16 KV cache, its default)
// against the F32 reference of the same file: every stage passes with a real model's distributions.
// Found as tests/trained/smollm2_test.cpp finds it (DAY0_SMOLLM2_GGUF or the cache); skipped
// otherwise, and under the sanitizers (a real model there takes minutes; the miniature covers them).
TEST(AuditTrained, SmolLM2EveryStagePasses) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "a trained model under AddressSanitizer takes minutes; the miniature's audit runs here";
#endif
  std::string gguf;
  if (const char* p = std::getenv("DAY0_SMOLLM2_GGUF"); p && *p) {
    gguf = p;
  } else {
    const char* xdg = std::getenv("XDG_CACHE_HOME");
    const char* home = std::getenv("HOME");
    const std::string cache =
        xdg && *xdg ? std::string(xdg) + "/day0" : std::string(home ? home : "/tmp") + "/.cache/day0";
    gguf = cache + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  }
  if (!fs::exists(gguf)) GTEST_SKIP() << gguf << " not found (day0_trained_tests fetches it)";
  HarnessOptions ho;
  ho.model_dir = gguf;
  ho.tokenizer_dir = gguf;
  ho.server.scheduler.context = 256;
  ServeHarness harness(ho);
  audit::AuditOptions o;
  o.model = gguf;
  o.target = "http://127.0.0.1:" + std::to_string(harness.port());
  o.concurrency = {1, 2};
  o.bench_requests_per_level = 4;
  o.new_tokens = 12;
  auto rep = audit::run_audit(o, nullptr);
  ASSERT_TRUE(rep.is_ok()) << rep.status().to_string();
  std::string all;
  for (const auto& s : rep->stages) all += s.id + ": " + s.summary + " " + s.reason + "\n";
  for (const auto& s : rep->stages) EXPECT_EQ(s.verdict, report::Verdict::kPass) << all;
  const auto* lp = rep->find_stage("target-logprobs");
  ASSERT_NE(lp, nullptr);
  // A BF16 KV cache against the F32 reference on the same weights: close, not identical.
  EXPECT_LT(lp->evidence["kl_mean"].get<double>(), 1e-3) << all;
  EXPECT_GT(lp->evidence["positions"].get<int64_t>(), 20) << all;
  // The GGUF's own type sets the format, and Day0's own run in it the bounds.
  EXPECT_EQ(lp->evidence["weight_format"], "gguf Q4_1") << all;
  EXPECT_GT(lp->evidence["own_run_positions"].get<int64_t>(), 20) << all;
  EXPECT_TRUE(lp->evidence["prompt_perplexity"].is_object()) << lp->evidence["prompt_perplexity"];
  std::cout << all << "bounds: " << lp->evidence["bounds"].dump()
            << "\nprompt perplexity: " << lp->evidence["prompt_perplexity"].dump() << "\n";
}

TEST_F(Audit, UnreachableTargetIsAnErrorBeforeAnyStage) {
  auto o = options("http://127.0.0.1:1");
  auto rep = audit::run_audit(o, nullptr);
  ASSERT_FALSE(rep.is_ok());
  EXPECT_NE(rep.status().message().find("/v1/models"), std::string::npos) << rep.status().to_string();
  o.target = "ftp://example";
  EXPECT_FALSE(audit::run_audit(o, nullptr).is_ok());
}

TEST(AuditOptions, ConcurrencyAndDurationParse) {
  EXPECT_EQ(*audit::parse_concurrency("1,4,16,64"), (std::vector<int>{1, 4, 16, 64}));
  EXPECT_FALSE(audit::parse_concurrency("1,,4").is_ok());
  EXPECT_FALSE(audit::parse_concurrency("0").is_ok());
  EXPECT_FALSE(audit::parse_concurrency("8x").is_ok());
  EXPECT_DOUBLE_EQ(*audit::parse_duration("90"), 90);
  EXPECT_DOUBLE_EQ(*audit::parse_duration("15m"), 900);
  EXPECT_DOUBLE_EQ(*audit::parse_duration("2h"), 7200);
  EXPECT_FALSE(audit::parse_duration("-1s").is_ok());
  EXPECT_FALSE(audit::parse_duration("5 parsecs").is_ok());
}

TEST(TargetReply, ChatLegacyAndStreamedForms) {
  auto chat = audit::parse_reply(R"({"choices": [{"index": 0, "finish_reason": "length",
      "message": {"role": "assistant", "content": "Hi", "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
      "logprobs": {"content": [{"token": "token_id:7", "logprob": -0.5, "bytes": [72, 105],
        "top_logprobs": [{"token": "Hi", "logprob": -0.5, "id": 7}, {"token": "Yo", "logprob": -1.5}]}]}}],
      "usage": {"prompt_tokens": 9, "completion_tokens": 1}})");
  ASSERT_TRUE(chat.is_ok()) << chat.status().to_string();
  ASSERT_EQ(chat->choices[0].steps.size(), 1u);
  EXPECT_EQ(chat->choices[0].steps[0].chosen.id, 7);  // vLLM's token_id:N
  EXPECT_EQ(chat->choices[0].steps[0].chosen.bytes, "Hi");
  EXPECT_EQ(chat->choices[0].steps[0].top[0].id, 7);  // llama-server's id
  EXPECT_FALSE(chat->choices[0].steps[0].top[1].id.has_value());
  EXPECT_EQ(chat->choices[0].tool_calls[0].arguments, "{\"a\": 1}");
  EXPECT_EQ(*chat->prompt_tokens, 9);

  auto legacy = audit::parse_reply(R"({"choices": [{"text": "ab", "finish_reason": "stop",
      "logprobs": {"tokens": ["a", "b"], "token_logprobs": [null, -2.0], "top_logprobs": [null, {"b": -2.0, "c": -3.0}]}}]})");
  ASSERT_TRUE(legacy.is_ok()) << legacy.status().to_string();
  EXPECT_TRUE(std::isnan(legacy->choices[0].steps[0].chosen.logprob));
  EXPECT_EQ(legacy->choices[0].steps[1].top.size(), 2u);

  auto stream = audit::parse_stream(
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n"
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"f\","
      "\"arguments\":\"{\\\"a\\\"\"}}]}}]}\n\n"
      "data: "
      "{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\",\"tool_calls\":[{\"index\":0,\"function\":"
      "{\"arguments\":\": 1}\"}}]},\"finish_reason\":\"stop\"}]}\n\n"
      "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\n"
      "data: [DONE]\n\n");
  ASSERT_TRUE(stream.is_ok()) << stream.status().to_string();
  EXPECT_EQ(stream->choices[0].text, "Hello");
  EXPECT_EQ(stream->choices[0].finish_reason, "stop");
  EXPECT_EQ(stream->choices[0].tool_calls[0].arguments, "{\"a\": 1}");
  EXPECT_EQ(*stream->completion_tokens, 2);
}

TEST(TargetReply, RefusesWhatDoesNotFit) {
  // Each names what is wrong.
  auto no_done = audit::parse_stream("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n");
  ASSERT_FALSE(no_done.is_ok());
  EXPECT_NE(no_done.status().message().find("[DONE]"), std::string::npos);
  auto bad_index = audit::parse_reply(R"({"choices": [{"index": 100000, "text": "x"}]})");
  ASSERT_FALSE(bad_index.is_ok());
  EXPECT_NE(bad_index.status().message().find("index"), std::string::npos);
  auto bad_lp = audit::parse_reply(
      R"({"choices": [{"text": "x", "logprobs": {"content": [{"token": "x", "logprob": "high"}]}}]})");
  ASSERT_FALSE(bad_lp.is_ok());
  EXPECT_NE(bad_lp.status().message().find("logprob"), std::string::npos);
  auto bad_bytes = audit::parse_reply(
      R"({"choices": [{"text": "x", "logprobs": {"content": [{"token": "x", "logprob": -1, "bytes": [300]}]}}]})");
  EXPECT_FALSE(bad_bytes.is_ok());
  auto short_lists = audit::parse_reply(
      R"({"choices": [{"text": "x", "logprobs": {"tokens": ["a", "b"], "token_logprobs": [-1]}}]})");
  EXPECT_FALSE(short_lists.is_ok());
  auto error = audit::parse_reply(R"({"error": {"message": "boom"}})");
  ASSERT_FALSE(error.is_ok());
  EXPECT_NE(error.status().message().find("boom"), std::string::npos);
  EXPECT_FALSE(audit::parse_reply("{\"choices\": [").is_ok());
  EXPECT_EQ(*audit::parse_tokenize_reply(R"({"tokens": [1, 2, {"id": 3, "piece": "c"}]})"),
            (std::vector<int32_t>{1, 2, 3}));
  EXPECT_FALSE(audit::parse_tokenize_reply(R"({"tokens": [-1]})").is_ok());
  EXPECT_EQ(audit::error_message(R"({"error": {"message": "nope"}})"), "nope");
}

}  // namespace
}  // namespace day0::testing
