// Tool calls in generated text: each format's parser (one and several calls, text around them, nested
// and unicode arguments, malformed calls left as content, the size and depth bounds), where a stream
// must start holding text back, the format read from real chat templates (../shared; skipped when
// absent), and the response builder the server calls, fed the events of a scripted generation through
// real tokenizers (non-streamed and streamed replies must agree).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "day0/serve/api_request.h"
#include "day0/serve/openai_protocol.h"
#include "day0/serve/tool_call_parser.h"
#include "day0/tokenizer/text_prompt.h"
#include "day0/tokenizer/tokenizer.h"

namespace day0::testing {
namespace {

namespace fs = std::filesystem;
using serve::ParsedToolCall;
using serve::ToolCallFormat;
using Json = nlohmann::json;

// Arguments compared as JSON: the parser re-serializes them, key order aside.
void expect_call(const ParsedToolCall& call, const std::string& name, const Json& arguments) {
  EXPECT_EQ(call.name, name);
  EXPECT_EQ(Json::parse(call.arguments), arguments) << call.arguments;
}

void expect_content_only(std::string_view text, ToolCallFormat format) {
  const auto parsed = serve::parse_tool_calls(text, format);
  EXPECT_TRUE(parsed.calls.empty()) << text;
  EXPECT_EQ(parsed.content, text);
}

TEST(ToolCallParser, HermesOneAndSeveralCallsWithTextAround) {
  auto one = serve::parse_tool_calls(
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
      "</tool_call>",
      ToolCallFormat::kHermes);
  ASSERT_EQ(one.calls.size(), 1u);
  expect_call(one.calls[0], "get_weather", {{"city", "Paris"}});
  EXPECT_EQ(one.content, "Let me check.");

  auto two = serve::parse_tool_calls(
      "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n"
      "<tool_call>{\"name\": \"b\", \"arguments\": {\"x\": [1, {\"y\": null}], \"s\": "
      "\"}]\\\"\"}}</tool_call>",
      ToolCallFormat::kHermes);
  ASSERT_EQ(two.calls.size(), 2u);
  expect_call(two.calls[0], "a", Json::object());
  expect_call(two.calls[1], "b", {{"x", {1, {{"y", nullptr}}}}, {"s", "}]\""}});
  EXPECT_EQ(two.content, "");
}

TEST(ToolCallParser, HermesUnclosedLastCallStringArgumentsAndUnicode) {
  // Generation stops at the end-of-turn token, sometimes before </tool_call>.
  auto unclosed = serve::parse_tool_calls(
      "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"q\\\": \\\"caf\\u00e9 \xe6\x97\xa5\\\"}\"}",
      ToolCallFormat::kHermes);
  ASSERT_EQ(unclosed.calls.size(), 1u);
  expect_call(unclosed.calls[0], "f", {{"q", "caf\xc3\xa9 \xe6\x97\xa5"}});
}

TEST(ToolCallParser, MalformedCallsStayContent) {
  expect_content_only("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": }</tool_call>",
                      ToolCallFormat::kHermes);
  expect_content_only("<tool_call>{\"arguments\": {}}</tool_call>", ToolCallFormat::kHermes);  // no name
  expect_content_only("<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>",
                      ToolCallFormat::kHermes);
  expect_content_only("<tool_call>{\"name\": \"f\"}</tool_call>", ToolCallFormat::kHermes);
  // One bad call of two: all of it is content, not half a reply.
  expect_content_only(
      "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call><tool_call>{bad}</tool_call>",
      ToolCallFormat::kHermes);
  expect_content_only("[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}", ToolCallFormat::kMistral);
  expect_content_only("[TOOL_CALLS]has space[ARGS]{}", ToolCallFormat::kMistral);
  expect_content_only("{\"name\": \"a\", \"parameters\": {}} and more text", ToolCallFormat::kLlama3Json);
  expect_content_only("Plain answer, no call.", ToolCallFormat::kHermes);
  // A format nobody detected parses nothing, whatever the text holds.
  expect_content_only("<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>", ToolCallFormat::kNone);
}

TEST(ToolCallParser, BoundsLeaveOversizedInputAsContent) {
  std::string deep = "<tool_call>{\"name\": \"f\", \"arguments\": ";
  for (int i = 0; i < 200; ++i) deep += "{\"a\":";
  deep += "1";
  for (int i = 0; i < 200; ++i) deep += "}";
  deep += "}</tool_call>";
  expect_content_only(deep, ToolCallFormat::kHermes);

  std::string many;
  for (size_t i = 0; i <= serve::kMaxToolCalls; ++i)
    many += "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
  expect_content_only(many, ToolCallFormat::kHermes);

  std::string big = "<tool_call>{\"name\": \"f\", \"arguments\": {\"s\": \"" +
                    std::string(serve::kMaxToolCallTextBytes, 'x') + "\"}}</tool_call>";
  expect_content_only(big, ToolCallFormat::kHermes);
}

TEST(ToolCallParser, MistralListAndArgsForms) {
  auto list = serve::parse_tool_calls(
      "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"n\": 1}}, {\"name\": \"b\", \"arguments\": {}}]",
      ToolCallFormat::kMistral);
  ASSERT_EQ(list.calls.size(), 2u);
  expect_call(list.calls[0], "a", {{"n", 1}});
  expect_call(list.calls[1], "b", Json::object());

  auto args = serve::parse_tool_calls(
      "Sure.[TOOL_CALLS]get_weather[ARGS]{\"city\": {\"name\": \"Z\\u00fcrich\"}}[TOOL_CALLS]noop[ARGS]{}",
      ToolCallFormat::kMistral);
  ASSERT_EQ(args.calls.size(), 2u);
  expect_call(args.calls[0], "get_weather", {{"city", {{"name", "Z\xc3\xbcrich"}}}});
  expect_call(args.calls[1], "noop", Json::object());
  EXPECT_EQ(args.content, "Sure.");
}

TEST(ToolCallParser, Llama3JsonWithAndWithoutPythonTag) {
  auto bare =
      serve::parse_tool_calls("\n{\"name\": \"f\", \"parameters\": {\"x\": 2}}", ToolCallFormat::kLlama3Json);
  ASSERT_EQ(bare.calls.size(), 1u);
  expect_call(bare.calls[0], "f", {{"x", 2}});
  EXPECT_EQ(bare.content, "");

  auto tagged = serve::parse_tool_calls(
      "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}; {\"name\": \"g\", \"arguments\": {\"y\": "
      "[true]}}",
      ToolCallFormat::kLlama3Json);
  ASSERT_EQ(tagged.calls.size(), 2u);
  expect_call(tagged.calls[1], "g", {{"y", {true}}});
  // Builtin tools (brave_search.call(...)) are Python, not JSON: left as content.
  expect_content_only("<|python_tag|>brave_search.call(query=\"x\")", ToolCallFormat::kLlama3Json);
  expect_content_only("The answer is 4.", ToolCallFormat::kLlama3Json);
}

TEST(ToolCallParser, HoldStartCoversWholeAndCutMarkers) {
  using serve::tool_call_hold_start;
  EXPECT_EQ(tool_call_hold_start("Hello", ToolCallFormat::kHermes), 5u);
  EXPECT_EQ(tool_call_hold_start("Hi <tool_call>{", ToolCallFormat::kHermes), 3u);
  EXPECT_EQ(tool_call_hold_start("Hi <tool_c", ToolCallFormat::kHermes), 3u);
  EXPECT_EQ(tool_call_hold_start("a < b", ToolCallFormat::kHermes), 5u);
  EXPECT_EQ(tool_call_hold_start("x [TOOL", ToolCallFormat::kMistral), 2u);
  EXPECT_EQ(tool_call_hold_start("  {\"na", ToolCallFormat::kLlama3Json), 0u);
  EXPECT_EQ(tool_call_hold_start("  ", ToolCallFormat::kLlama3Json), 0u);
  EXPECT_EQ(tool_call_hold_start("Sure <|python", ToolCallFormat::kLlama3Json), 5u);
  EXPECT_EQ(tool_call_hold_start("<tool_call>", ToolCallFormat::kNone), 11u);
}

std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

fs::path shared_tokenizers() {
  return fs::path(DAY0_SHARED_DIR) / "tokenizers";
}

TEST(ToolCallFormat, DetectedFromReleasedTemplates) {
  if (!fs::exists(shared_tokenizers()))
    GTEST_SKIP() << "shared tokenizers not found at " << shared_tokenizers() << ": skipped";
  const std::vector<std::pair<std::string, ToolCallFormat>> expected = {
      {"qwen3/templates/Qwen-Qwen3-0.6B.jinja", ToolCallFormat::kHermes},
      {"qwen3/templates/Qwen-Qwen2.5-7B-Instruct.jinja", ToolCallFormat::kHermes},
      {"qwen3/templates/Qwen-QwQ-32B.jinja", ToolCallFormat::kHermes},
      {"mistral-7b-instruct-v0.3/templates/tokenizer_config.chat_template.jinja", ToolCallFormat::kMistral},
      {"mistral-7b-instruct-v0.3/templates/mistralai-Mistral-Nemo-Instruct-2407.jinja",
       ToolCallFormat::kMistral},
      {"llama-3/templates/meta-llama-Llama-3.1-8B-Instruct.jinja", ToolCallFormat::kLlama3Json},
      {"llama-3/templates/meta-llama-Llama-3.2-3B-Instruct.jinja", ToolCallFormat::kLlama3Json},
      // Not parsed (docs/serving.md lists them): their calls stay content.
      {"glm-4.5/templates/GLM-4.6.jinja", ToolCallFormat::kNone},
      {"deepseek-v3/templates/deepseek-ai-DeepSeek-V3.1.jinja", ToolCallFormat::kNone},
      {"qwen3/templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", ToolCallFormat::kNone},
      {"kimi-k2/templates/moonshotai-Kimi-K2.jinja", ToolCallFormat::kNone},
      {"gpt-oss/templates/openai-gpt-oss-120b.jinja", ToolCallFormat::kNone},
  };
  for (const auto& [file, format] : expected) {
    const fs::path path = shared_tokenizers() / file;
    ASSERT_TRUE(fs::exists(path)) << path;
    EXPECT_EQ(serve::tool_call_format_name(serve::detect_tool_call_format(read_text(path))),
              serve::tool_call_format_name(format))
        << file;
  }
}

// The events the scheduler sends for a generation of `text`: one per token (its text as the streaming
// decoder makes it final, special tokens dropped), then the end with what the decoder still held.
std::vector<serve::StreamEvent> scripted_events(const tokenizer::Tokenizer& tok, const std::string& text) {
  std::vector<serve::StreamEvent> events;
  StreamingDecoder decoder(tok);
  const std::vector<int32_t> ids = tok.encode(text);
  for (int32_t id : ids) {
    serve::StreamEvent e;
    e.text = decoder.push(id);
    e.steps.push_back(GenerationStep{TokenLogprob{id, -0.5}, {}});
    events.push_back(std::move(e));
  }
  serve::StreamEvent end;
  end.text = decoder.finish();
  end.finished = true;
  end.finish_reason = "stop";
  end.prompt_tokens = 3;
  end.completion_tokens = static_cast<int64_t>(ids.size());
  events.push_back(std::move(end));
  return events;
}

struct BuiltReply {
  Json message;  // non-streamed choices[0].message
  std::string finish_reason;
  std::string streamed_content;
  Json streamed_calls = Json::array();
  std::string streamed_finish_reason;
};

BuiltReply build_reply(const tokenizer::Tokenizer& tok, const std::string& generated, const Json& extra) {
  Json body = {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "weather?"}}}}};
  for (const auto& [k, v] : extra.items()) body[k] = v;
  auto parsed = serve::parse_api_request(body.dump(), serve::Endpoint::kChat);
  const auto& request = std::get<serve::ApiRequest>(parsed);
  const auto events = scripted_events(tok, generated);
  BuiltReply out;
  serve::ResponseBuilder whole(request, &tok, "m", "chatcmpl-1", 0);
  for (const auto& e : events) whole.add(e);
  const Json j = Json::parse(whole.body());
  out.message = j["choices"][0]["message"];
  out.finish_reason = j["choices"][0]["finish_reason"];

  serve::ResponseBuilder streamed(request, &tok, "m", "chatcmpl-1", 0);
  std::string sse = streamed.sse_open();
  for (const auto& e : events) sse += streamed.sse_event(e);
  std::istringstream lines(sse);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("data: ", 0) != 0) continue;
    const Json chunk = Json::parse(line.substr(6));
    const Json& choice = chunk["choices"][0];
    const Json& delta = choice["delta"];
    if (delta.contains("content")) out.streamed_content += delta["content"].get<std::string>();
    if (delta.contains("tool_calls"))
      for (const auto& c : delta["tool_calls"]) out.streamed_calls.push_back(c);
    if (!choice["finish_reason"].is_null()) out.streamed_finish_reason = choice["finish_reason"];
  }
  return out;
}

const Json kTools = Json::array(
    {{{"type", "function"},
      {"function",
       {{"name", "get_weather"},
        {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}}});

// Loaded once per test binary (a tokenizer.json takes a fraction of a second); null when absent.
std::shared_ptr<const tokenizer::Tokenizer> tokenizer_or_skip(const std::string& name) {
  static std::map<std::string, std::shared_ptr<const tokenizer::Tokenizer>> loaded;
  if (auto it = loaded.find(name); it != loaded.end()) return it->second;
  const fs::path dir = shared_tokenizers() / name;
  if (!fs::exists(dir)) return nullptr;
  auto tok = tokenizer::load_tokenizer(dir);
  EXPECT_TRUE(tok.is_ok()) << tok.status().to_string();
  return loaded[name] = tok.is_ok() ? *tok : nullptr;
}

TEST(ToolCallReply, HermesCallBecomesToolCallsStreamedAndNot) {
  auto tok = tokenizer_or_skip("qwen3");
  if (tok == nullptr) GTEST_SKIP() << "shared tokenizers not found at " << shared_tokenizers() << ": skipped";
  const std::string generated =
      "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"K\xc3\xb8"
      "benhavn\"}}\n"
      "</tool_call>";
  const BuiltReply r = build_reply(*tok, generated, {{"tools", kTools}});
  EXPECT_EQ(r.finish_reason, "tool_calls");
  EXPECT_EQ(r.message["content"], "Checking.");
  ASSERT_EQ(r.message["tool_calls"].size(), 1u);
  const Json& call = r.message["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_FALSE(call["id"].get<std::string>().empty());
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(Json::parse(call["function"]["arguments"].get<std::string>()), Json({{"city",
                                                                                  "K\xc3\xb8"
                                                                                  "benhavn"}}));
  // The stream sends the text before the call as it comes and never the markup.
  EXPECT_EQ(r.streamed_finish_reason, "tool_calls");
  EXPECT_EQ(r.streamed_content, "Checking.\n");
  ASSERT_EQ(r.streamed_calls.size(), 1u);
  EXPECT_EQ(r.streamed_calls[0]["index"], 0);
  EXPECT_EQ(r.streamed_calls[0]["function"], call["function"]);
}

TEST(ToolCallReply, NoToolsToolChoiceNoneOrNoCallLeaveContent) {
  auto tok = tokenizer_or_skip("qwen3");
  if (tok == nullptr) GTEST_SKIP() << "shared tokenizers not found at " << shared_tokenizers() << ": skipped";
  const std::string call = "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
  for (const Json& extra : {Json::object(), Json{{"tools", kTools}, {"tool_choice", "none"}}}) {
    const BuiltReply r = build_reply(*tok, call, extra);
    EXPECT_EQ(r.finish_reason, "stop") << extra;
    EXPECT_EQ(r.message["content"], call) << extra;
    EXPECT_FALSE(r.message.contains("tool_calls")) << extra;
    EXPECT_EQ(r.streamed_content, call) << extra;
  }
  // A marker that turns out not to be a call is flushed as content at the end.
  const std::string not_a_call = "Use <tool_call> tags like <tool_call>this</tool_call>.";
  const BuiltReply r = build_reply(*tok, not_a_call, {{"tools", kTools}});
  EXPECT_EQ(r.finish_reason, "stop");
  EXPECT_EQ(r.message["content"], not_a_call);
  EXPECT_EQ(r.streamed_content, not_a_call);
  EXPECT_TRUE(r.streamed_calls.empty());
}

TEST(ToolCallReply, MistralSpecialMarkerTokenIsSeenThoughNotDecoded) {
  auto tok = tokenizer_or_skip("mistral-7b-instruct-v0.3");
  if (tok == nullptr) GTEST_SKIP() << "shared tokenizers not found at " << shared_tokenizers() << ": skipped";
  const std::string generated =
      "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}, "
      "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}]";
  // [TOOL_CALLS] is a special token: the decoded text the scheduler sends does not have it.
  const auto ids = tok->encode(generated);
  ASSERT_EQ(tok->decode(ids, /*skip_special_tokens=*/true).find("[TOOL_CALLS]"), std::string::npos);
  const BuiltReply r = build_reply(*tok, generated, {{"tools", kTools}, {"tool_choice", "auto"}});
  EXPECT_EQ(r.finish_reason, "tool_calls");
  EXPECT_TRUE(r.message["content"].is_null());
  ASSERT_EQ(r.message["tool_calls"].size(), 2u);
  EXPECT_EQ(Json::parse(r.message["tool_calls"][1]["function"]["arguments"].get<std::string>()),
            Json({{"city", "Rome"}}));
  EXPECT_NE(r.message["tool_calls"][0]["id"], r.message["tool_calls"][1]["id"]);
  EXPECT_EQ(r.streamed_finish_reason, "tool_calls");
  EXPECT_EQ(r.streamed_content, "");
  ASSERT_EQ(r.streamed_calls.size(), 2u);
  EXPECT_EQ(r.streamed_calls[1]["index"], 1);
}

TEST(ToolCallRequest, ToolChoiceIsCheckedAndNoneRecorded) {
  auto parse = [](const Json& choice) {
    Json body = {
        {"model", "m"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"tool_choice", choice}};
    return serve::parse_api_request(body.dump(), serve::Endpoint::kChat);
  };
  EXPECT_TRUE(std::get<serve::ApiRequest>(parse("none")).tool_choice_none);
  EXPECT_FALSE(std::get<serve::ApiRequest>(parse("auto")).tool_choice_none);
  EXPECT_FALSE(std::get<serve::ApiRequest>(parse(Json{{"type", "function"}, {"function", {{"name", "f"}}}}))
                   .tool_choice_none);
  auto bad = parse("sometimes");
  ASSERT_TRUE(std::holds_alternative<serve::ApiError>(bad));
  EXPECT_EQ(std::get<serve::ApiError>(bad).param, "tool_choice");
  EXPECT_TRUE(std::holds_alternative<serve::ApiError>(parse(3)));
}

}  // namespace
}  // namespace day0::testing
