#include "day0/tokenizer/jinja/lexer.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "day0/tokenizer/utf8.h"

namespace day0::jinja {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

class Lexer {
 public:
  Lexer(std::string_view src, const std::string& name, const LexOptions& opt)
      : src_(src), name_(name), opt_(opt) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src.size(); ++i) {
      if (src[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  Result<std::vector<Token>> run() {
    size_t pos = 0;
    while (pos < src_.size()) {
      size_t start = find_tag(pos);
      std::string text(src_.substr(pos, start - pos));
      if (start == src_.size()) {
        emit_text(std::move(text), pos);
        break;
      }
      const char kind = src_[start + 1];  // '{', '%' or '#'
      const char sign = start + 2 < src_.size() ? src_[start + 2] : '\0';
      if (sign == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (sign != '+' && opt_.lstrip_blocks && kind != '{') {
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        const bool line_starting = pos == 0 || src_[pos - 1] == '\n';
        if (l_pos > 0 || line_starting) {
          bool blank = true;
          for (size_t i = l_pos; i < text.size(); ++i) blank = blank && is_space(text[i]);
          if (blank) text.resize(l_pos);
        }
      }
      emit_text(std::move(text), pos);
      size_t body = start + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (kind == '#') {
        const size_t close = src_.find("#}", body);
        if (close == std::string_view::npos) return error(start, "unterminated comment");
        const bool strip_after = close > body && src_[close - 1] == '-';
        pos = after_tag(close + 2, strip_after, true);
        continue;
      }
      const bool is_block = kind == '%';
      tokens_.push_back(
          {is_block ? Token::Kind::kBlockBegin : Token::Kind::kVarBegin, "", {}, pos_of(start)});
      D0_ASSIGN_OR_RETURN(size_t end, lex_expression(body, is_block));
      pos = end;
    }
    tokens_.push_back({Token::Kind::kEnd, "", {}, pos_of(src_.size())});
    return std::move(tokens_);
  }

 private:
  Status error(size_t at, const std::string& msg) const {
    const Pos p = pos_of(at);
    return parse_error(fmt::format("{}:{}:{}: {}", name_, p.line, p.col, msg));
  }

  Pos pos_of(size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line = static_cast<size_t>(it - line_starts_.begin());
    const size_t col = offset - line_starts_[line - 1] + 1;
    return {static_cast<int>(line), static_cast<int>(col)};
  }

  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return src_.size();
  }

  void emit_text(std::string text, size_t at) {
    if (!text.empty()) tokens_.push_back({Token::Kind::kText, std::move(text), {}, pos_of(at)});
  }

  // Position after a closing delimiter at `end`: "-" strips all following whitespace, trim_blocks one
  // newline.
  size_t after_tag(size_t end, bool strip_after, bool block_like) const {
    if (strip_after) {
      while (end < src_.size() && is_space(src_[end])) ++end;
    } else if (block_like && opt_.trim_blocks && end < src_.size() && src_[end] == '\n') {
      ++end;
    }
    return end;
  }

  Result<size_t> lex_expression(size_t pos, bool is_block) {
    int depth = 0;
    while (pos < src_.size()) {
      const char c = src_[pos];
      if (is_space(c)) {
        ++pos;
        continue;
      }
      if (depth == 0) {
        const char* closer = is_block ? "%}" : "}}";
        const bool minus = c == '-' && src_.compare(pos + 1, 2, closer) == 0;
        const bool plus = c == '+' && src_.compare(pos + 1, 2, closer) == 0;
        if (minus || plus || src_.compare(pos, 2, closer) == 0) {
          tokens_.push_back({is_block ? Token::Kind::kBlockEnd : Token::Kind::kVarEnd, "", {}, pos_of(pos)});
          const size_t end = pos + 2 + ((minus || plus) ? 1 : 0);
          return after_tag(end, minus, is_block && !plus);
        }
      }
      const size_t start = pos;
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        while (pos < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos])) || src_[pos] == '_'))
          ++pos;
        tokens_.push_back(
            {Token::Kind::kName, std::string(src_.substr(start, pos - start)), {}, pos_of(start)});
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        D0_RETURN_IF_ERROR(lex_number(pos));
        continue;
      }
      if (c == '\'' || c == '"') {
        D0_RETURN_IF_ERROR(lex_string(pos));
        continue;
      }
      static const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                   ">",  "=",  "(",  ")",  "[",  "]",  "{", "}", ",", ".", ":", "|"};
      bool matched = false;
      for (const char* op : kOps) {
        const size_t n = std::strlen(op);
        if (src_.compare(pos, n, op) == 0) {
          if (op[0] == '(' || op[0] == '[' || op[0] == '{') ++depth;
          if (op[0] == ')' || op[0] == ']' || op[0] == '}') --depth;
          tokens_.push_back({Token::Kind::kOp, op, {}, pos_of(pos)});
          pos += n;
          matched = true;
          break;
        }
      }
      if (!matched) return error(pos, fmt::format("unexpected character {:?}", std::string(1, c)));
    }
    return error(pos,
                 is_block ? "unterminated block tag (missing %})" : "unterminated expression (missing }})");
  }

  Status lex_number(size_t& pos) {
    const size_t start = pos;
    while (pos < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos])) || src_[pos] == '_'))
      ++pos;
    bool is_float = false;
    if (pos + 1 < src_.size() && src_[pos] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[pos + 1]))) {
      is_float = true;
      ++pos;
      while (pos < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos])) || src_[pos] == '_'))
        ++pos;
    }
    if (pos < src_.size() && (src_[pos] == 'e' || src_[pos] == 'E')) {
      size_t p = pos + 1;
      if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
      if (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) {
        is_float = true;
        pos = p;
        while (pos < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos]))) ++pos;
      }
    }
    std::string digits(src_.substr(start, pos - start));
    digits.erase(std::remove(digits.begin(), digits.end(), '_'), digits.end());
    Token t{is_float ? Token::Kind::kFloat : Token::Kind::kInt, digits, {}, pos_of(start)};
    try {
      t.number = is_float ? Value(std::stod(digits)) : Value(static_cast<int64_t>(std::stoll(digits)));
    } catch (const std::exception&) {
      return error(start, fmt::format("number {} is out of range", digits));
    }
    tokens_.push_back(std::move(t));
    return Status::ok();
  }

  Status lex_string(size_t& pos) {
    const size_t start = pos;
    const char quote = src_[pos++];
    std::string out;
    while (pos < src_.size() && src_[pos] != quote) {
      char c = src_[pos++];
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (pos >= src_.size()) break;
      c = src_[pos++];
      switch (c) {
        case 'n':
          out.push_back('\n');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case '0':
          out.push_back('\0');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'v':
          out.push_back('\v');
          break;
        case '\\':
        case '\'':
        case '"':
          out.push_back(c);
          break;
        case '\n':
          break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = c == 'x' ? 2 : (c == 'u' ? 4 : 8);
          if (pos + n > src_.size()) return error(pos, "truncated escape");
          char32_t cp = 0;
          for (size_t i = 0; i < n; ++i) {
            const char h = src_[pos + i];
            cp <<= 4;
            if (h >= '0' && h <= '9')
              cp |= static_cast<char32_t>(h - '0');
            else if (h >= 'a' && h <= 'f')
              cp |= static_cast<char32_t>(h - 'a' + 10);
            else if (h >= 'A' && h <= 'F')
              cp |= static_cast<char32_t>(h - 'A' + 10);
            else
              return error(pos, "bad hex escape");
          }
          pos += n;
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return error(pos, "escape is not a valid character");
          tokenizer::append_utf8(out, cp);
          break;
        }
        default:  // Python keeps unknown escapes verbatim
          out.push_back('\\');
          out.push_back(c);
      }
    }
    if (pos >= src_.size()) return error(start, "unterminated string literal");
    ++pos;  // closing quote
    tokens_.push_back({Token::Kind::kString, std::move(out), {}, pos_of(start)});
    return Status::ok();
  }

  std::string_view src_;
  std::string name_;
  LexOptions opt_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

Result<std::vector<Token>> lex(std::string_view source, const std::string& name, const LexOptions& options) {
  return Lexer(source, name, options).run();
}

}  // namespace day0::jinja
