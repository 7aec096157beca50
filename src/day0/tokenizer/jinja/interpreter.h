#pragma once
// Renders a parsed Jinja template with the globals transformers gives chat templates: range, namespace,
// dict, raise_exception and strftime_now.
#include <ctime>
#include <optional>
#include <string>

#include "day0/core/status.h"
#include "day0/tokenizer/jinja/ast.h"

namespace day0::jinja {

struct RenderOptions {
  std::optional<std::time_t> now;  // what strftime_now sees (local time); default: the current time
  // Statements, expressions and loop iterations a render may evaluate before it is stopped (real chat
  // templates need a few thousand per message).
  int64_t max_steps = 5'000'000;
};

// `variables` become the template's globals. Errors carry "<name>:<line>:<col>: <message>".
Result<std::string> render(const Template& tmpl, const Dict& variables, const RenderOptions& options = {});

}  // namespace day0::jinja
