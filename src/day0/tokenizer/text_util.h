#pragma once
// Character classes the tokenizer stages agree on (Unicode White_Space, as Rust's char::is_whitespace).
#include <string_view>

namespace day0::tokenizer {

bool is_unicode_whitespace(char32_t cp);
// Trims Unicode whitespace from the chosen ends.
std::string_view strip_whitespace(std::string_view s, bool left, bool right);
// Rust's char::is_alphanumeric plus '_' (the "word" characters of single_word added tokens).
bool is_word_char(char32_t cp);

}  // namespace day0::tokenizer
