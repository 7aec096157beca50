// libFuzzer target: chat-message JSON (what `run --chat` and `tokenize --chat` read, and later the
// server's request bodies) through the bounded JSON path and a real chat template.
#include <cstdint>
#include <string_view>

#include "day0/core/json_reader.h"
#include "day0/tokenizer/chat_template.h"

namespace {
// A template in the style of the common releases: roles, tool calls, tools, a generation prompt.
constexpr std::string_view kTemplate = R"({{ bos_token }}{% if tools %}{{ tools|tojson }}{% endif %}
{%- for m in messages -%}
{%- if m.role == 'system' -%}<<SYS>>{{ m.content }}<</SYS>>
{%- elif m.role == 'user' -%}[INST]{{ m.content if m.content is string else m.content|tojson }}[/INST]
{%- elif m.role == 'assistant' -%}{{ m.content }}{% for t in m.tool_calls|default([]) %}{{ t.function.name }}({{ t.function.arguments|tojson }}){% endfor %}{{ eos_token }}
{%- else -%}{{ m|tojson(indent=2) }}{%- endif -%}
{%- endfor -%}{% if add_generation_prompt %}[ASSISTANT]{% endif %})";
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto doc = day0::parse_ordered_json_text(text, "fuzz/chat.json", day0::kChatJsonLimits);
  if (!doc.is_ok()) return 0;
  day0::tokenizer::ChatRequest req;
  if (doc->is_array()) {
    req.messages = std::move(*doc);
  } else if (doc->is_object() && doc->contains("messages")) {
    req.messages = (*doc)["messages"];
    if (doc->contains("tools")) req.tools = (*doc)["tools"];
  } else {
    return 0;
  }
  req.now = 0;
  auto out = day0::tokenizer::render_chat_template(kTemplate, req,
                                                   {{"bos_token", "<s>"}, {"eos_token", "</s>"}}, "fuzz");
  (void)out;
  return 0;
}
