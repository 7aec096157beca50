// libFuzzer target: a Jinja chat template together with a message list. The input is split at the
// first NUL byte: template source before it, the messages JSON after it (a list, or an object with
// "messages" and "tools"), read through the bounded JSON path like `--chat` files.
#include <cstdint>
#include <string_view>

#include "day0/core/json_reader.h"
#include "day0/tokenizer/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view source = input.substr(0, nul);
  const std::string_view messages = nul == std::string_view::npos ? "[]" : input.substr(nul + 1);
  auto doc = day0::parse_ordered_json_text(messages, "fuzz/messages.json", day0::kChatJsonLimits);
  day0::tokenizer::ChatRequest req;
  if (doc.is_ok() && doc->is_array()) {
    req.messages = std::move(*doc);
  } else if (doc.is_ok() && doc->is_object()) {
    if (doc->contains("messages")) req.messages = (*doc)["messages"];
    if (doc->contains("tools")) req.tools = (*doc)["tools"];
  }
  req.now = 0;
  auto out = day0::tokenizer::render_chat_template(source, req, {{"bos_token", "<s>"}, {"eos_token", "</s>"}},
                                                   "fuzz");
  (void)out;
  return 0;
}
