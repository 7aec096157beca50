#pragma once
// Small UTF-8 helpers shared by the tokenizer and the template engine.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace day0::tokenizer {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Decodes one code point at s[pos]. Returns its length in bytes (1..4), or 0 when the bytes there
// are not valid UTF-8 (overlong, surrogate, truncated, above U+10FFFF); `out` is set only on success.
size_t decode_utf8(std::string_view s, size_t pos, char32_t& out);

// Appends the UTF-8 encoding of `cp` (which must be a valid scalar value).
void append_utf8(std::string& out, char32_t cp);

bool is_valid_utf8(std::string_view s);

// Replaces every maximal invalid subsequence with U+FFFD, the way Python's
// bytes.decode("utf-8", errors="replace") and Rust's String::from_utf8_lossy do.
std::string sanitize_utf8(std::string_view s);

// Number of code points in a valid UTF-8 string.
size_t utf8_length(std::string_view s);

}  // namespace day0::tokenizer
