#pragma once
// Parses Jinja tokens into a Template: the statements and expressions chat templates use. Anything else
// is a parse error naming the template line and column.
#include <memory>
#include <string>
#include <string_view>

#include "day0/core/status.h"
#include "day0/tokenizer/jinja/ast.h"
#include "day0/tokenizer/jinja/lexer.h"

namespace day0::jinja {

Result<std::shared_ptr<const Template>> parse_template(std::string_view source, const std::string& name,
                                                       const LexOptions& options = {});

}  // namespace day0::jinja
