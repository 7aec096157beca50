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
      created_(created) {}

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
    if (request_.include_usage) {
      Json usage = chunk(Json());
      usage["choices"] = Json::array();
      usage["usage"] = {{"prompt_tokens", prompt_tokens_},
                        {"completion_tokens", completion_tokens_},
                        {"total_tokens", prompt_tokens_ + completion_tokens_}};
      out += sse_data(dump(usage));
    }
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
