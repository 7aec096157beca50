#pragma once
// The OpenAI protocol around the scheduler, without HTTP: a parsed request turned into the engine's
// sequence request (chat template, tokenization, context checks, sampling), and scheduler events
// turned into response bodies (chat.completion / text_completion objects, or their streamed chunks as
// server-sent events). A chat request with tools gets the model's calls as tool_calls, in the format its
// chat template names (tool_call_parser.h).
// Thread safety: pure functions; a ResponseBuilder belongs to one request.
#include <cstdint>
#include <string>
#include <variant>

#include <nlohmann/json.hpp>

#include "day0/serve/api_request.h"
#include "day0/serve/scheduler.h"
#include "day0/serve/tool_call_parser.h"
#include "day0/tokenizer/tokenizer.h"

namespace day0::serve {

struct ModelLimits {
  int64_t vocab = 0;
  int64_t context = 0;  // tokens a sequence may hold
  // A chat request without max_tokens generates at most this many (and never past the context), so that
  // a request nobody bounds cannot hold the engine for the whole context. Completions keep OpenAI's 16.
  int64_t max_tokens_default = 4096;
};

// 400 for a prompt longer than the context, max_tokens past it, token ids outside the vocabulary, a
// chat without a tokenizer or template, or a template that refuses the messages.
std::variant<SequenceRequest, ApiError> to_sequence_request(const ApiRequest& request,
                                                            const tokenizer::Tokenizer* tokenizer,
                                                            const ModelLimits& limits, uint64_t default_seed);

class ResponseBuilder {
 public:
  ResponseBuilder(const ApiRequest& request, const tokenizer::Tokenizer* tokenizer, std::string model,
                  std::string id, int64_t created);

  // Streaming: the opening chunk (chat: the assistant role), one or more chunks per event, the end.
  std::string sse_open() const;
  std::string sse_event(const StreamEvent& event);
  std::string sse_close() const;

  // Non-streaming: events accumulated, then the whole object.
  void add(const StreamEvent& event);
  std::string body() const;

 private:
  nlohmann::json chunk(nlohmann::json choice) const;
  std::string sse_usage_event() const;
  nlohmann::json logprobs_of(const std::vector<GenerationStep>& steps, int64_t text_offset) const;
  std::string token_text(int32_t id) const;
  std::string echoed_prompt() const;  // the prompt as echo returns it: its text, or its ids decoded
  // The generated tokens with their special tokens written out (the decoder drops them, and Mistral's
  // [TOOL_CALLS] and Llama's <|python_tag|> are special), end-of-turn tokens left out.
  std::string raw_generated_text() const;
  void keep_raw_ids(const StreamEvent& event);
  std::string sse_tool_event(const StreamEvent& event);
  nlohmann::json tool_calls_json(const std::vector<ParsedToolCall>& calls, bool streamed) const;

  const ApiRequest& request_;
  const tokenizer::Tokenizer* tokenizer_;
  std::string model_, id_;
  int64_t created_ = 0;
  // Accumulated (non-streaming) or for usage (streaming).
  std::string text_;
  std::vector<GenerationStep> steps_;
  std::string finish_reason_;
  int64_t prompt_tokens_ = 0, completion_tokens_ = 0;
  int64_t streamed_bytes_ = 0;  // completions text_offset while streaming
  bool echoed_ = false;         // echo: the prompt was put first
  // Tool calls: kNone unless the request has tools (tool_choice not "none") and the template's format
  // is known. Streaming holds text from where a call may start until the end, then parses it.
  ToolCallFormat tool_format_ = ToolCallFormat::kNone;
  std::vector<int32_t> raw_ids_;
  std::string stream_text_;  // the content text of the events so far
  size_t sent_ = 0;          // bytes of stream_text_ sent as content
  bool holding_ = false;     // a special marker token came: nothing more is sent until the end
};

std::string sse_data(const std::string& json);  // "data: JSON\n\n"

}  // namespace day0::serve
