// Text through the server: a miniature with the Mistral tokenizer's vocabulary (from ../shared; skipped
// when absent) — chat through the model's template, streamed deltas that add up to the non-streamed
// reply, stop strings cut out of the text (the stream agrees), logprobs, and the stop-string matcher
// across token boundaries.
#include <gtest/gtest.h>

#include <filesystem>

#include "day0/model/catalog.h"
#include "day0/serve/openai_protocol.h"
#include "day0/serve/stop_matcher.h"
#include "day0/synth/synth_checkpoint.h"
#include "day0/tokenizer/tokenizer.h"
#include "serve_harness.h"

namespace day0::testing {
namespace {

namespace fs = std::filesystem;

class ChatServer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tokenizer_ = std::string(DAY0_SHARED_DIR) + "/tokenizers/mistral-7b-instruct-v0.3";
    if (!fs::exists(tokenizer_)) return;
    dir_ = (fs::path(::testing::TempDir()) / ("day0_serve_chat_" + std::to_string(::getpid()))).string();
    fs::remove_all(dir_);
    auto full = resolve_model("llama-3.1-8b");
    ASSERT_TRUE(full.is_ok());
    MiniatureOptions dims;
    dims.layers = 2;
    dims.vocab = 32768;  // the tokenizer's ids
    auto synth = synthesize_miniature(full->spec, dims, SynthOptions{}, dir_);
    ASSERT_TRUE(synth.is_ok()) << synth.status().to_string();
    HarnessOptions o;
    o.model_dir = dir_;
    o.tokenizer_dir = tokenizer_;
    harness_ = new ServeHarness(o);
  }
  static void TearDownTestSuite() {
    delete harness_;
    harness_ = nullptr;
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  void SetUp() override {
    if (harness_ == nullptr) GTEST_SKIP() << "shared tokenizers not found at " << tokenizer_;
  }
  static nlohmann::json chat_body(const std::string& user, int max_tokens, bool stream,
                                  const nlohmann::json& extra = nlohmann::json::object()) {
    nlohmann::json j = {{"model", "mini"},
                        {"messages", {{{"role", "user"}, {"content", user}}}},
                        {"max_tokens", max_tokens},
                        {"temperature", 0},
                        {"stream", stream}};
    for (const auto& [k, v] : extra.items()) j[k] = v;
    return j;
  }
  static std::string streamed_text(const SseReply& r) {
    std::string text;
    for (const auto& e : r.events) {
      if (e.contains("choices") && !e["choices"].empty() && e["choices"][0]["delta"].contains("content"))
        text += e["choices"][0]["delta"]["content"].get<std::string>();
    }
    return text;
  }
  static std::string tokenizer_, dir_;
  static ServeHarness* harness_;
};
std::string ChatServer::tokenizer_, ChatServer::dir_;
ServeHarness* ChatServer::harness_ = nullptr;

TEST_F(ChatServer, StreamedDeltasAddUpToTheReply) {
  const HttpReply r =
      http_post(harness_->port(), "/v1/chat/completions",
                chat_body("Hello there", 12, false, {{"logprobs", true}, {"top_logprobs", 2}}).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const auto j = r.json();
  EXPECT_EQ(j["object"], "chat.completion");
  const std::string text = j["choices"][0]["message"]["content"];
  EXPECT_FALSE(text.empty());
  const auto& content = j["choices"][0]["logprobs"]["content"];
  EXPECT_EQ(content.size(), j["usage"]["completion_tokens"].get<size_t>());
  for (const auto& t : content) {
    ASSERT_EQ(t["top_logprobs"].size(), 2u);
    EXPECT_LE(t["logprob"].get<double>(), 0.0);
    EXPECT_GE(t["top_logprobs"][0]["logprob"].get<double>(), t["top_logprobs"][1]["logprob"].get<double>());
  }
  EXPECT_GT(j["usage"]["prompt_tokens"].get<int>(), 2);
  const SseReply s =
      http_stream(harness_->port(), "/v1/chat/completions", chat_body("Hello there", 12, true).dump());
  ASSERT_EQ(s.status, 200);
  EXPECT_TRUE(s.done);
  ASSERT_FALSE(s.events.empty());
  EXPECT_EQ(s.events.front()["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(s.events.front()["object"], "chat.completion.chunk");
  EXPECT_EQ(streamed_text(s), text);
  EXPECT_EQ(s.events.back()["choices"][0]["finish_reason"], j["choices"][0]["finish_reason"]);
}

// The template's format is Mistral's, so the reply goes through the tool-call parser: a model that
// answers in plain text (this miniature's random weights never write [TOOL_CALLS] then a JSON list) still
// gets its text as content, streamed as it comes, with the generation's own finish_reason.
TEST_F(ChatServer, ToolsWithAPlainTextAnswerKeepContentAndFinishReason) {
  const nlohmann::json tools = nlohmann::json::array(
      {{{"type", "function"},
        {"function",
         {{"name", "get_weather"},
          {"parameters", {{"type", "object"}, {"properties", nlohmann::json::object()}}}}}}});
  const HttpReply r = http_post(harness_->port(), "/v1/chat/completions",
                                chat_body("Weather in Paris?", 10, false, {{"tools", tools}}).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const auto j = r.json();
  const auto& choice = j["choices"][0];
  const std::string finish = choice["finish_reason"];
  EXPECT_TRUE(finish == "stop" || finish == "length") << finish;
  EXPECT_FALSE(choice["message"].contains("tool_calls"));
  ASSERT_TRUE(choice["message"]["content"].is_string());
  const SseReply s = http_stream(harness_->port(), "/v1/chat/completions",
                                 chat_body("Weather in Paris?", 10, true, {{"tools", tools}}).dump());
  ASSERT_EQ(s.status, 200);
  EXPECT_TRUE(s.done);
  EXPECT_EQ(streamed_text(s), choice["message"]["content"].get<std::string>());
  EXPECT_EQ(s.events.back()["choices"][0]["finish_reason"], finish);
}

TEST_F(ChatServer, AStopStringEndsTheReplyAndIsNotEmitted) {
  const HttpReply full =
      http_post(harness_->port(), "/v1/chat/completions", chat_body("Tell me a story", 16, false).dump());
  ASSERT_EQ(full.status, 200);
  const std::string text = full.json()["choices"][0]["message"]["content"];
  // Three ASCII bytes from the middle of the reply.
  size_t at = text.size() / 2;
  while (at + 3 < text.size() && (static_cast<unsigned char>(text[at]) >= 0x80 || text[at] == ' ')) ++at;
  ASSERT_LT(at + 3, text.size()) << text;
  const std::string stop = text.substr(at, 3);
  const std::string expected = text.substr(0, text.find(stop));
  const HttpReply cut = http_post(harness_->port(), "/v1/chat/completions",
                                  chat_body("Tell me a story", 16, false, {{"stop", {stop}}}).dump());
  ASSERT_EQ(cut.status, 200) << cut.body;
  EXPECT_EQ(cut.json()["choices"][0]["message"]["content"], expected) << "stop " << stop;
  EXPECT_EQ(cut.json()["choices"][0]["finish_reason"], "stop");
  const SseReply s = http_stream(harness_->port(), "/v1/chat/completions",
                                 chat_body("Tell me a story", 16, true, {{"stop", stop}}).dump());
  EXPECT_EQ(streamed_text(s), expected);
  EXPECT_EQ(s.events.back()["choices"][0]["finish_reason"], "stop");
}

// A chat request without max_tokens is bounded by the server's default (and by the context); /v1/models
// says the default; completions keep OpenAI's 16.
TEST_F(ChatServer, MaxTokensDefaultBoundsAnUnboundedChat) {
  auto tok = tokenizer::load_tokenizer(tokenizer_);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  serve::ApiRequest chat;
  chat.endpoint = serve::Endpoint::kChat;
  chat.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "Hi"}])");
  serve::ModelLimits limits{.vocab = 32768, .context = 1000, .max_tokens_default = 50};
  auto seq = serve::to_sequence_request(chat, tok->get(), limits, 1);
  ASSERT_TRUE(std::holds_alternative<serve::SequenceRequest>(seq));
  EXPECT_EQ(std::get<serve::SequenceRequest>(seq).max_new, 50);
  limits.max_tokens_default = 100000;  // the context bounds it first
  seq = serve::to_sequence_request(chat, tok->get(), limits, 1);
  const auto& bounded = std::get<serve::SequenceRequest>(seq);
  EXPECT_EQ(bounded.max_new, 1000 - static_cast<int64_t>(bounded.prompt.size()));
  serve::ApiRequest completion;
  completion.endpoint = serve::Endpoint::kCompletion;
  completion.prompt_ids = {1, 2, 3};
  completion.prompt_is_ids = true;
  seq = serve::to_sequence_request(completion, tok->get(), limits, 1);
  EXPECT_EQ(std::get<serve::SequenceRequest>(seq).max_new, 16);
  const auto models = http_get(harness_->port(), "/v1/models").json();
  EXPECT_EQ(models["data"][0]["max_tokens_default"], 4096) << models.dump();
}

TEST_F(ChatServer, CompletionsTakeTextAndAnUnknownModelIs404) {
  const HttpReply r = http_post(harness_->port(), "/v1/completions",
                                R"({"model":"mini","prompt":"Once upon a time","max_tokens":5,"temperature":0,
                                    "logprobs":1})");
  ASSERT_EQ(r.status, 200) << r.body;
  const auto j = r.json();
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"].size(), j["usage"]["completion_tokens"].get<size_t>());
  EXPECT_EQ(j["choices"][0]["logprobs"]["top_logprobs"][0].size(), 1u);
  const HttpReply wrong = http_post(harness_->port(), "/v1/chat/completions",
                                    chat_body("hi", 2, false, {{"model", "other"}}).dump());
  EXPECT_EQ(wrong.status, 404);
  EXPECT_EQ(wrong.json()["error"]["code"], "model_not_found");
}

TEST(StopMatcher, MatchesAcrossPiecesAndHoldsBackPossibleStarts) {
  serve::StopMatcher m({"END", "xyz"});
  EXPECT_EQ(m.push("abc E"), "abc ");  // "E" may start "END"
  EXPECT_EQ(m.push("N"), "");          // "EN" still may
  EXPECT_EQ(m.push("D and more"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.finish(), "");
  serve::StopMatcher n({"END"});
  EXPECT_EQ(n.push("E"), "");
  EXPECT_EQ(n.push("NO"), "ENO");  // not a stop after all: released
  EXPECT_EQ(n.push("xE"), "x");
  EXPECT_EQ(n.finish(), "E");
  EXPECT_FALSE(n.stopped());
  serve::StopMatcher earliest({"cd", "bcd"});
  EXPECT_EQ(earliest.push("abcde"), "a");  // the earlier match wins
}

}  // namespace
}  // namespace day0::testing
