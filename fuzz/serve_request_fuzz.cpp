// libFuzzer target: what a client sends `day0 serve`. The bytes are read twice: as raw HTTP/1.1 (the
// request parser, fed whole and in pieces of every size from 1 to 7 bytes, which must agree), and as
// an OpenAI request body (the bounded JSON reader and the typed request parser, and the stop-string
// matcher over pieces of the same bytes); each body the HTTP parser finds goes through the second
// reading too.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "day0/serve/api_request.h"
#include "day0/serve/http_message.h"
#include "day0/serve/stop_matcher.h"

namespace {

struct Parsed {
  std::vector<std::string> requests;  // method, path and body of each, joined
  int error = 0;
  bool operator==(const Parsed&) const = default;
};

Parsed parse_http(std::string_view bytes, size_t piece) {
  day0::serve::HttpLimits limits;
  limits.max_head_bytes = 4096;  // small limits: the fuzzer reaches them
  limits.max_fields = 16;
  limits.max_body_bytes = 2048;
  day0::serve::HttpRequestParser parser(limits);
  Parsed out;
  std::string buffer;
  size_t fed = 0;
  while (true) {
    const auto state = parser.parse(buffer);
    if (state == day0::serve::HttpRequestParser::State::kHeadReady) continue;
    if (state == day0::serve::HttpRequestParser::State::kError) {
      out.error = parser.error().status;
      if (out.error < 400 || out.error > 599 || parser.error().message.empty()) __builtin_trap();
      return out;
    }
    if (state == day0::serve::HttpRequestParser::State::kComplete) {
      const auto& r = parser.request();
      if (parser.consumed() > buffer.size() || r.body.size() > limits.max_body_bytes) __builtin_trap();
      out.requests.push_back(r.method + ' ' + r.path + ' ' + r.body);
      buffer.erase(0, parser.consumed());
      parser.reset();
      continue;
    }
    if (fed == bytes.size()) return out;
    const size_t n = std::min(piece, bytes.size() - fed);
    buffer.append(bytes.substr(fed, n));
    fed += n;
  }
}

void parse_body(std::string_view text) {
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
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const Parsed whole = parse_http(text, text.size() + 1);
  for (size_t piece = 1; piece <= 7; ++piece)
    if (!(parse_http(text, piece) == whole)) __builtin_trap();  // the pieces change nothing
  for (const std::string& r : whole.requests)
    parse_body(std::string_view(r).substr(r.find(' ', r.find(' ') + 1) + 1));
  parse_body(text);
  return 0;
}
