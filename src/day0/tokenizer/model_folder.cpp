// Finds the tokenizer in a model folder and adds what tokenizer_config.json and generation_config.json
// say: BOS/EOS/pad, add_bos_token/add_eos_token, chat templates.
#include <fmt/format.h>
#include <algorithm>
#include <nlohmann/json.hpp>

#include "day0/core/json_reader.h"
#include "day0/io/gguf_convert.h"
#include "day0/tokenizer/file_io.h"
#include "day0/tokenizer/tokenizer.h"

namespace day0::tokenizer {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// A special token in tokenizer_config.json is a string, an {"content": ...} object or null.
std::string token_text(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string())
    return j["content"].get<std::string>();
  return {};
}

Result<json> read_json(const fs::path& file) {
  D0_ASSIGN_OR_RETURN(std::string text, read_text_file(file));
  return parse_json_text(text, file.string(), kTokenizerJsonLimits);
}

Status apply_configs(const fs::path& dir, TokenizerParts& parts) {
  json config = json::object();
  if (fs::exists(dir / "tokenizer_config.json")) {
    D0_ASSIGN_OR_RETURN(config, read_json(dir / "tokenizer_config.json"));
    if (!config.is_object())
      return parse_error(fmt::format("{}: not an object", (dir / "tokenizer_config.json").string()));
  }
  SpecialTokens& sp = parts.special;
  if (config.contains("bos_token")) sp.bos = token_text(config["bos_token"]);
  if (config.contains("eos_token")) sp.eos = token_text(config["eos_token"]);
  if (config.contains("pad_token")) sp.pad = token_text(config["pad_token"]);
  if (config.contains("unk_token")) sp.unk = token_text(config["unk_token"]);
  // Chat templates: chat_template.jinja beside the config wins over the config's own entry.
  if (fs::exists(dir / "chat_template.jinja")) {
    D0_ASSIGN_OR_RETURN(std::string t, read_text_file(dir / "chat_template.jinja"));
    parts.chat_templates.emplace_back("default", std::move(t));
  }
  if (config.contains("chat_template")) {
    const json& ct = config["chat_template"];
    if (ct.is_string()) {
      parts.chat_templates.emplace_back("default", ct.get<std::string>());
    } else if (ct.is_array()) {
      for (const json& e : ct) {
        if (e.is_object() && e.contains("name") && e.contains("template")) {
          parts.chat_templates.emplace_back(e["name"].get<std::string>(), e["template"].get<std::string>());
        }
      }
    }
  }
  // LlamaTokenizer(Fast) rebuilds the post-processor from add_bos_token / add_eos_token.
  const std::string cls = config.value("tokenizer_class", std::string());
  const bool llama_like = cls.rfind("LlamaTokenizer", 0) == 0 || cls.rfind("CodeLlamaTokenizer", 0) == 0 ||
                          cls.rfind("GemmaTokenizer", 0) == 0;
  const bool has_flags = config.contains("add_bos_token") || config.contains("add_eos_token");
  auto id_of = [&](const std::string& token) -> std::optional<int32_t> {
    if (token.empty()) return std::nullopt;
    if (const AddedToken* t = parts.added.by_content(token)) return t->id;
    for (size_t i = 0; i < parts.id_to_token.size(); ++i) {
      if (parts.id_to_token[i] == token) return static_cast<int32_t>(i);
    }
    return std::nullopt;
  };
  sp.bos_id = id_of(sp.bos);
  sp.eos_id = id_of(sp.eos);
  sp.pad_id = id_of(sp.pad);
  sp.unk_id = id_of(sp.unk);
  if ((llama_like && has_flags) || parts.kind == "tiktoken") {
    const bool add_bos = config.value("add_bos_token", false) && config["add_bos_token"].is_boolean();
    const bool add_eos = config.value("add_eos_token", false) && config["add_eos_token"].is_boolean();
    std::vector<int32_t> prefix, suffix;
    if (add_bos && sp.bos_id) prefix.push_back(*sp.bos_id);
    if (add_eos && sp.eos_id) suffix.push_back(*sp.eos_id);
    parts.post_processor = make_bos_eos_processor(std::move(prefix), std::move(suffix));
  }
  if (parts.post_processor) {
    const std::vector<int32_t> probe = parts.post_processor->process({});
    sp.add_bos = !probe.empty() && sp.bos_id && probe.front() == *sp.bos_id;
    sp.add_eos = !probe.empty() && sp.eos_id && probe.back() == *sp.eos_id;
  }
  if (sp.eos_id) sp.stop_ids.push_back(*sp.eos_id);
  if (fs::exists(dir / "generation_config.json")) {
    D0_ASSIGN_OR_RETURN(json gen, read_json(dir / "generation_config.json"));
    if (gen.is_object() && gen.contains("eos_token_id")) {
      const json& e = gen["eos_token_id"];
      std::vector<int32_t> ids;
      if (e.is_number_integer()) ids.push_back(e.get<int32_t>());
      if (e.is_array()) {
        for (const json& x : e) {
          if (x.is_number_integer()) ids.push_back(x.get<int32_t>());
        }
      }
      for (int32_t id : ids) {
        if (std::find(sp.stop_ids.begin(), sp.stop_ids.end(), id) == sp.stop_ids.end())
          sp.stop_ids.push_back(id);
      }
    }
  }
  return Status::ok();
}

// Picks a tiktoken spec for a rank file: a tokenizer_spec.json beside it, else a known file name.
Result<TiktokenSpec> spec_for(const fs::path& dir, const fs::path& rank_file) {
  if (fs::exists(dir / "tokenizer_spec.json")) return read_tiktoken_spec(dir / "tokenizer_spec.json");
  const std::string stem = rank_file.stem().string();
  if (stem == "o200k_base") {
    // Model folders (with a tokenizer_config.json) ship o200k_base.tiktoken but speak harmony.
    return builtin_tiktoken_spec(fs::exists(dir / "tokenizer_config.json") ? "o200k_harmony" : "o200k_base");
  }
  if (stem == "cl100k_base") return builtin_tiktoken_spec("cl100k_base");
  return not_found(
      fmt::format("{}: a tiktoken rank file needs its split pattern and special tokens: put a "
                  "tokenizer_spec.json (pat_str, special_tokens) beside it",
                  rank_file.string()));
}

}  // namespace

Result<std::shared_ptr<const Tokenizer>> load_tokenizer(const fs::path& model_path) {
  fs::path dir = model_path;
  // A .gguf file: its tokenizer as rebuilt in the converted folder (io/gguf_convert.h).
  if (gguf::is_gguf_file(model_path.string())) {
    D0_ASSIGN_OR_RETURN(std::string folder, gguf::gguf_cached_hf_folder(model_path.string()));
    dir = folder;
  }
  if (!fs::is_directory(dir)) return not_found(fmt::format("{}: not a folder", dir.string()));
  TokenizerParts parts;
  if (fs::exists(dir / "tokenizer.json")) {
    D0_ASSIGN_OR_RETURN(parts, load_tokenizer_json(dir / "tokenizer.json"));
  } else if (fs::exists(dir / "tokenizer.json.gz")) {
    D0_ASSIGN_OR_RETURN(parts, load_tokenizer_json(dir / "tokenizer.json.gz"));
  } else {
    fs::path rank_file;
    for (const char* name : {"tiktoken.model", "tokenizer.tiktoken"}) {
      if (fs::exists(dir / name)) rank_file = dir / name;
    }
    if (rank_file.empty()) {
      std::vector<fs::path> found;
      for (const auto& e : fs::directory_iterator(dir)) {
        if (e.path().extension() == ".tiktoken") found.push_back(e.path());
      }
      std::sort(found.begin(), found.end());
      if (!found.empty()) rank_file = found.front();
    }
    if (rank_file.empty()) {
      return not_found(fmt::format("{}: no tokenizer.json, tokenizer.json.gz, tiktoken.model or *.tiktoken",
                                   dir.string()));
    }
    D0_ASSIGN_OR_RETURN(TiktokenSpec spec, spec_for(dir, rank_file));
    D0_ASSIGN_OR_RETURN(parts, load_tiktoken(rank_file, spec));
  }
  D0_RETURN_IF_ERROR(apply_configs(dir, parts));
  return std::shared_ptr<const Tokenizer>(std::make_shared<Tokenizer>(std::move(parts)));
}

}  // namespace day0::tokenizer
