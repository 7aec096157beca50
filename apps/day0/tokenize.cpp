// day0 tokenize MODEL "text": text -> ids (and pieces), ids -> text, or a chat rendered by the model's
// template and then tokenized.
#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "command.h"
#include "day0/core/json_reader.h"
#include "day0/tokenizer/chat_template.h"
#include "day0/tokenizer/tokenizer.h"

namespace day0::cli {
namespace {

using nlohmann::json;

struct TokenizeOptions {
  std::string model;
  std::string text;
  std::string file;
  std::string decode;
  std::string chat;
  std::string template_file;
  bool pieces = false;
  bool as_json = false;
  bool no_add_special = false;
  bool split_special = false;
  bool skip_special = false;
  bool no_generation_prompt = false;
};

// Text, template and message files: regular files only (a directory or device is bad input).
Result<std::string> slurp(const std::string& path) {
  return read_bounded_file(path, size_t{256} << 20);
}

Result<std::vector<int32_t>> parse_ids(const std::string& list) {
  std::vector<int32_t> ids;
  std::string item;
  std::istringstream in(list);
  while (std::getline(in, item, ',')) {
    const auto b = item.find_first_not_of(" \t");
    if (b == std::string::npos) continue;
    const auto e = item.find_last_not_of(" \t");
    const std::string num = item.substr(b, e - b + 1);
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(num, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != num.size() || v < 0 || v > INT32_MAX) {
      return invalid_argument(fmt::format("--decode: {:?} is not a token id", num));
    }
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

// Renders --chat MESSAGES.json (a list of messages, or {"messages": [...], "tools": [...], ...}).
Result<std::string> render_chat(const tokenizer::Tokenizer& tok, const TokenizeOptions& o) {
  D0_ASSIGN_OR_RETURN(std::string text, slurp(o.chat));
  D0_ASSIGN_OR_RETURN(json doc, parse_json_text(text, o.chat, kChatJsonLimits));
  tokenizer::ChatRequest req;
  if (doc.is_array()) {
    req.messages = doc;
  } else if (doc.is_object() && doc.contains("messages")) {
    req.messages = doc["messages"];
    if (doc.contains("tools")) req.tools = doc["tools"];
    for (const auto& [k, v] : doc.items()) {
      if (k != "messages" && k != "tools") req.extra[k] = v;
    }
  } else {
    return invalid_argument(
        fmt::format("{}: expected a list of messages or {{\"messages\": [...]}}", o.chat));
  }
  req.add_generation_prompt = !o.no_generation_prompt;
  std::string source;
  if (!o.template_file.empty()) {
    D0_ASSIGN_OR_RETURN(source, slurp(o.template_file));
  } else if (auto t = tok.chat_template()) {
    source = *t;
  } else {
    return not_found(
        fmt::format("{}: no chat template (tokenizer_config.json chat_template or chat_template.jinja); "
                    "pass one with --template",
                    o.model));
  }
  return tokenizer::apply_chat_template(tok, source, req);
}

int run_tokenize(const TokenizeOptions& o) {
  auto loaded = tokenizer::load_tokenizer(o.model);
  if (!loaded) return report_error("tokenize", loaded.status());
  const tokenizer::Tokenizer& tok = **loaded;

  if (!o.decode.empty()) {
    auto ids = parse_ids(o.decode);
    if (!ids) return report_error("tokenize", ids.status());
    const std::string text = tok.decode(*ids, o.skip_special);
    if (o.as_json) {
      fmt::print("{}\n", json{{"text", text}}.dump(-1, ' ', false, json::error_handler_t::replace));
    } else {
      fmt::print("{}\n", text);
    }
    return kExitOk;
  }

  std::string text;
  bool add_special = !o.no_add_special;
  if (!o.chat.empty()) {
    auto rendered = render_chat(tok, o);
    if (!rendered) return report_error("tokenize", rendered.status());
    text = std::move(*rendered);
    add_special = false;  // the template writes BOS itself
  } else if (!o.file.empty()) {
    auto content = slurp(o.file);
    if (!content) return report_error("tokenize", content.status());
    text = std::move(*content);
  } else {
    text = o.text;
  }
  const std::vector<int32_t> ids =
      tok.encode(text, {.add_special_tokens = add_special, .split_special_tokens = o.split_special});
  std::vector<std::string> pieces;
  for (int32_t id : ids) pieces.push_back(tok.id_to_piece(id).value_or(""));

  if (o.as_json) {
    json out = {{"ids", ids}, {"pieces", pieces}};
    if (!o.chat.empty()) out["text"] = text;
    fmt::print("{}\n", out.dump(-1, ' ', false, json::error_handler_t::replace));
    return kExitOk;
  }
  if (!o.chat.empty()) fmt::print("{}\n---\n", text);
  if (!o.pieces) {
    fmt::print("{}\n", fmt::join(ids, " "));
    return kExitOk;
  }
  size_t width = 2;
  for (int32_t id : ids) width = std::max(width, std::to_string(id).size());
  fmt::print("{:>5}  {:>{}}  {}\n", "#", "id", width, "piece");
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string shown = json(pieces[i]).dump(-1, ' ', false, json::error_handler_t::replace);
    fmt::print("{:>5}  {:>{}}  {}\n", i, ids[i], width, shown);
  }
  fmt::print("{} tokens\n", ids.size());
  return kExitOk;
}

const Registrar kTokenizeCommand{
    "tokenize", "Text to token ids and back with the model's tokenizer and chat template", 80,
    [](CLI::App& app) -> CommandRunner {
      auto o = std::make_shared<TokenizeOptions>();
      app.add_option("MODEL", o->model, "Model folder (or a folder with only tokenizer files)")->required();
      app.add_option("TEXT", o->text, "Text to encode");
      app.add_option("--file", o->file, "Read the text to encode from this file");
      app.add_option("--decode", o->decode, "Comma-separated ids to decode back to text, e.g. 1,2,3");
      app.add_option("--chat", o->chat,
                     "JSON file with messages (list, or {\"messages\", \"tools\", ...}) to render "
                     "with the chat template, then encode");
      app.add_option("--template", o->template_file,
                     "Jinja chat template file to use instead of the model's");
      app.add_flag("--pieces", o->pieces, "Also print the vocabulary piece of every id");
      app.add_flag("--json", o->as_json,
                   "Print {\"ids\": [...], \"pieces\": [...]} (plus \"text\" with --chat; {\"text\": ...} "
                   "with --decode)");
      app.add_flag("--no-add-special", o->no_add_special,
                   "Do not add BOS/EOS the way the model's post-processor does");
      app.add_flag("--skip-special", o->skip_special, "With --decode: leave special tokens out of the text");
      app.add_flag("--split-special", o->split_special,
                   "Treat special tokens written in the text as plain text");
      app.add_flag("--no-generation-prompt", o->no_generation_prompt,
                   "With --chat: do not open an assistant turn");
      app.callback([&app, o] {
        const int sources = !o->text.empty() + !o->file.empty() + !o->decode.empty() + !o->chat.empty();
        if (sources > 1) throw CLI::ValidationError("give only one of TEXT, --file, --decode, --chat");
        // An explicit "" encodes the empty text (BOS alone where the model adds one); no input at all
        // is a mistake, not an empty answer.
        if (sources == 0 && app.get_option("TEXT")->count() == 0)
          throw CLI::ValidationError("nothing to tokenize: give TEXT, --file, --decode or --chat");
      });
      return [o] { return run_tokenize(*o); };
    }};

}  // namespace
}  // namespace day0::cli
