#include "day0/tokenizer/chat_template.h"

#include "day0/tokenizer/jinja/interpreter.h"
#include "day0/tokenizer/jinja/parser.h"
#include "day0/tokenizer/tokenizer.h"

namespace day0::tokenizer {

Result<std::string> render_chat_template(std::string_view source, const ChatRequest& request,
                                         const nlohmann::ordered_json& special_tokens,
                                         const std::string& template_name) {
  D0_ASSIGN_OR_RETURN(auto tmpl, jinja::parse_template(source, template_name));
  jinja::Dict vars;
  vars.set("messages", jinja::Value::from_json(request.messages));
  vars.set("tools", jinja::Value::from_json(request.tools));
  vars.set("documents", jinja::Value::none());
  vars.set("add_generation_prompt", jinja::Value(request.add_generation_prompt));
  if (special_tokens.is_object()) {
    for (const auto& [name, value] : special_tokens.items()) vars.set(name, jinja::Value::from_json(value));
  }
  if (request.extra.is_object()) {
    for (const auto& [k, v] : request.extra.items()) vars.set(k, jinja::Value::from_json(v));
  }
  jinja::RenderOptions options;
  options.now = request.now;
  return jinja::render(*tmpl, vars, options);
}

Result<std::string> apply_chat_template(const Tokenizer& tokenizer, std::string_view source,
                                        const ChatRequest& request) {
  nlohmann::ordered_json specials = nlohmann::ordered_json::object();
  const SpecialTokens& sp = tokenizer.special_tokens();
  if (!sp.bos.empty()) specials["bos_token"] = sp.bos;
  if (!sp.eos.empty()) specials["eos_token"] = sp.eos;
  if (!sp.pad.empty()) specials["pad_token"] = sp.pad;
  if (!sp.unk.empty()) specials["unk_token"] = sp.unk;
  return render_chat_template(source, request, specials);
}

Result<std::string> apply_chat_template(const Tokenizer& tokenizer, const ChatRequest& request) {
  const auto source = tokenizer.chat_template();
  if (!source) {
    return not_found(tokenizer.source() +
                     ": the model folder has no chat template (chat_template.jinja or "
                     "tokenizer_config.json chat_template)");
  }
  return apply_chat_template(tokenizer, *source, request);
}

}  // namespace day0::tokenizer
