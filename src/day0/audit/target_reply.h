#pragma once
// Replies of an OpenAI-compatible server under audit, parsed into what the audit compares. The bytes
// come from another program on the network: they go through the bounded JSON reader first, every
// field is type-checked, every count is bounded (kMaxReplyTokens, kMaxTopLogprobs), and a reply that
// does not fit is an error naming the field, never a crash. Fuzzed by fuzz/target_reply_fuzz.cpp.
// Thread safety: pure functions.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "day0/core/status.h"

namespace day0::audit {

inline constexpr size_t kMaxReplyBytes = size_t{32} << 20;
inline constexpr size_t kMaxReplyTokens = 1 << 16;  // logprob entries per reply
inline constexpr size_t kMaxTopLogprobs = 64;       // alternatives per entry
inline constexpr size_t kMaxChoices = 16;

// One token as the server names it: its text, its bytes when given, its id when the server says it
// ("id" as llama-server writes, or vLLM's "token_id:N" text under return_tokens_as_token_ids).
struct ReplyToken {
  std::string text;
  std::optional<std::string> bytes;
  std::optional<int32_t> id;
  double logprob = 0;
};

struct ReplyStep {
  ReplyToken chosen;
  std::vector<ReplyToken> top;
};

struct ReplyToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // the JSON text as the server wrote it
};

struct ReplyChoice {
  std::string text;  // message.content (chat) or text (completions); streamed: the deltas joined
  std::string finish_reason;
  std::vector<ReplyStep> steps;  // logprobs, when asked for
  bool has_logprobs = false;
  std::vector<ReplyToolCall> tool_calls;
};

struct Reply {
  std::vector<ReplyChoice> choices;
  std::optional<int64_t> prompt_tokens, completion_tokens;  // usage
  // completions with echo: the prompt's tokens come first in the logprobs (text_offset says where
  // they end is not needed: the caller knows the prompt's length)
};

// A chat.completion or text_completion object.
Result<Reply> parse_reply(std::string_view body);

// A streamed reply: the `data:` payloads of an SSE body, joined per choice (deltas concatenated,
// logprobs appended, tool-call argument pieces joined). A payload that is an error object is an error.
Result<Reply> parse_stream(std::string_view sse_body);

// Token ids of a /tokenize answer: {"tokens": [int...]} (vLLM, SGLang, llama-server) — llama-server's
// with_pieces form ({"tokens": [{"id": N, "piece": ...}]}) too.
Result<std::vector<int32_t>> parse_tokenize_reply(std::string_view body);

// The message of an OpenAI error object ({"error": {"message"}} or {"error": "..."}); the excerpt of
// the body when it is not one.
std::string error_message(std::string_view body);

}  // namespace day0::audit
