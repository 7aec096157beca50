// libFuzzer target: OpenAI request bodies as the server receives them (POST /v1/chat/completions and
// /v1/completions), through the bounded JSON reader and the typed request parser, and the stop-string
// matcher over pieces of the same bytes.
#include <cstdint>
#include <string_view>

#include "day0/serve/api_request.h"
#include "day0/serve/stop_matcher.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (auto endpoint : {day0::serve::Endpoint::kChat, day0::serve::Endpoint::kCompletion}) {
    auto parsed = day0::serve::parse_api_request(text, endpoint);
    if (auto* request = std::get_if<day0::serve::ApiRequest>(&parsed)) {
      day0::serve::StopMatcher matcher(request->stop);
      std::string out;
      // Feed the body back in pieces of varying size: matches across piece boundaries.
      for (size_t at = 0, step = 1; at < text.size(); at += step, step = step % 7 + 1)
        out += matcher.push(text.substr(at, step));
      out += matcher.finish();
      if (out.size() > text.size()) __builtin_trap();  // never emits more than it was given
    } else {
      (void)std::get<day0::serve::ApiError>(parsed).to_json();
    }
  }
  return 0;
}
