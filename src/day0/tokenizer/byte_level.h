#pragma once
// GPT-2's reversible byte <-> printable-character table used by byte-level BPE vocabularies: every
// byte becomes one visible code point so that vocab strings never contain raw control bytes.
#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace day0::tokenizer {

// UTF-8 of the character that stands for byte b.
const std::string& byte_to_char(unsigned char b);

// Maps a vocab string back to raw bytes; nullopt when a character is outside the table.
std::optional<std::string> byte_level_to_bytes(std::string_view token);

// Maps raw bytes to their byte-level vocab string.
std::string bytes_to_byte_level(std::string_view bytes);

}  // namespace day0::tokenizer
