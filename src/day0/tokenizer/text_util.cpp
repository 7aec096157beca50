#include "day0/tokenizer/text_util.h"

#include <utf8proc.h>
#include <algorithm>

#include "day0/tokenizer/utf8.h"

namespace day0::tokenizer {

bool is_unicode_whitespace(char32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

std::string_view strip_whitespace(std::string_view s, bool left, bool right) {
  size_t b = 0, e = s.size();
  char32_t cp = 0;
  if (left) {
    while (b < e) {
      const size_t len = decode_utf8(s, b, cp);
      if (len == 0 || !is_unicode_whitespace(cp)) break;
      b += len;
    }
  }
  if (right) {
    while (e > b) {
      size_t start = e - 1;
      while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      const size_t len = decode_utf8(s, start, cp);
      if (len == 0 || !is_unicode_whitespace(cp)) break;
      e = start;
    }
  }
  return s.substr(b, e - b);
}

bool is_word_char(char32_t cp) {
  if (cp == '_') return true;
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  switch (cat) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

}  // namespace day0::tokenizer
