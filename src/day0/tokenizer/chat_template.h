#pragma once
// Chat templates rendered the way transformers' apply_chat_template does: jinja2 with trim_blocks and
// lstrip_blocks, variables messages / tools / documents / add_generation_prompt / special tokens /
// extra keyword arguments, plus raise_exception and strftime_now.
#include <ctime>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "day0/core/status.h"

namespace day0::tokenizer {

class Tokenizer;

struct ChatRequest {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // null: no tools
  bool add_generation_prompt = true;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // e.g. {"enable_thinking": false}
  std::optional<std::time_t> now;                                   // strftime_now's clock (tests pin it)
};

// Renders `source` with explicit special-token variables ({"bos_token": "<s>", ...}).
Result<std::string> render_chat_template(std::string_view source, const ChatRequest& request,
                                         const nlohmann::ordered_json& special_tokens,
                                         const std::string& template_name = "chat_template");

// Renders with the tokenizer's special tokens (bos/eos/pad/unk as tokenizer_config.json names them).
Result<std::string> apply_chat_template(const Tokenizer& tokenizer, std::string_view source,
                                        const ChatRequest& request);
// Same with the model folder's own template (chat_template.jinja or tokenizer_config.json); NotFound
// when the folder ships none.
Result<std::string> apply_chat_template(const Tokenizer& tokenizer, const ChatRequest& request);

}  // namespace day0::tokenizer
