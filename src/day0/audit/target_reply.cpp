#include "day0/audit/target_reply.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <limits>

#include "day0/core/error.h"
#include "day0/core/json_reader.h"

namespace day0::audit {

namespace {

using Json = nlohmann::json;

const JsonLimits kReplyLimits{kMaxReplyBytes, 32};

Status bad_reply(const std::string& key, const std::string& expected, const Json& found) {
  return invalid_argument(
      fmt::format("reply: {} should be {}, found {}", key, expected, json_excerpt(found, 60)));
}

// An optional string field ("" when absent or null).
Result<std::string> opt_string(const Json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::string();
  if (!it->is_string()) return bad_reply(where + "." + key, "a string", *it);
  return it->get<std::string>();
}

std::optional<int32_t> id_from_text(const std::string& text) {
  constexpr std::string_view kPrefix = "token_id:";
  if (text.rfind(kPrefix, 0) != 0) return std::nullopt;
  int64_t v = -1;
  const char* b = text.data() + kPrefix.size();
  const char* e = text.data() + text.size();
  auto [p, ec] = std::from_chars(b, e, v);
  if (ec != std::errc() || p != e || v < 0 || v > std::numeric_limits<int32_t>::max()) return std::nullopt;
  return static_cast<int32_t>(v);
}

// {token, logprob, bytes?, id?}
Result<ReplyToken> read_token(const Json& j, const std::string& where) {
  if (!j.is_object()) return bad_reply(where, "an object", j);
  ReplyToken t;
  D0_ASSIGN_OR_RETURN(t.text, opt_string(j, "token", where));
  auto lp = j.find("logprob");
  if (lp == j.end() || !lp->is_number())
    return bad_reply(where + ".logprob", "a number", lp == j.end() ? Json() : *lp);
  t.logprob = lp->get<double>();
  auto bytes = j.find("bytes");
  if (bytes != j.end() && !bytes->is_null()) {
    if (!bytes->is_array() || bytes->size() > 1024)
      return bad_reply(where + ".bytes", "an array of bytes", *bytes);
    std::string b;
    for (const Json& x : *bytes) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > 255)
        return bad_reply(where + ".bytes", "integers in [0, 255]", x);
      b.push_back(static_cast<char>(x.get<int64_t>()));
    }
    t.bytes = std::move(b);
  }
  auto id = j.find("id");
  if (id != j.end() && !id->is_null()) {
    if (!id->is_number_integer() || id->get<int64_t>() < 0 ||
        id->get<int64_t>() > std::numeric_limits<int32_t>::max())
      return bad_reply(where + ".id", "a token id", *id);
    t.id = static_cast<int32_t>(id->get<int64_t>());
  }
  if (!t.id) t.id = id_from_text(t.text);
  return t;
}

// logprobs.content: [{token, logprob, bytes, top_logprobs: [...]}] (chat, and llama-server's completions).
Status read_content_logprobs(const Json& content, const std::string& where, std::vector<ReplyStep>& out) {
  if (!content.is_array()) return bad_reply(where, "an array", content);
  if (out.size() + content.size() > kMaxReplyTokens)
    return invalid_argument(fmt::format("reply: {} holds more than {} tokens", where, kMaxReplyTokens));
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string w = fmt::format("{}[{}]", where, i);
    ReplyStep step;
    D0_ASSIGN_OR_RETURN(step.chosen, read_token(content[i], w));
    auto top = content[i].find("top_logprobs");
    if (top != content[i].end() && !top->is_null()) {
      if (!top->is_array() || top->size() > kMaxTopLogprobs)
        return bad_reply(w + ".top_logprobs", fmt::format("an array of at most {}", kMaxTopLogprobs), *top);
      for (size_t k = 0; k < top->size(); ++k) {
        D0_ASSIGN_OR_RETURN(ReplyToken alt, read_token((*top)[k], fmt::format("{}.top_logprobs[{}]", w, k)));
        step.top.push_back(std::move(alt));
      }
    }
    out.push_back(std::move(step));
  }
  return Status::ok();
}

// The legacy completions form: {tokens, token_logprobs, top_logprobs: [{text: lp} | null]}.
Status read_legacy_logprobs(const Json& lp, const std::string& where, std::vector<ReplyStep>& out) {
  auto tokens = lp.find("tokens");
  auto values = lp.find("token_logprobs");
  if (tokens == lp.end() || !tokens->is_array()) return bad_reply(where + ".tokens", "an array", lp);
  if (values == lp.end() || !values->is_array() || values->size() != tokens->size())
    return bad_reply(where + ".token_logprobs", "an array as long as tokens", lp);
  if (out.size() + tokens->size() > kMaxReplyTokens)
    return invalid_argument(fmt::format("reply: {} holds more than {} tokens", where, kMaxReplyTokens));
  auto top = lp.find("top_logprobs");
  const bool has_top = top != lp.end() && top->is_array();
  if (has_top && top->size() != tokens->size())
    return bad_reply(where + ".top_logprobs", "an array as long as tokens", *top);
  for (size_t i = 0; i < tokens->size(); ++i) {
    const std::string w = fmt::format("{}.tokens[{}]", where, i);
    if (!(*tokens)[i].is_string()) return bad_reply(w, "a string", (*tokens)[i]);
    ReplyStep step;
    step.chosen.text = (*tokens)[i].get<std::string>();
    step.chosen.id = id_from_text(step.chosen.text);
    const Json& v = (*values)[i];
    if (v.is_null()) {
      step.chosen.logprob = std::numeric_limits<double>::quiet_NaN();  // the first prompt token under echo
    } else if (v.is_number()) {
      step.chosen.logprob = v.get<double>();
    } else {
      return bad_reply(fmt::format("{}.token_logprobs[{}]", where, i), "a number or null", v);
    }
    if (has_top && !(*top)[i].is_null()) {
      const Json& alts = (*top)[i];
      if (!alts.is_object() || alts.size() > kMaxTopLogprobs)
        return bad_reply(fmt::format("{}.top_logprobs[{}]", where, i),
                         fmt::format("an object of at most {} entries", kMaxTopLogprobs), alts);
      for (const auto& [text, value] : alts.items()) {
        if (!value.is_number())
          return bad_reply(fmt::format("{}.top_logprobs[{}].{}", where, i, text), "a number", value);
        ReplyToken alt;
        alt.text = text;
        alt.id = id_from_text(text);
        alt.logprob = value.get<double>();
        step.top.push_back(std::move(alt));
      }
    }
    out.push_back(std::move(step));
  }
  return Status::ok();
}

Status read_logprobs(const Json& lp, const std::string& where, ReplyChoice& choice) {
  if (lp.is_null()) return Status::ok();
  if (!lp.is_object()) return bad_reply(where, "an object or null", lp);
  choice.has_logprobs = true;
  auto content = lp.find("content");
  if (content != lp.end()) {
    if (content->is_null()) return Status::ok();
    return read_content_logprobs(*content, where + ".content", choice.steps);
  }
  return read_legacy_logprobs(lp, where, choice.steps);
}

// tool_calls of a message (whole) or of a delta (pieces joined by index).
Status read_tool_calls(const Json& calls, const std::string& where, ReplyChoice& choice, bool delta) {
  if (calls.is_null()) return Status::ok();
  if (!calls.is_array() || calls.size() > kMaxChoices * 4)
    return bad_reply(where, "an array of tool calls", calls);
  for (size_t i = 0; i < calls.size(); ++i) {
    const Json& c = calls[i];
    const std::string w = fmt::format("{}[{}]", where, i);
    if (!c.is_object()) return bad_reply(w, "an object", c);
    size_t slot = choice.tool_calls.size();
    if (delta) {
      auto index = c.find("index");
      if (index != c.end()) {
        if (!index->is_number_unsigned() || index->get<uint64_t>() >= kMaxChoices * 4)
          return bad_reply(w + ".index", "a small index", *index);
        slot = static_cast<size_t>(index->get<uint64_t>());
      }
    }
    if (slot >= choice.tool_calls.size()) choice.tool_calls.resize(slot + 1);
    ReplyToolCall& call = choice.tool_calls[slot];
    D0_ASSIGN_OR_RETURN(std::string id, opt_string(c, "id", w));
    if (!id.empty()) call.id = id;
    auto fn = c.find("function");
    if (fn == c.end() || fn->is_null()) continue;
    if (!fn->is_object()) return bad_reply(w + ".function", "an object", *fn);
    D0_ASSIGN_OR_RETURN(std::string name, opt_string(*fn, "name", w + ".function"));
    auto args = fn->find("arguments");
    std::string arguments;
    if (args != fn->end() && !args->is_null()) {
      // Some servers write the arguments as an object instead of its JSON text.
      arguments = args->is_string() ? args->get<std::string>() : args->dump();
    }
    if (delta) {
      call.name += name;
      call.arguments += arguments;
    } else {
      call.name = name;
      call.arguments = arguments;
    }
    if (call.arguments.size() > kMaxReplyBytes)
      return invalid_argument("reply: " + w + " arguments too long");
  }
  return Status::ok();
}

Result<size_t> choice_index(const Json& c, size_t fallback, const std::string& where) {
  auto index = c.find("index");
  if (index == c.end()) return fallback;
  if (!index->is_number_unsigned() || index->get<uint64_t>() >= kMaxChoices)
    return bad_reply(where + ".index", fmt::format("an index below {}", kMaxChoices), *index);
  return static_cast<size_t>(index->get<uint64_t>());
}

Status read_usage(const Json& doc, Reply& out) {
  auto usage = doc.find("usage");
  if (usage == doc.end() || usage->is_null()) return Status::ok();
  if (!usage->is_object()) return bad_reply("usage", "an object", *usage);
  for (auto [key, slot] : {std::pair{"prompt_tokens", &out.prompt_tokens},
                           std::pair{"completion_tokens", &out.completion_tokens}}) {
    auto v = usage->find(key);
    if (v == usage->end() || v->is_null()) continue;
    if (!v->is_number_integer() || v->get<int64_t>() < 0 || v->get<int64_t>() > (int64_t{1} << 40))
      return bad_reply(std::string("usage.") + key, "a count", *v);
    *slot = v->get<int64_t>();
  }
  return Status::ok();
}

// One chat.completion / text_completion object, or one chunk of a stream (delta = true).
Status read_object(const Json& doc, Reply& out, bool delta) {
  if (!doc.is_object()) return bad_reply("the body", "an object", doc);
  if (auto err = doc.find("error"); err != doc.end()) {
    return invalid_argument("reply: an error object: " + error_message(doc.dump()));
  }
  D0_RETURN_IF_ERROR(read_usage(doc, out));
  auto choices = doc.find("choices");
  if (choices == doc.end()) {
    if (delta) return Status::ok();  // e.g. a usage-only chunk written without choices
    return bad_reply("choices", "an array", Json());
  }
  if (!choices->is_array() || choices->size() > kMaxChoices)
    return bad_reply("choices", fmt::format("an array of at most {}", kMaxChoices), *choices);
  for (size_t i = 0; i < choices->size(); ++i) {
    const Json& c = (*choices)[i];
    const std::string where = fmt::format("choices[{}]", i);
    if (!c.is_object()) return bad_reply(where, "an object", c);
    D0_ASSIGN_OR_RETURN(size_t index, choice_index(c, i, where));
    if (index >= out.choices.size()) out.choices.resize(index + 1);
    ReplyChoice& choice = out.choices[index];
    D0_ASSIGN_OR_RETURN(std::string finish, opt_string(c, "finish_reason", where));
    if (!finish.empty()) choice.finish_reason = finish;
    const char* message_key = delta ? "delta" : "message";
    if (auto m = c.find(message_key); m != c.end() && !m->is_null()) {
      if (!m->is_object()) return bad_reply(where + "." + message_key, "an object", *m);
      D0_ASSIGN_OR_RETURN(std::string content, opt_string(*m, "content", where + "." + message_key));
      choice.text += content;
      if (auto calls = m->find("tool_calls"); calls != m->end())
        D0_RETURN_IF_ERROR(read_tool_calls(*calls, where + "." + message_key + ".tool_calls", choice, delta));
    }
    if (c.contains("text")) {
      D0_ASSIGN_OR_RETURN(std::string text, opt_string(c, "text", where));
      choice.text += text;
    }
    if (choice.text.size() > kMaxReplyBytes) return invalid_argument("reply: " + where + " text too long");
    if (auto lp = c.find("logprobs"); lp != c.end())
      D0_RETURN_IF_ERROR(read_logprobs(*lp, where + ".logprobs", choice));
  }
  return Status::ok();
}

}  // namespace

Result<Reply> parse_reply(std::string_view body) {
  D0_ASSIGN_OR_RETURN(Json doc, parse_json_text(body, "reply", kReplyLimits));
  Reply out;
  D0_RETURN_IF_ERROR(read_object(doc, out, false));
  if (out.choices.empty()) return invalid_argument("reply: no choices");
  return out;
}

Result<Reply> parse_stream(std::string_view sse_body) {
  if (sse_body.size() > kMaxReplyBytes) return invalid_argument("stream: longer than the reply limit");
  Reply out;
  size_t pos = 0;
  bool done = false;
  while (pos < sse_body.size()) {
    size_t end = sse_body.find('\n', pos);
    if (end == std::string_view::npos) end = sse_body.size();
    std::string_view line = sse_body.substr(pos, end - pos);
    pos = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.rfind("data:", 0) != 0) continue;  // comments, event names, blank separators
    std::string_view payload = line.substr(5);
    while (!payload.empty() && payload.front() == ' ') payload.remove_prefix(1);
    if (payload == "[DONE]") {
      done = true;
      break;
    }
    D0_ASSIGN_OR_RETURN(Json doc, parse_json_text(payload, "stream event", kReplyLimits));
    D0_RETURN_IF_ERROR(read_object(doc, out, true));
  }
  if (!done) return invalid_argument("stream: ended without data: [DONE]");
  if (out.choices.empty()) return invalid_argument("stream: no choices");
  return out;
}

Result<std::vector<int32_t>> parse_tokenize_reply(std::string_view body) {
  D0_ASSIGN_OR_RETURN(Json doc, parse_json_text(body, "tokenize reply", kReplyLimits));
  if (!doc.is_object()) return bad_reply("the tokenize body", "an object", doc);
  auto tokens = doc.find("tokens");
  if (tokens == doc.end() || !tokens->is_array()) return bad_reply("tokens", "an array", doc);
  if (tokens->size() > kMaxReplyTokens * 16) return invalid_argument("tokenize reply: too many tokens");
  std::vector<int32_t> ids;
  for (size_t i = 0; i < tokens->size(); ++i) {
    const Json* v = &(*tokens)[i];
    if (v->is_object() && v->contains("id")) v = &v->at("id");
    if (!v->is_number_integer() || v->get<int64_t>() < 0 ||
        v->get<int64_t>() > std::numeric_limits<int32_t>::max())
      return bad_reply(fmt::format("tokens[{}]", i), "a token id", *v);
    ids.push_back(static_cast<int32_t>(v->get<int64_t>()));
  }
  return ids;
}

std::string error_message(std::string_view body) {
  auto doc = parse_json_text(body, "error", JsonLimits{size_t{1} << 20, 16});
  if (doc.is_ok() && doc->is_object()) {
    auto err = doc->find("error");
    if (err != doc->end()) {
      if (err->is_string()) return err->get<std::string>().substr(0, 300);
      if (err->is_object()) {
        auto m = err->find("message");
        if (m != err->end() && m->is_string()) return m->get<std::string>().substr(0, 300);
      }
    }
  }
  std::string excerpt(body.substr(0, 200));
  for (char& c : excerpt)
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  return excerpt;
}

}  // namespace day0::audit
