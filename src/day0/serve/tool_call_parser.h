#pragma once
// The tool calls a model writes into its output, turned into OpenAI `tool_calls`. Which markup a model
// writes is read from its chat template (the one source of truth: the template renders past calls in
// the form the model was trained to emit), never guessed from the output:
//   kHermes      <tool_call>{"name": ..., "arguments": {...}}</tool_call>, one block per call
//                (Hermes, Qwen2.5, Qwen3, QwQ)
//   kMistral     [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...], or [TOOL_CALLS]name[ARGS]{...}
//                per call (the newer Mistral templates)
//   kLlama3Json  {"name": ..., "parameters": {...}} as the whole reply, after <|python_tag|> if any;
//                several calls separated by ';'
// Generated text is untrusted: sizes are capped, each call's JSON goes through the bounded JSON reader
// (depth cap, no recursion proportional to the input), and a call that does not parse leaves the
// whole text as content: a reply is either all calls (plus the text around them) or all content.
// Thread safety: pure functions.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace day0::serve {

enum class ToolCallFormat { kNone, kHermes, kMistral, kLlama3Json };

// kNone for a template without a marker this parser knows (or one it knowingly does not parse, such as
// GLM's <arg_key> calls, which share Hermes' <tool_call> tag).
ToolCallFormat detect_tool_call_format(std::string_view chat_template);
std::string_view tool_call_format_name(ToolCallFormat format);  // "hermes", "mistral", "llama3_json", "none"

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // a JSON object, compact, as OpenAI's function.arguments carries it
};

struct ToolCallParse {
  std::vector<ParsedToolCall> calls;  // empty: no call (content is the whole text)
  std::string content;                // the text outside the markup, trimmed of surrounding whitespace
};

inline constexpr size_t kMaxToolCallTextBytes = size_t{1} << 20;  // longer output is left as content
inline constexpr size_t kMaxToolCalls = 64;
inline constexpr int kMaxToolCallDepth = 32;  // nesting of one call's JSON

ToolCallParse parse_tool_calls(std::string_view text, ToolCallFormat format);

// Streaming: the first byte of `text` from which a call may be starting (a whole marker, or the start of
// a marker cut at the end of `text`); text.size() when none. Text before it can be sent as content.
size_t tool_call_hold_start(std::string_view text, ToolCallFormat format);
// True when one token's text is the format's opening marker (such markers may be special tokens that
// the decoded text leaves out).
bool is_tool_call_marker(std::string_view token_text, ToolCallFormat format);

}  // namespace day0::serve
