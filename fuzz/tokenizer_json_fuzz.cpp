// libFuzzer target: tokenizer.json text -> tokenizer pipeline; when it loads, encode and decode a
// fixed text with it (the parsed regexes, normalizers and decoders run too).
#include <cstdint>
#include <string_view>

#include "day0/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parts = day0::tokenizer::parse_tokenizer_json(text, "fuzz/tokenizer.json");
  if (!parts.is_ok()) return 0;
  day0::tokenizer::Tokenizer tok(std::move(*parts));
  const auto ids = tok.encode("Hello, world! 123 \xE4\xBD\xA0\xE5\xA5\xBD <s>");
  (void)tok.decode(ids);
  return 0;
}
