#include "day0/serve/tool_call_parser.h"

#include <algorithm>
#include <optional>

#include <nlohmann/json.hpp>

#include "day0/core/json_reader.h"

namespace day0::serve {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kMistralMarker = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr JsonLimits kToolCallJsonLimits{kMaxToolCallTextBytes, kMaxToolCallDepth};

bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

std::string_view trim_left(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  return s;
}

std::string_view trim(std::string_view s) {
  s = trim_left(s);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// One past the end of the JSON object or array opening at text[0]; npos when it does not close. A
// depth counter instead of recursion; mismatched brackets are left for the JSON reader to refuse.
size_t json_value_end(std::string_view text) {
  int64_t depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && --depth == 0) {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

std::optional<Json> parse_bounded(std::string_view text) {
  auto parsed = parse_json_text(text, "tool call", kToolCallJsonLimits);
  if (!parsed.is_ok()) return std::nullopt;
  return std::move(parsed).value();
}

std::string compact(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// A function name as the templates write it: no spaces, quotes or brackets (it is not JSON in the
// [ARGS] form, so this is what tells a name from stray text).
bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > 256) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u >= 0x80 || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-' || c == '.' || c == ':';
  });
}

// Arguments are an object, or (as some models write them) a string holding one.
std::optional<std::string> arguments_text(const Json& args) {
  if (args.is_object()) return compact(args);
  if (!args.is_string()) return std::nullopt;
  auto inner = parse_bounded(args.get_ref<const std::string&>());
  if (!inner || !inner->is_object()) return std::nullopt;
  return compact(*inner);
}

bool add_call(std::string name, const Json& args, std::vector<ParsedToolCall>& calls) {
  if (!valid_name(name) || calls.size() >= kMaxToolCalls) return false;
  auto text = arguments_text(args);
  if (!text) return false;
  calls.push_back({std::move(name), std::move(*text)});
  return true;
}

// {"name": ..., "arguments" | "parameters": {...}}
bool add_call_object(const Json& call, std::vector<ParsedToolCall>& calls) {
  if (!call.is_object()) return false;
  auto name = call.find("name");
  if (name == call.end() || !name->is_string()) return false;
  auto args = call.find("arguments");
  if (args == call.end()) args = call.find("parameters");
  if (args == call.end()) return false;
  return add_call(name->get<std::string>(), *args, calls);
}

// Reads the JSON object or array at the start of `rest` (after spaces) and moves `rest` past it.
std::optional<Json> take_json(std::string_view& rest) {
  rest = trim_left(rest);
  if (rest.empty() || (rest.front() != '{' && rest.front() != '[')) return std::nullopt;
  const size_t end = json_value_end(rest);
  if (end == std::string_view::npos) return std::nullopt;
  auto value = parse_bounded(rest.substr(0, end));
  rest.remove_prefix(end);
  return value;
}

bool parse_hermes(std::string_view text, ToolCallParse& out) {
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t open = text.find(kHermesOpen, pos);
    if (open == std::string_view::npos) break;
    out.content.append(text.substr(pos, open - pos));
    const size_t body = open + kHermesOpen.size();
    // The last call may lack its closing tag: generation stopped at the end-of-turn token instead.
    const size_t close = text.find(kHermesClose, body);
    const size_t body_end = close == std::string_view::npos ? text.size() : close;
    auto call = parse_bounded(trim(text.substr(body, body_end - body)));
    if (!call || !add_call_object(*call, out.calls)) return false;
    pos = close == std::string_view::npos ? text.size() : close + kHermesClose.size();
  }
  if (pos < text.size()) out.content.append(text.substr(pos));
  return !out.calls.empty();
}

bool parse_mistral(std::string_view text, ToolCallParse& out) {
  const size_t marker = text.find(kMistralMarker);
  if (marker == std::string_view::npos) return false;
  out.content.append(text.substr(0, marker));
  std::string_view rest = text.substr(marker + kMistralMarker.size());
  while (true) {
    rest = trim_left(rest);
    if (!rest.empty() && rest.front() == '[') {  // [TOOL_CALLS][{...}, {...}]
      auto list = take_json(rest);
      if (!list || !list->is_array() || list->empty()) return false;
      for (const Json& call : *list) {
        if (!add_call_object(call, out.calls)) return false;
      }
    } else {  // [TOOL_CALLS]name[ARGS]{...}
      const size_t args = rest.find(kMistralArgs);
      if (args == std::string_view::npos) return false;
      const std::string_view name = trim(rest.substr(0, args));
      rest.remove_prefix(args + kMistralArgs.size());
      auto arguments = take_json(rest);
      if (!arguments || !arguments->is_object()) return false;
      if (!add_call(std::string(name), *arguments, out.calls)) return false;
    }
    rest = trim_left(rest);
    if (rest.substr(0, kMistralMarker.size()) != kMistralMarker) break;
    rest.remove_prefix(kMistralMarker.size());
  }
  out.content.append(rest);
  return !out.calls.empty();
}

bool parse_llama3(std::string_view text, ToolCallParse& out) {
  std::string_view rest = text;
  const size_t tag = text.find(kPythonTag);
  if (tag != std::string_view::npos) {
    out.content.append(text.substr(0, tag));
    rest = text.substr(tag + kPythonTag.size());
  }
  // Without the tag, a call is the whole reply: text that merely contains an object is an answer.
  while (true) {
    auto call = take_json(rest);
    if (!call || !add_call_object(*call, out.calls)) return false;
    rest = trim_left(rest);
    if (rest.empty()) break;
    if (rest.front() != ';') return false;
    rest.remove_prefix(1);
    if (trim_left(rest).empty()) break;
  }
  return !out.calls.empty();
}

// Where `text` ends with the first bytes of `marker` (a marker cut by the stream); text.size() if not.
size_t cut_marker_start(std::string_view text, std::string_view marker) {
  for (size_t k = std::min(marker.size() - 1, text.size()); k > 0; --k) {
    if (text.substr(text.size() - k) == marker.substr(0, k)) return text.size() - k;
  }
  return text.size();
}

size_t marker_start(std::string_view text, std::string_view marker) {
  const size_t at = text.find(marker);
  return at != std::string_view::npos ? at : cut_marker_start(text, marker);
}

}  // namespace

ToolCallFormat detect_tool_call_format(std::string_view t) {
  auto has = [&](std::string_view s) { return t.find(s) != std::string_view::npos; };
  // GLM 4.5/4.6 write <tool_call>name<arg_key>..</arg_key><arg_value>..</arg_value></tool_call>:
  // the tag is Hermes', the inside is not JSON. Not parsed (docs/serving.md), rather than misread.
  if (has("<arg_key>")) return ToolCallFormat::kNone;
  if (has(kHermesOpen)) return ToolCallFormat::kHermes;
  if (has(kMistralMarker)) return ToolCallFormat::kMistral;
  // Llama 3.1+ tells the model to answer {"name": ..., "parameters": ...} in its header-based turns.
  if (has("<|start_header_id|>") && (has(kPythonTag) || has("\"parameters\"")))
    return ToolCallFormat::kLlama3Json;
  return ToolCallFormat::kNone;
}

std::string_view tool_call_format_name(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return "hermes";
    case ToolCallFormat::kMistral:
      return "mistral";
    case ToolCallFormat::kLlama3Json:
      return "llama3_json";
    case ToolCallFormat::kNone:
      break;
  }
  return "none";
}

ToolCallParse parse_tool_calls(std::string_view text, ToolCallFormat format) {
  ToolCallParse out;
  bool parsed = false;
  if (text.size() <= kMaxToolCallTextBytes) {
    switch (format) {
      case ToolCallFormat::kHermes:
        parsed = parse_hermes(text, out);
        break;
      case ToolCallFormat::kMistral:
        parsed = parse_mistral(text, out);
        break;
      case ToolCallFormat::kLlama3Json:
        parsed = parse_llama3(text, out);
        break;
      case ToolCallFormat::kNone:
        break;
    }
  }
  if (!parsed) {
    out.calls.clear();
    out.content.assign(text);
    return out;
  }
  out.content = std::string(trim(out.content));
  return out;
}

size_t tool_call_hold_start(std::string_view text, ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return marker_start(text, kHermesOpen);
    case ToolCallFormat::kMistral:
      return marker_start(text, kMistralMarker);
    case ToolCallFormat::kLlama3Json: {
      // A reply that opens with '{' (or has not shown anything but spaces yet) may be a call.
      const std::string_view shown = trim_left(text);
      if (shown.empty() || shown.front() == '{') return 0;
      return marker_start(text, kPythonTag);
    }
    case ToolCallFormat::kNone:
      break;
  }
  return text.size();
}

bool is_tool_call_marker(std::string_view token_text, ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return token_text == kHermesOpen;
    case ToolCallFormat::kMistral:
      return token_text == kMistralMarker;
    case ToolCallFormat::kLlama3Json:
      return token_text == kPythonTag;
    case ToolCallFormat::kNone:
      break;
  }
  return false;
}

}  // namespace day0::serve
