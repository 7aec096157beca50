#include "day0/tokenizer/byte_level.h"

#include <algorithm>
#include <unordered_map>

#include "day0/tokenizer/utf8.h"

namespace day0::tokenizer {
namespace {

struct Tables {
  std::array<std::string, 256> to_char;
  std::unordered_map<char32_t, unsigned char> to_byte;
  Tables() {
    // Printable Latin-1 bytes keep their code point; the rest map to 256, 257, ... in byte order.
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const char32_t cp = printable ? static_cast<char32_t>(b) : next++;
      append_utf8(to_char[b], cp);
      to_byte[cp] = static_cast<unsigned char>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

const std::string& byte_to_char(unsigned char b) {
  return tables().to_char[b];
}

std::optional<std::string> byte_level_to_bytes(std::string_view token) {
  const Tables& t = tables();
  std::string out;
  size_t pos = 0;
  char32_t cp = 0;
  while (pos < token.size()) {
    const size_t len = decode_utf8(token, pos, cp);
    if (len == 0) return std::nullopt;
    auto it = t.to_byte.find(cp);
    if (it == t.to_byte.end()) return std::nullopt;
    out.push_back(static_cast<char>(it->second));
    pos += len;
  }
  return out;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += byte_to_char(static_cast<unsigned char>(c));
  return out;
}

}  // namespace day0::tokenizer
