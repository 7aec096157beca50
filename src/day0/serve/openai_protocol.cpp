#include "day0/serve/openai_protocol.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "day0/tokenizer/text_prompt.h"

namespace day0::serve {
namespace {

using Json = nlohmann::json;

std::string dump(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// `prompt_param` names the prompt's field of the endpoint ("messages" for chat, "prompt" otherwise).
ApiError context_error(int64_t prompt, int64_t completion, int64_t context, const char* prompt_param) {
  return bad_request(fmt::format("this model's maximum context length is {} tokens; the request asks for {} "
                                 "({} in the prompt, {} in the completion)",
                                 context, prompt + completion, prompt, completion),
                     completion > 0 ? "max_tokens" : prompt_param, "context_length_exceeded");
}

}  // namespace

std::string sse_data(const std::string& json) {
  return "data: " + json + "\n\n";
}

std::variant<SequenceRequest, ApiError> to_sequence_request(const ApiRequest& r,
                                                            const tokenizer::Tokenizer* tok,
                                                            const ModelLimits& limits,
                                                            uint64_t default_seed) {
  SequenceRequest out;
  if (r.endpoint == Endpoint::kChat) {
    if (tok == nullptr)
      return bad_request("this model was served without a tokenizer: chat needs one", "messages",
                         "no_tokenizer");
    nlohmann::ordered_json chat = r.messages;
    if (!r.tools.is_null()) chat = {{"messages", r.messages}, {"tools", r.tools}};
    auto ids = encode_chat_prompt(*tok, chat, limits.vocab);
    if (!ids.is_ok()) return bad_request(ids.status().message(), "messages", "invalid_messages");
    out.prompt = std::move(ids).value();
  } else if (r.prompt_is_ids) {
    for (size_t i = 0; i < r.prompt_ids.size(); ++i) {
      if (r.prompt_ids[i] >= limits.vocab) {
        return bad_request(fmt::format("prompt[{}]: token id {} is outside the vocabulary of {}", i,
                                       r.prompt_ids[i], limits.vocab),
                           "prompt", "invalid_value");
      }
    }
    out.prompt = r.prompt_ids;
  } else {
    if (tok == nullptr)
      return bad_request("this model was served without a tokenizer: send the prompt as token ids", "prompt",
                         "no_tokenizer");
    auto ids = encode_text_prompt(*tok, r.prompt_text, limits.vocab);
    if (!ids.is_ok()) return bad_request(ids.status().message(), "prompt", "invalid_prompt");
    out.prompt = std::move(ids).value();
  }
  const auto prompt = static_cast<int64_t>(out.prompt.size());
  const char* prompt_param = r.endpoint == Endpoint::kChat ? "messages" : "prompt";
  if (prompt > limits.context) return context_error(prompt, 0, limits.context, prompt_param);
  if (r.max_tokens && prompt + *r.max_tokens > limits.context)
    return context_error(prompt, *r.max_tokens, limits.context, prompt_param);
  // Unset: completions stop at 16 tokens (OpenAI's default), chat at --max-tokens-default or the context.
  out.max_new = r.max_tokens.value_or(r.endpoint == Endpoint::kCompletion
                                          ? 16
                                          : std::min(limits.max_tokens_default, limits.context - prompt));
  if (out.max_new < 1) return context_error(prompt, 1, limits.context, prompt_param);
  out.sampling.greedy = r.temperature <= 0.0f;
  out.sampling.temperature = r.temperature;
  out.sampling.top_p = r.top_p;
  out.sampling.top_k = r.top_k;
  out.sampling.seed = r.seed.value_or(default_seed);
  out.sampling.presence_penalty = r.presence_penalty;
  out.sampling.frequency_penalty = r.frequency_penalty;
  out.logprobs = r.logprobs;
  out.top_logprobs = r.top_logprobs;
  if (r.echo && r.logprobs) out.prompt_logprobs = r.top_logprobs;
  if (tok != nullptr && !r.ignore_eos) out.stop_tokens = tok->special_tokens().stop_ids;
  out.stop_strings = r.stop;
  return out;
}

ResponseBuilder::ResponseBuilder(const ApiRequest& request, const tokenizer::Tokenizer* tokenizer,
                                 std::string model, std::string id, int64_t created)
    : request_(request),
      tokenizer_(tokenizer),
      model_(std::move(model)),
      id_(std::move(id)),
      created_(created) {
  if (request_.endpoint != Endpoint::kChat || request_.tools.is_null() || request_.tool_choice_none ||
      tokenizer_ == nullptr)
    return;
  // Without a known format the model's text stays content: never guessed (docs/serving.md).
  if (auto source = tokenizer_->chat_template()) tool_format_ = detect_tool_call_format(*source);
}

void ResponseBuilder::keep_raw_ids(const StreamEvent& e) {
  if (tool_format_ == ToolCallFormat::kNone) return;
  const auto& stop_ids = tokenizer_->special_tokens().stop_ids;
  for (const GenerationStep& s : e.steps) {
    if (std::find(stop_ids.begin(), stop_ids.end(), s.chosen.token) == stop_ids.end())
      raw_ids_.push_back(s.chosen.token);
  }
}

std::string ResponseBuilder::raw_generated_text() const {
  return tokenizer_->decode(raw_ids_, /*skip_special_tokens=*/false);
}

Json ResponseBuilder::tool_calls_json(const std::vector<ParsedToolCall>& calls, bool streamed) const {
  Json out = Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    Json call = {{"id", fmt::format("call_{}_{}", id_, i)},
                 {"type", "function"},
                 {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (streamed) call["index"] = i;  // the streamed form says which call a delta belongs to
    out.push_back(std::move(call));
  }
  return out;
}

// Chat with tool-call parsing: content is sent until a call may be starting, then held; at the end
// the held text is parsed into tool_calls, or sent as content when it is not a call.
std::string ResponseBuilder::sse_tool_event(const StreamEvent& e) {
  keep_raw_ids(e);
  stream_text_ += e.text;
  // A special marker token ([TOOL_CALLS], <|python_tag|>) is not in the decoded text: its id says it.
  for (const GenerationStep& s : e.steps)
    holding_ = holding_ || is_tool_call_marker(token_text(s.chosen.token), tool_format_);
  // The marker (or its first bytes) stays where it is until the end, so each event finds it again.
  const size_t sendable =
      holding_ ? sent_
               : sent_ + tool_call_hold_start(std::string_view(stream_text_).substr(sent_), tool_format_);
  std::string out;
  if (!e.steps.empty() || sendable > sent_) {
    Json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
    choice["delta"] = {{"content", stream_text_.substr(sent_, sendable - sent_)}};
    sent_ = sendable;
    if (request_.logprobs) choice["logprobs"] = logprobs_of(e.steps, 0);
    out += sse_data(dump(chunk(std::move(choice))));
  }
  if (!e.finished) return out;
  prompt_tokens_ = e.prompt_tokens;
  completion_tokens_ = e.completion_tokens;
  ToolCallParse parsed = parse_tool_calls(raw_generated_text(), tool_format_);
  Json delta = Json::object();
  std::string finish_reason = e.finish_reason;
  if (!parsed.calls.empty()) {
    // Content around the calls that was not sent yet (text after them, rarely there).
    const std::string_view sent(stream_text_.data(), sent_);
    if (parsed.content.size() > sent.size() &&
        std::string_view(parsed.content).substr(0, sent.size()) == sent)
      delta["content"] = parsed.content.substr(sent.size());
    delta["tool_calls"] = tool_calls_json(parsed.calls, /*streamed=*/true);
    finish_reason = "tool_calls";
  } else if (sent_ < stream_text_.size()) {
    delta["content"] = stream_text_.substr(sent_);
    sent_ = stream_text_.size();
  }
  out += sse_data(
      dump(chunk({{"index", 0}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", finish_reason}})));
  if (request_.include_usage) out += sse_usage_event();
  return out;
}

std::string ResponseBuilder::token_text(int32_t id) const {
  if (tokenizer_ == nullptr) return fmt::format("token_id:{}", id);
  const int32_t one[] = {id};
  return tokenizer_->decode(one, /*skip_special_tokens=*/false);
}

Json ResponseBuilder::logprobs_of(const std::vector<GenerationStep>& steps, int64_t text_offset) const {
  auto bytes = [](const std::string& s) {
    Json b = Json::array();
    for (unsigned char c : s) b.push_back(static_cast<int>(c));
    return b;
  };
  if (request_.endpoint == Endpoint::kChat) {
    Json content = Json::array();
    for (const GenerationStep& s : steps) {
      const std::string t = token_text(s.chosen.token);
      Json top = Json::array();
      for (const TokenLogprob& alt : s.top) {
        const std::string a = token_text(alt.token);
        top.push_back({{"token", a}, {"logprob", alt.logprob}, {"bytes", bytes(a)}, {"id", alt.token}});
      }
      // "id" beside OpenAI's fields (as llama-server writes it): several ids can share a text (byte
      // tokens, a leading space a decoder strips), and a client that compares tokens needs which one.
      content.push_back({{"token", t},
                         {"logprob", s.chosen.logprob},
                         {"bytes", bytes(t)},
                         {"id", s.chosen.token},
                         {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  Json tokens = Json::array(), token_logprobs = Json::array(), top_logprobs = Json::array(),
       offsets = Json::array();
  for (const GenerationStep& s : steps) {
    const std::string t = token_text(s.chosen.token);
    tokens.push_back(t);
    // An echoed prompt's first token has no log-probability: null, as OpenAI writes it.
    const bool unscored = std::isnan(s.chosen.logprob);
    token_logprobs.push_back(unscored ? Json(nullptr) : Json(s.chosen.logprob));
    Json top = Json::object();
    for (const TokenLogprob& alt : s.top) top[token_text(alt.token)] = alt.logprob;
    top_logprobs.push_back(request_.top_logprobs > 0 && !unscored ? top : Json(nullptr));
    offsets.push_back(text_offset);
    text_offset += static_cast<int64_t>(t.size());
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_logprobs},
          {"top_logprobs", top_logprobs},
          {"text_offset", offsets}};
}

// stream_options.include_usage: the last event before [DONE], no choices.
std::string ResponseBuilder::sse_usage_event() const {
  Json usage = chunk(Json());
  usage["choices"] = Json::array();
  usage["usage"] = {{"prompt_tokens", prompt_tokens_},
                    {"completion_tokens", completion_tokens_},
                    {"total_tokens", prompt_tokens_ + completion_tokens_}};
  return sse_data(dump(usage));
}

Json ResponseBuilder::chunk(Json choice) const {
  const bool chat = request_.endpoint == Endpoint::kChat;
  Json j = {{"id", id_},
            {"object", chat ? "chat.completion.chunk" : "text_completion"},
            {"created", created_},
            {"model", model_},
            {"choices", Json::array({std::move(choice)})}};
  if (request_.include_usage) j["usage"] = nullptr;
  return j;
}

std::string ResponseBuilder::sse_open() const {
  if (request_.endpoint != Endpoint::kChat) return {};
  return sse_data(dump(chunk({{"index", 0},
                              {"delta", {{"role", "assistant"}, {"content", ""}}},
                              {"logprobs", nullptr},
                              {"finish_reason", nullptr}})));
}

std::string ResponseBuilder::echoed_prompt() const {
  if (!request_.prompt_is_ids) return request_.prompt_text;
  if (tokenizer_ == nullptr) return {};
  return tokenizer_->decode(request_.prompt_ids, /*skip_special_tokens=*/false);
}

std::string ResponseBuilder::sse_event(const StreamEvent& e) {
  if (e.error) return sse_data(e.error->to_json());
  if (tool_format_ != ToolCallFormat::kNone) return sse_tool_event(e);
  std::string out;
  const bool chat = request_.endpoint == Endpoint::kChat;
  if (request_.echo && !chat && !echoed_) {
    // The prompt (and its log-probabilities) in a chunk of its own before the first token's.
    echoed_ = true;
    const std::string prompt = echoed_prompt();
    Json choice = {{"index", 0}, {"text", prompt}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
    if (request_.logprobs) choice["logprobs"] = logprobs_of(e.prompt_steps, 0);
    streamed_bytes_ += static_cast<int64_t>(prompt.size());
    out += sse_data(dump(chunk(std::move(choice))));
  }
  // A chunk for every event that carries generated tokens, even when their text is not final yet
  // (vLLM does the same): a client sees each token arrive. Text that becomes final only when the
  // sequence ends (what the decoder or the stop matcher held) comes with finish_reason.
  const bool closing_text = e.finished && e.steps.empty();
  if (!e.steps.empty() || (!e.text.empty() && !closing_text)) {
    Json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
    if (chat) {
      choice["delta"] = {{"content", e.text}};
    } else {
      choice["text"] = e.text;
    }
    if (request_.logprobs) choice["logprobs"] = logprobs_of(e.steps, streamed_bytes_);
    for (const GenerationStep& s : e.steps)
      streamed_bytes_ += static_cast<int64_t>(token_text(s.chosen.token).size());
    out += sse_data(dump(chunk(std::move(choice))));
  }
  if (e.finished) {
    prompt_tokens_ = e.prompt_tokens;
    completion_tokens_ = e.completion_tokens;
    Json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", e.finish_reason}};
    const std::string rest = closing_text ? e.text : std::string();
    if (chat) {
      choice["delta"] = rest.empty() ? Json::object() : Json{{"content", rest}};
    } else {
      choice["text"] = rest;
    }
    out += sse_data(dump(chunk(std::move(choice))));
    if (request_.include_usage) out += sse_usage_event();
  }
  return out;
}

std::string ResponseBuilder::sse_close() const {
  return "data: [DONE]\n\n";
}

void ResponseBuilder::add(const StreamEvent& e) {
  if (request_.echo && request_.endpoint == Endpoint::kCompletion && !echoed_) {
    echoed_ = true;
    text_ = echoed_prompt();
    steps_ = e.prompt_steps;
  }
  text_ += e.text;
  keep_raw_ids(e);
  steps_.insert(steps_.end(), e.steps.begin(), e.steps.end());
  if (e.finished) {
    finish_reason_ = e.finish_reason;
    prompt_tokens_ = e.prompt_tokens;
    completion_tokens_ = e.completion_tokens;
  }
}

std::string ResponseBuilder::body() const {
  const bool chat = request_.endpoint == Endpoint::kChat;
  Json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish_reason_}};
  if (chat) {
    choice["message"] = {{"role", "assistant"}, {"content", text_}};
    if (tool_format_ != ToolCallFormat::kNone) {
      ToolCallParse parsed = parse_tool_calls(raw_generated_text(), tool_format_);
      if (!parsed.calls.empty()) {
        choice["message"]["content"] = parsed.content.empty() ? Json(nullptr) : Json(parsed.content);
        choice["message"]["tool_calls"] = tool_calls_json(parsed.calls, /*streamed=*/false);
        choice["finish_reason"] = "tool_calls";
      }
    }
  } else {
    choice["text"] = text_;
  }
  if (request_.logprobs) choice["logprobs"] = logprobs_of(steps_, 0);
  Json j = {{"id", id_},
            {"object", chat ? "chat.completion" : "text_completion"},
            {"created", created_},
            {"model", model_},
            {"choices", Json::array({choice})},
            {"usage",
             {{"prompt_tokens", prompt_tokens_},
              {"completion_tokens", completion_tokens_},
              {"total_tokens", prompt_tokens_ + completion_tokens_}}}};
  return dump(j);
}

}  // namespace day0::serve
