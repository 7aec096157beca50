// libFuzzer target: what a server under `day0 audit` answers. The same bytes are read as a whole
// reply (chat.completion / text_completion), as a server-sent-event stream, as a /tokenize answer and
// as an error object; whatever the bytes, each reading ends in a value or an error, and every count
// it hands back is within the parser's bounds.
#include <cstdint>
#include <string_view>

#include "day0/audit/target_reply.h"

namespace {

void check(const day0::Result<day0::audit::Reply>& reply) {
  if (!reply.is_ok()) {
    if (reply.status().message().empty()) __builtin_trap();
    return;
  }
  if (reply->choices.size() > day0::audit::kMaxChoices) __builtin_trap();
  for (const auto& c : reply->choices) {
    if (c.steps.size() > day0::audit::kMaxReplyTokens) __builtin_trap();
    for (const auto& s : c.steps)
      if (s.top.size() > day0::audit::kMaxTopLogprobs) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  check(day0::audit::parse_reply(bytes));
  check(day0::audit::parse_stream(bytes));
  auto ids = day0::audit::parse_tokenize_reply(bytes);
  if (ids.is_ok())
    for (int32_t id : *ids)
      if (id < 0) __builtin_trap();
  if (day0::audit::error_message(bytes).size() > 400) __builtin_trap();
  return 0;
}
