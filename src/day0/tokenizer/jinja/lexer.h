#pragma once
// Splits Jinja source into text and tag tokens, applying whitespace control the way transformers
// configures jinja2 (trim_blocks and lstrip_blocks on, "-" and "+" markers honoured).
#include <string>
#include <string_view>
#include <vector>

#include "day0/core/status.h"
#include "day0/tokenizer/jinja/ast.h"

namespace day0::jinja {

struct Token {
  enum class Kind {
    kText,
    kVarBegin,
    kVarEnd,
    kBlockBegin,
    kBlockEnd,
    kName,
    kString,
    kInt,
    kFloat,
    kOp,
    kEnd
  };
  Kind kind;
  std::string text;  // text, name, operator or decoded string literal
  Value number;
  Pos pos;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

Result<std::vector<Token>> lex(std::string_view source, const std::string& name,
                               const LexOptions& options = {});

}  // namespace day0::jinja
