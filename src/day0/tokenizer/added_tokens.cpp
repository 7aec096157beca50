#include "day0/tokenizer/added_tokens.h"

#include <algorithm>

#include "day0/tokenizer/pipeline.h"
#include "day0/tokenizer/text_util.h"
#include "day0/tokenizer/utf8.h"

namespace day0::tokenizer {

void AddedVocabulary::add(AddedToken token) {
  if (token.content.empty()) return;
  auto it = by_content_.find(token.content);
  if (it != by_content_.end()) {
    by_id_.erase(tokens_[it->second].id);
    tokens_[it->second] = token;
    by_id_[token.id] = it->second;
    return;
  }
  by_content_[token.content] = tokens_.size();
  by_id_[token.id] = tokens_.size();
  tokens_.push_back(std::move(token));
}

void AddedVocabulary::Matcher::build() {
  for (auto& v : by_first) v.clear();
  for (size_t i = 0; i < patterns.size(); ++i) {
    if (!patterns[i].empty()) by_first[static_cast<unsigned char>(patterns[i][0])].push_back(i);
  }
  for (auto& v : by_first) {
    std::stable_sort(v.begin(), v.end(),
                     [&](size_t a, size_t b) { return patterns[a].size() > patterns[b].size(); });
  }
}

void AddedVocabulary::build(const Normalizer* normalizer) {
  raw_ = {};
  normalized_ = {};
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& t = tokens_[i];
    if (t.normalized && normalizer != nullptr) {
      normalized_.patterns.push_back(normalizer->normalize(t.content));
      normalized_.token_index.push_back(i);
    } else {
      raw_.patterns.push_back(t.content);
      raw_.token_index.push_back(i);
    }
  }
  raw_.build();
  normalized_.build();
}

namespace {

// Code point ending just before byte `pos` (0 when none).
char32_t char_before(std::string_view s, size_t pos) {
  if (pos == 0) return 0;
  size_t start = pos - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  char32_t cp = 0;
  return decode_utf8(s, start, cp) > 0 ? cp : 0;
}

char32_t char_at(std::string_view s, size_t pos) {
  char32_t cp = 0;
  return decode_utf8(s, pos, cp) > 0 ? cp : 0;
}

}  // namespace

std::optional<AddedVocabulary::Match> AddedVocabulary::find(const Matcher& m, std::string_view text,
                                                            size_t from, bool split_special) const {
  for (size_t pos = from; pos < text.size(); ++pos) {
    const auto& candidates = m.by_first[static_cast<unsigned char>(text[pos])];
    for (size_t p : candidates) {
      const std::string& pat = m.patterns[p];
      if (text.compare(pos, pat.size(), pat) != 0) continue;
      const AddedToken& tok = tokens_[m.token_index[p]];
      if (split_special && tok.special) continue;
      size_t begin = pos, end = pos + pat.size();
      if (tok.single_word) {
        const char32_t before = char_before(text, begin);
        const char32_t after = end < text.size() ? char_at(text, end) : 0;
        if ((before != 0 && is_word_char(before)) || (after != 0 && is_word_char(after))) continue;
      }
      if (tok.lstrip) {
        while (begin > from) {
          const char32_t c = char_before(text, begin);
          if (c == 0 || !is_unicode_whitespace(c)) break;
          size_t len = 0;
          std::string tmp;
          append_utf8(tmp, c);
          len = tmp.size();
          begin -= len;
        }
      }
      if (tok.rstrip) {
        while (end < text.size()) {
          char32_t c = 0;
          const size_t len = decode_utf8(text, end, c);
          if (len == 0 || !is_unicode_whitespace(c)) break;
          end += len;
        }
      }
      return Match{begin, end, m.token_index[p]};
    }
  }
  return std::nullopt;
}

void AddedVocabulary::split_with(const Matcher& m, std::string_view text, bool at_origin, bool split_special,
                                 std::vector<Segment>& out, const Normalizer* normalize_rest) const {
  auto emit_text = [&](size_t b, size_t e) {
    if (e <= b) return;
    const bool origin = at_origin && b == 0;
    if (normalize_rest == nullptr) {
      out.push_back({std::string(text.substr(b, e - b)), -1, origin});
      return;
    }
    // Second pass: normalize, then look for the normalized added tokens.
    const std::string normalized = normalize_rest->normalize(text.substr(b, e - b));
    if (normalized_.empty()) {
      if (!normalized.empty()) out.push_back({normalized, -1, origin});
      return;
    }
    split_with(normalized_, normalized, origin, split_special, out, nullptr);
  };
  size_t pos = 0;
  if (!m.empty()) {
    while (auto match = find(m, text, pos, split_special)) {
      emit_text(pos, match->begin);
      out.push_back({std::string(), tokens_[match->token].id, at_origin && match->begin == 0});
      pos = match->end;
    }
  }
  emit_text(pos, text.size());
}

std::vector<Segment> AddedVocabulary::split(std::string_view text, const Normalizer* normalizer,
                                            bool split_special) const {
  std::vector<Segment> out;
  split_with(raw_, text, true, split_special, out, normalizer);
  return out;
}

const AddedToken* AddedVocabulary::by_id(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocabulary::by_content(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

}  // namespace day0::tokenizer
