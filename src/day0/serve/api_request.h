#pragma once
// OpenAI request bodies (POST /v1/chat/completions, /v1/completions) parsed into one typed request,
// and the OpenAI error object. Bodies come from the network: the bytes go through the bounded JSON
// reader (size and nesting caps, one non-recursive pass) before nlohmann builds anything, every field
// is type-checked, and every number is range-checked before use. Nothing here touches the engine.
// Thread safety: pure functions.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace day0::serve {

// {"error": {"message", "type", "param", "code"}} with its HTTP status.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field ("" -> null)
  std::string code;   // "" -> null
  std::string to_json() const;
};
ApiError bad_request(std::string message, std::string param = {}, std::string code = {});

enum class Endpoint { kChat, kCompletion };

struct ApiRequest {
  Endpoint endpoint = Endpoint::kChat;
  std::string model;
  // Chat: the messages as the template reads them (content parts joined into one string).
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  // Chat: the `tools` array the template renders (null: none). With tools, the calls the model writes
  // are parsed into tool_calls (tool_call_parser.h) unless tool_choice is "none".
  nlohmann::ordered_json tools;
  bool tool_choice_none = false;
  // Completions: the prompt as text, or as token ids (an array of integers).
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;
  bool prompt_is_ids = false;

  std::optional<int64_t> max_tokens;  // max_tokens / max_completion_tokens; unset: until the context
  float temperature = 1.0f;           // OpenAI's default; 0 = greedy
  float top_p = 1.0f;
  int64_t top_k = 0;  // 0 or -1: no cut
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;  // at most kMaxStopStrings, each non-empty
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool logprobs = false;
  int64_t top_logprobs = 0;
  // Completions: the prompt comes back before the completion; with logprobs, its tokens too, each
  // with its log-probability after the ones before it (the first null), OpenAI's legacy form.
  bool echo = false;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  bool ignore_eos = false;
};

inline constexpr size_t kMaxRequestBytes = size_t{8} << 20;  // a body above this is 413
inline constexpr int kMaxRequestDepth = 32;
inline constexpr size_t kMaxStopStrings = 16;
inline constexpr size_t kMaxStopStringBytes = 256;
inline constexpr int64_t kMaxTopLogprobs = 20;

// Parses and validates a body. ApiError (400) for malformed JSON, a wrong type, a value out of range,
// empty messages, n != 1, and what this server does not do (best_of > 1, suffix).
std::variant<ApiRequest, ApiError> parse_api_request(std::string_view body, Endpoint endpoint);

}  // namespace day0::serve
