#pragma once
// PCRE2 (JIT, UTF + Unicode properties) behind a small interface, with a translation step for the
// Rust `regex`/`fancy-regex` syntax that tokenizer files use and PCRE2 lacks (class intersection).
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "day0/core/status.h"

namespace day0::tokenizer {

class Regex {
 public:
  // `literal`: the pattern is a plain string to find, not a regex.
  static Result<Regex> compile(std::string_view pattern, bool literal = false);

  // Calls on_match(begin, end) for each non-empty, non-overlapping match, left to right.
  // `text` must be valid UTF-8.
  void for_each_match(std::string_view text, const std::function<void(size_t, size_t)>& on_match) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
  std::string pattern_;
};

// Rewrites Rust-regex syntax PCRE2 does not know into an equivalent PCRE2 pattern:
// `[A&&[^B]]` -> `(?:(?![B])[A])` and `[A&&[B]]` -> `(?:(?=[B])[A])`. Everything else passes through.
Result<std::string> translate_rust_regex(std::string_view pattern);

}  // namespace day0::tokenizer
