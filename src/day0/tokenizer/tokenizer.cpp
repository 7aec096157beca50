#include "day0/tokenizer/tokenizer.h"

#include "day0/tokenizer/utf8.h"

namespace day0::tokenizer {

Tokenizer::Tokenizer(TokenizerParts parts) : parts_(std::move(parts)) {
  for (size_t i = 0; i < parts_.id_to_token.size(); ++i) {
    if (!parts_.id_to_token[i].empty()) token_to_id_.emplace(parts_.id_to_token[i], static_cast<int32_t>(i));
  }
  vocab_size_ = parts_.id_to_token.size();
  for (const AddedToken& t : parts_.added.tokens()) {
    token_to_id_.insert_or_assign(t.content, t.id);
    vocab_size_ = std::max(vocab_size_, static_cast<size_t>(t.id) + 1);
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  std::string repaired;
  if (!is_valid_utf8(text)) {
    repaired = sanitize_utf8(text);
    text = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<Segment> segments =
      parts_.added.split(text, parts_.normalizer.get(), options.split_special_tokens);
  std::vector<Piece> pieces;
  for (Segment& seg : segments) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    if (!parts_.pre_tokenizer) {
      parts_.model.encode_word(seg.text, ids);
      continue;
    }
    pieces.clear();
    pieces.push_back({std::move(seg.text), seg.at_origin});
    parts_.pre_tokenizer->split(pieces);
    for (const Piece& p : pieces) parts_.model.encode_word(p.text, ids);
  }
  if (options.add_special_tokens && parts_.post_processor) ids = parts_.post_processor->process(ids);
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (const AddedToken* t = parts_.added.by_id(id)) {
      if (!(skip_special_tokens && t->special)) tokens.push_back(t->content);
      continue;
    }
    if (id >= 0 && static_cast<size_t>(id) < parts_.id_to_token.size() && !parts_.id_to_token[id].empty()) {
      tokens.push_back(parts_.id_to_token[id]);
    }
  }
  if (!parts_.decoder) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  parts_.decoder->decode(tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

std::optional<std::string> Tokenizer::id_to_piece(int32_t id) const {
  if (const AddedToken* t = parts_.added.by_id(id)) return t->content;
  if (id >= 0 && static_cast<size_t>(id) < parts_.id_to_token.size() && !parts_.id_to_token[id].empty()) {
    return parts_.id_to_token[id];
  }
  return std::nullopt;
}

std::optional<int32_t> Tokenizer::piece_to_id(std::string_view piece) const {
  auto it = token_to_id_.find(piece);
  if (it == token_to_id_.end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::is_special(int32_t id) const {
  const AddedToken* t = parts_.added.by_id(id);
  return t != nullptr && t->special;
}

std::optional<std::string> Tokenizer::chat_template(std::string_view name) const {
  for (const auto& [n, source] : parts_.chat_templates) {
    if (n == name) return source;
  }
  return std::nullopt;
}

}  // namespace day0::tokenizer
