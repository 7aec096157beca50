#include "day0/tokenizer/text_prompt.h"

#include <fmt/format.h>

#include "day0/tokenizer/chat_template.h"

namespace day0 {

namespace {
Status check_ids(const std::vector<int32_t>& ids, int64_t model_vocab, const std::string& source) {
  if (ids.empty()) return invalid_argument("the prompt encodes to no tokens");
  for (int32_t id : ids) {
    if (id < 0 || id >= model_vocab) {
      return invalid_argument(
          fmt::format("{}: token id {} is outside the model's vocabulary of {} (is this the "
                      "model's own tokenizer?)",
                      source, id, model_vocab));
    }
  }
  return Status::ok();
}

// A trailing incomplete UTF-8 sequence (or the U+FFFD a decoder puts in its place) is held back.
size_t complete_prefix(const std::string& text) {
  size_t end = text.size();
  static const std::string kReplacement = "\xEF\xBF\xBD";
  if (end >= 3 && text.compare(end - 3, 3, kReplacement) == 0) return end - 3;
  size_t i = end;
  int back = 0;
  while (i > 0 && back < 4 && (static_cast<unsigned char>(text[i - 1]) & 0xC0) == 0x80) {
    --i;
    ++back;
  }
  if (i == 0) return end;
  const auto lead = static_cast<unsigned char>(text[i - 1]);
  const int need = lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : lead >= 0xC0 ? 1 : 0;
  return back < need ? i - 1 : end;
}
}  // namespace

Result<std::vector<int32_t>> encode_text_prompt(const tokenizer::Tokenizer& tok, const std::string& text,
                                                int64_t model_vocab) {
  tokenizer::EncodeOptions options;
  options.add_special_tokens = true;
  std::vector<int32_t> ids = tok.encode(text, options);
  D0_RETURN_IF_ERROR(check_ids(ids, model_vocab, tok.source()));
  return ids;
}

Result<std::vector<int32_t>> encode_chat_prompt(const tokenizer::Tokenizer& tok,
                                                const nlohmann::ordered_json& chat, int64_t model_vocab,
                                                std::string* rendered) {
  tokenizer::ChatRequest request;
  if (chat.is_array()) {
    request.messages = chat;
  } else if (chat.is_object() && chat.contains("messages") && chat["messages"].is_array()) {
    request.messages = chat["messages"];
    if (chat.contains("tools")) request.tools = chat["tools"];
  } else {
    return invalid_argument("chat: expected an array of messages or an object with \"messages\"");
  }
  for (size_t i = 0; i < request.messages.size(); ++i) {
    const auto& m = request.messages[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return invalid_argument(
          fmt::format("chat: messages[{}]: expected an object with a string \"role\"", i));
    }
  }
  D0_ASSIGN_OR_RETURN(std::string text, tokenizer::apply_chat_template(tok, request));
  if (rendered != nullptr) *rendered = text;
  std::vector<int32_t> ids = tok.encode(text, tokenizer::EncodeOptions{});
  D0_RETURN_IF_ERROR(check_ids(ids, model_vocab, tok.source()));
  return ids;
}

std::string StreamingDecoder::push(int32_t id) {
  ids_.push_back(id);
  const std::string text = tok_.decode(ids_, /*skip_special_tokens=*/true);
  const size_t ready = complete_prefix(text);
  if (ready <= emitted_) return "";
  std::string piece = text.substr(emitted_, ready - emitted_);
  emitted_ = ready;
  return piece;
}

std::string StreamingDecoder::finish() {
  const std::string text = tok_.decode(ids_, /*skip_special_tokens=*/true);
  if (text.size() <= emitted_) return "";
  std::string rest = text.substr(emitted_);
  emitted_ = text.size();
  return rest;
}

}  // namespace day0
