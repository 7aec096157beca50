#include "day0/serve/api_request.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "day0/core/json_reader.h"

namespace day0::serve {
namespace {

using OrderedJson = nlohmann::ordered_json;

const char* type_name(const OrderedJson& v) {
  switch (v.type()) {
    case OrderedJson::value_t::null:
      return "null";
    case OrderedJson::value_t::boolean:
      return "a boolean";
    case OrderedJson::value_t::string:
      return "a string";
    case OrderedJson::value_t::array:
      return "an array";
    case OrderedJson::value_t::object:
      return "an object";
    default:
      return "a number";
  }
}

ApiError wrong_type(const std::string& key, const char* expected, const OrderedJson& found) {
  return bad_request(
      fmt::format("'{}' must be {}, found {} ({})", key, expected, type_name(found), json_excerpt(found, 40)),
      key, "invalid_type");
}

// The parsers below return an error or fill `out`; an absent key or null leaves `out` as it is.
using Maybe = std::optional<ApiError>;

Maybe read_bool(const OrderedJson& body, const std::string& key, bool& out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return wrong_type(key, "a boolean", *it);
  out = it->get<bool>();
  return std::nullopt;
}

Maybe read_float(const OrderedJson& body, const std::string& key, double lo, double hi, float& out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return wrong_type(key, "a number", *it);
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) {
    return bad_request(fmt::format("'{}' must be in [{}, {}], found {}", key, lo, hi, json_excerpt(*it, 40)),
                       key, "invalid_value");
  }
  out = static_cast<float>(v);
  return std::nullopt;
}

Maybe read_int(const OrderedJson& body, const std::string& key, int64_t lo, int64_t hi,
               std::optional<int64_t>& out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer()) return wrong_type(key, "an integer", *it);
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(hi)) {
    return bad_request(fmt::format("'{}' must be in [{}, {}], found {}", key, lo, hi, json_excerpt(*it, 40)),
                       key, "invalid_value");
  }
  const auto v = it->get<int64_t>();
  if (v < lo || v > hi) {
    return bad_request(fmt::format("'{}' must be in [{}, {}], found {}", key, lo, hi, v), key,
                       "invalid_value");
  }
  out = v;
  return std::nullopt;
}

// A message's content: a string, or an array of parts of which the text parts are joined (what the
// chat templates of open models read).
Maybe flatten_content(OrderedJson& message, size_t index) {
  const std::string key = fmt::format("messages[{}].content", index);
  auto it = message.find("content");
  if (it == message.end() || it->is_null() || it->is_string()) return std::nullopt;
  if (!it->is_array()) return wrong_type(key, "a string or an array of content parts", *it);
  std::string text;
  for (size_t p = 0; p < it->size(); ++p) {
    const OrderedJson& part = (*it)[p];
    const std::string part_key = fmt::format("{}[{}]", key, p);
    if (!part.is_object()) return wrong_type(part_key, "an object", part);
    auto type = part.find("type");
    if (type == part.end() || !type->is_string()) return wrong_type(part_key + ".type", "a string", part);
    if (*type != "text") {
      return bad_request(fmt::format("{}: content parts of type {} are not supported (text only)", part_key,
                                     json_excerpt(*type, 40)),
                         part_key + ".type", "unsupported_content");
    }
    auto t = part.find("text");
    if (t == part.end() || !t->is_string()) return wrong_type(part_key + ".text", "a string", part);
    text += t->get<std::string>();
  }
  *it = text;
  return std::nullopt;
}

// An assistant turn's tool calls carry their arguments as JSON text on the wire; chat templates read
// them as an object (`arguments | tojson`, `arguments.items()`), as vLLM and llama-server hand them
// over. Text that is not a JSON object stays text.
void arguments_as_objects(OrderedJson& message) {
  auto calls = message.find("tool_calls");
  if (calls == message.end() || !calls->is_array()) return;
  for (OrderedJson& call : *calls) {
    if (!call.is_object()) continue;
    auto fn = call.find("function");
    if (fn == call.end() || !fn->is_object()) continue;
    auto args = fn->find("arguments");
    if (args == fn->end() || !args->is_string()) continue;
    auto parsed = parse_ordered_json_text(args->get<std::string>(), "arguments",
                                          JsonLimits{kMaxRequestBytes, kMaxRequestDepth});
    if (parsed.is_ok() && parsed->is_object()) *args = std::move(*parsed);
  }
}

Maybe read_messages(OrderedJson& body, ApiRequest& out) {
  auto it = body.find("messages");
  if (it == body.end())
    return bad_request("'messages' is required", "messages", "missing_required_parameter");
  if (!it->is_array()) return wrong_type("messages", "an array of messages", *it);
  if (it->empty()) return bad_request("'messages' must hold at least one message", "messages", "empty_array");
  for (size_t i = 0; i < it->size(); ++i) {
    OrderedJson& m = (*it)[i];
    const std::string key = fmt::format("messages[{}]", i);
    if (!m.is_object()) return wrong_type(key, "an object", m);
    auto role = m.find("role");
    if (role == m.end())
      return bad_request(key + ".role is required", key + ".role", "missing_required_parameter");
    if (!role->is_string()) return wrong_type(key + ".role", "a string", *role);
    if (auto e = flatten_content(m, i)) return e;
    arguments_as_objects(m);
  }
  out.messages = std::move(*it);
  return std::nullopt;
}

Maybe read_prompt(const OrderedJson& body, ApiRequest& out) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null())
    return bad_request("'prompt' is required", "prompt", "missing_required_parameter");
  const OrderedJson* p = &*it;
  // One prompt in a list (what clients send for a single prompt) is that prompt.
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  if (p->is_string()) {
    out.prompt_text = p->get<std::string>();
    if (out.prompt_text.empty()) return bad_request("'prompt' must not be empty", "prompt", "empty_prompt");
    return std::nullopt;
  }
  if (!p->is_array()) return wrong_type("prompt", "a string or an array of token ids", *p);
  if (p->empty()) return bad_request("'prompt' must not be empty", "prompt", "empty_prompt");
  for (size_t i = 0; i < p->size(); ++i) {
    const OrderedJson& id = (*p)[i];
    if (id.is_string() || id.is_array())
      return bad_request("one prompt per request (n = 1, no prompt batches)", "prompt", "unsupported_value");
    if (!id.is_number_integer()) return wrong_type(fmt::format("prompt[{}]", i), "a token id (integer)", id);
    const bool negative = !id.is_number_unsigned() && id.get<int64_t>() < 0;
    if (negative || id.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
      return bad_request(fmt::format("prompt[{}]: token id {} is out of range", i, json_excerpt(id, 40)),
                         "prompt", "invalid_value");
    }
    const auto v = id.get<int64_t>();
    out.prompt_ids.push_back(static_cast<int32_t>(v));
  }
  out.prompt_is_ids = true;
  return std::nullopt;
}

Maybe read_stop(const OrderedJson& body, ApiRequest& out) {
  auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return std::nullopt;
  auto add = [&](const OrderedJson& s, const std::string& key) -> Maybe {
    if (!s.is_string()) return wrong_type(key, "a string", s);
    std::string text = s.get<std::string>();
    if (text.empty()) return bad_request(key + " must not be empty", "stop", "invalid_value");
    if (text.size() > kMaxStopStringBytes)
      return bad_request(fmt::format("{} is longer than {} bytes", key, kMaxStopStringBytes), "stop",
                         "invalid_value");
    out.stop.push_back(std::move(text));
    return std::nullopt;
  };
  if (it->is_string()) return add(*it, "stop");
  if (!it->is_array()) return wrong_type("stop", "a string or an array of strings", *it);
  if (it->size() > kMaxStopStrings)
    return bad_request(fmt::format("'stop' holds at most {} strings, found {}", kMaxStopStrings, it->size()),
                       "stop", "invalid_value");
  for (size_t i = 0; i < it->size(); ++i) {
    if (auto e = add((*it)[i], fmt::format("stop[{}]", i))) return e;
  }
  return std::nullopt;
}

Maybe read_request(OrderedJson& body, Endpoint endpoint, ApiRequest& out) {
  out.endpoint = endpoint;
  auto model = body.find("model");
  if (model == body.end()) return bad_request("'model' is required", "model", "missing_required_parameter");
  if (!model->is_string()) return wrong_type("model", "a string", *model);
  out.model = model->get<std::string>();
  if (endpoint == Endpoint::kChat) {
    if (auto e = read_messages(body, out)) return e;
    auto tools = body.find("tools");
    if (tools != body.end() && !tools->is_null()) {
      if (!tools->is_array()) return wrong_type("tools", "an array of tools", *tools);
      for (size_t i = 0; i < tools->size(); ++i) {
        if (!(*tools)[i].is_object())
          return wrong_type(fmt::format("tools[{}]", i), "an object", (*tools)[i]);
      }
      if (!tools->empty()) out.tools = std::move(*tools);
    }
    // "auto" / "required" / {"type": "function", ...} all let calls through; only "none" stops parsing.
    auto choice = body.find("tool_choice");
    if (choice != body.end() && !choice->is_null()) {
      if (choice->is_string()) {
        const auto& c = choice->get_ref<const std::string&>();
        if (c != "none" && c != "auto" && c != "required")
          return bad_request("'tool_choice' must be \"none\", \"auto\", \"required\" or an object, found " +
                                 json_excerpt(*choice, 40),
                             "tool_choice", "invalid_value");
        out.tool_choice_none = c == "none";
      } else if (!choice->is_object()) {
        return wrong_type("tool_choice", "a string or an object", *choice);
      }
    }
  } else {
    if (auto e = read_prompt(body, out)) return e;
  }
  constexpr int64_t kMaxTokens = int64_t{1} << 24;
  std::optional<int64_t> max_tokens, max_completion_tokens, n, top_k, seed, top_logprobs, best_of;
  if (auto e = read_int(body, "max_tokens", 1, kMaxTokens, max_tokens)) return e;
  if (auto e = read_int(body, "max_completion_tokens", 1, kMaxTokens, max_completion_tokens)) return e;
  out.max_tokens = max_completion_tokens ? max_completion_tokens : max_tokens;
  if (auto e = read_int(body, "n", 1, 128, n)) return e;
  if (n && *n != 1) return bad_request("only n = 1 is supported", "n", "unsupported_value");
  if (auto e = read_int(body, "best_of", 1, 128, best_of)) return e;
  if (best_of && *best_of != 1)
    return bad_request("only best_of = 1 is supported", "best_of", "unsupported_value");
  if (auto e = read_float(body, "temperature", 0.0, 2.0, out.temperature)) return e;
  if (auto e = read_float(body, "top_p", 0.0, 1.0, out.top_p)) return e;
  if (out.top_p <= 0.0f) return bad_request("'top_p' must be in (0, 1]", "top_p", "invalid_value");
  if (auto e = read_int(body, "top_k", -1, int64_t{1} << 24, top_k)) return e;
  out.top_k = top_k && *top_k > 0 ? *top_k : 0;
  if (auto e = read_int(body, "seed", std::numeric_limits<int64_t>::min(),
                        std::numeric_limits<int64_t>::max(), seed))
    return e;
  if (seed) out.seed = static_cast<uint64_t>(*seed);
  if (auto e = read_float(body, "presence_penalty", -2.0, 2.0, out.presence_penalty)) return e;
  if (auto e = read_float(body, "frequency_penalty", -2.0, 2.0, out.frequency_penalty)) return e;
  if (auto e = read_bool(body, "stream", out.stream)) return e;
  if (auto e = read_bool(body, "ignore_eos", out.ignore_eos)) return e;
  if (auto e = read_stop(body, out)) return e;
  auto options = body.find("stream_options");
  if (options != body.end() && !options->is_null()) {
    if (!options->is_object()) return wrong_type("stream_options", "an object", *options);
    if (auto e = read_bool(*options, "include_usage", out.include_usage)) {
      e->param = "stream_options.include_usage";
      return e;
    }
  }
  if (endpoint == Endpoint::kChat) {
    if (auto e = read_bool(body, "logprobs", out.logprobs)) return e;
    if (auto e = read_int(body, "top_logprobs", 0, kMaxTopLogprobs, top_logprobs)) return e;
    out.top_logprobs = top_logprobs.value_or(0);
    if (out.top_logprobs > 0 && !out.logprobs)
      return bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs", "invalid_value");
  } else {
    // Completions: logprobs is the number of alternatives (0 = the chosen token only).
    std::optional<int64_t> alternatives;
    auto lp = body.find("logprobs");
    if (lp != body.end() && lp->is_boolean()) return wrong_type("logprobs", "an integer", *lp);
    if (auto e = read_int(body, "logprobs", 0, kMaxTopLogprobs, alternatives)) return e;
    out.logprobs = alternatives.has_value();
    out.top_logprobs = alternatives.value_or(0);
    if (auto e = read_bool(body, "echo", out.echo)) return e;
    auto suffix = body.find("suffix");
    if (suffix != body.end() && !suffix->is_null())
      return bad_request("'suffix' is not supported", "suffix", "unsupported_value");
  }
  return std::nullopt;
}

}  // namespace

std::string ApiError::to_json() const {
  nlohmann::json j;
  j["error"] = {{"message", message},
                {"type", type},
                {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
                {"code", code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code)}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

ApiError bad_request(std::string message, std::string param, std::string code) {
  ApiError e;
  e.status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

std::variant<ApiRequest, ApiError> parse_api_request(std::string_view body, Endpoint endpoint) {
  if (body.size() > kMaxRequestBytes) {
    ApiError e = bad_request(fmt::format("the request body has {} bytes, more than the limit of {}",
                                         body.size(), kMaxRequestBytes),
                             "", "request_too_large");
    e.status = 413;
    return e;
  }
  auto parsed = parse_ordered_json_text(body, "request body", JsonLimits{kMaxRequestBytes, kMaxRequestDepth});
  if (!parsed.is_ok()) return bad_request(parsed.status().message(), "", "invalid_json");
  OrderedJson doc = std::move(parsed).value();
  if (!doc.is_object()) return bad_request("the request body must be a JSON object", "", "invalid_json");
  ApiRequest out;
  if (auto e = read_request(doc, endpoint, out)) return *e;
  return out;
}

}  // namespace day0::serve
