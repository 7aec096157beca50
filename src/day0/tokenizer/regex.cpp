#include "day0/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <algorithm>

#include <vector>

#include <fmt/format.h>

namespace day0::tokenizer {

struct Regex::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Impl() { pcre2_code_free(code); }
};

namespace {

// Index just past the class that starts at p[start] == '[' (handles escapes and nested classes).
size_t class_end(std::string_view p, size_t start) {
  size_t i = start + 1;
  if (i < p.size() && p[i] == '^') ++i;
  if (i < p.size() && p[i] == ']') ++i;  // a leading ']' is literal
  int depth = 1;
  while (i < p.size() && depth > 0) {
    if (p[i] == '\\') {
      i += 2;
      continue;
    }
    if (p[i] == '[') ++depth;
    if (p[i] == ']') --depth;
    ++i;
  }
  return depth == 0 ? i : std::string_view::npos;
}

}  // namespace

Result<std::string> translate_rust_regex(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 16);
  size_t i = 0;
  while (i < p.size()) {
    const char c = p[i];
    if (c == '\\') {
      out.append(p.substr(i, 2));
      i += 2;
      continue;
    }
    if (c != '[') {
      out.push_back(c);
      ++i;
      continue;
    }
    const size_t end = class_end(p, i);
    if (end == std::string_view::npos)
      return parse_error(fmt::format("unterminated character class at {}", i));
    const std::string_view cls = p.substr(i, end - i);
    // Look for a top-level "&&[" inside the class.
    size_t amp = std::string_view::npos;
    for (size_t k = 1; k + 2 < cls.size(); ++k) {
      if (cls[k] == '\\') {
        ++k;
        continue;
      }
      if (cls[k] == '[') {
        const size_t inner = class_end(cls, k);
        if (inner == std::string_view::npos) break;
        k = inner - 1;
        continue;
      }
      if (cls[k] == '&' && cls[k + 1] == '&') {
        amp = k;
        break;
      }
    }
    if (amp == std::string_view::npos) {
      out.append(cls);
      i = end;
      continue;
    }
    const std::string_view left = cls.substr(1, amp - 1);
    std::string_view right = cls.substr(amp + 2, cls.size() - amp - 3);
    if (right.empty() || right.front() != '[' || class_end(right, 0) != right.size()) {
      return unsupported(fmt::format("class intersection with a non-class right side: {}", cls));
    }
    const bool negated = right.size() > 1 && right[1] == '^';
    const std::string_view right_body = right.substr(negated ? 2 : 1, right.size() - (negated ? 3 : 2));
    if (left.empty() || left.front() == '^') {
      return unsupported(fmt::format("class intersection with a negated left side: {}", cls));
    }
    out += fmt::format("(?:(?{}[{}])[{}])", negated ? '!' : '=', right_body, left);
    i = end;
  }
  return out;
}

Result<Regex> Regex::compile(std::string_view pattern, bool literal) {
  std::string translated;
  if (literal) {
    translated = std::string(pattern);
  } else {
    D0_ASSIGN_OR_RETURN(translated, translate_rust_regex(pattern));
  }
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  const uint32_t options = literal ? (PCRE2_UTF | PCRE2_LITERAL) : (PCRE2_UTF | PCRE2_UCP);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                   options, &err, &err_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof(buf));
    return parse_error(fmt::format("regex {:?}: {} at offset {}", std::string(pattern),
                                   reinterpret_cast<const char*>(buf), err_offset));
  }
  auto impl = std::make_shared<Impl>();
  impl->code = code;
  impl->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  Regex r;
  r.impl_ = std::move(impl);
  r.pattern_ = std::string(pattern);
  return r;
}

void Regex::for_each_match(std::string_view text, const std::function<void(size_t, size_t)>& on_match) const {
  struct MatchData {
    pcre2_match_data* md = pcre2_match_data_create(4, nullptr);
    ~MatchData() { pcre2_match_data_free(md); }
  };
  thread_local MatchData data;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    const int rc =
        impl_->jit
            ? pcre2_jit_match(impl_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, data.md, nullptr)
            : pcre2_match(impl_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, data.md, nullptr);
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.md);
    const size_t b = ov[0], e = ov[1];
    if (e > b) {
      on_match(b, e);
      pos = e;
    } else {
      // Empty match: step over one whole code point.
      pos = b + 1;
      while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
    }
  }
}

}  // namespace day0::tokenizer
