// libFuzzer target: config.json text -> ModelSpec (the bounded JSON path, every family's config
// parser and the spec validation). Bad input must come back as a Status; nothing may crash or hang.
#include <cstdint>
#include <string_view>

#include "day0/model/config_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto spec = day0::parse_model_config_text(text, "fuzz/config.json");
  if (!spec.is_ok() && spec.status().message().empty()) __builtin_trap();  // every error says why
  return 0;
}
