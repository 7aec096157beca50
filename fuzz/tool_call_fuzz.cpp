// libFuzzer target: generated text through the tool-call parser of every format (serve/tool_call_parser),
// which reads what a model wrote. Besides no crash, leak or undefined behaviour, it checks the parser's
// promises: a text without calls comes back whole as content, every call's arguments are a JSON object,
// and the streaming hold point lies inside the text.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <nlohmann/json.hpp>

#include "day0/serve/tool_call_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using day0::serve::ToolCallFormat;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (ToolCallFormat format : {ToolCallFormat::kNone, ToolCallFormat::kHermes, ToolCallFormat::kMistral,
                                ToolCallFormat::kLlama3Json}) {
    const auto parsed = day0::serve::parse_tool_calls(text, format);
    if (parsed.calls.empty() && parsed.content != text) std::abort();
    if (parsed.calls.size() > day0::serve::kMaxToolCalls) std::abort();
    for (const auto& call : parsed.calls) {
      if (call.name.empty()) std::abort();
      const auto args = nlohmann::json::parse(call.arguments, nullptr, /*allow_exceptions=*/false);
      if (!args.is_object()) std::abort();
    }
    if (day0::serve::tool_call_hold_start(text, format) > text.size()) std::abort();
    (void)day0::serve::is_tool_call_marker(text, format);
  }
  (void)day0::serve::detect_tool_call_format(text);
  return 0;
}
