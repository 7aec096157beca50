// Builds a Tokenizer from a Hugging Face tokenizer.json: a BPE model plus its pipeline stages.
#include <fmt/format.h>
#include <algorithm>
#include <nlohmann/json.hpp>

#include "day0/core/json_reader.h"
#include "day0/tokenizer/byte_level.h"
#include "day0/tokenizer/file_io.h"
#include "day0/tokenizer/tokenizer.h"

namespace day0::tokenizer {
namespace {

using json = nlohmann::json;

bool empty_or_null(const json& j, const char* key) {
  return !j.contains(key) || j[key].is_null() || (j[key].is_string() && j[key].get<std::string>().empty());
}

Status load_bpe(const json& model, bool byte_level, const std::string& where, TokenizerParts& parts) {
  const std::string type = model.value("type", std::string("BPE"));
  if (type != "BPE")
    return unsupported(fmt::format("{}: model type \"{}\" is not supported (only BPE)", where, type));
  if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"].get<double>() != 0.0) {
    return unsupported(fmt::format("{}: BPE dropout is not supported", where));
  }
  if (!empty_or_null(model, "continuing_subword_prefix") || !empty_or_null(model, "end_of_word_suffix")) {
    return unsupported(
        fmt::format("{}: BPE continuing_subword_prefix/end_of_word_suffix are not supported", where));
  }
  const json& vocab = model.at("vocab");
  if (!vocab.is_object()) return parse_error(fmt::format("{}: model.vocab must be an object", where));
  BpeOptions opt;
  opt.byte_level = byte_level;
  opt.ignore_merges = model.value("ignore_merges", false);
  opt.byte_fallback = model.value("byte_fallback", false);
  opt.fuse_unk = model.value("fuse_unk", false);
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> token_ids;
  token_ids.reserve(vocab.size());
  int64_t max_id = -1;
  for (const auto& [token, id_json] : vocab.items()) {
    if (!id_json.is_number_integer())
      return parse_error(fmt::format("{}: vocab[{:?}] is not an integer", where, token));
    const int64_t id = id_json.get<int64_t>();
    if (id < 0 || id > INT32_MAX - 1)
      return out_of_range(fmt::format("{}: vocab[{:?}] = {} is out of range", where, token, id));
    token_ids.emplace(token, static_cast<int32_t>(id));
    max_id = std::max(max_id, id);
  }
  if (max_id >= 16'000'000)
    return out_of_range(fmt::format("{}: vocab id {} is implausibly large", where, max_id));
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    auto it = token_ids.find(model["unk_token"].get<std::string>());
    if (it == token_ids.end()) {
      return parse_error(fmt::format("{}: unk_token {:?} is not in the vocabulary", where,
                                     model["unk_token"].get<std::string>()));
    }
    opt.unk_id = it->second;
  }
  parts.model = BpeModel(opt);
  parts.id_to_token.assign(static_cast<size_t>(max_id + 1), std::string());
  for (const auto& [token, id] : token_ids) {
    parts.id_to_token[static_cast<size_t>(id)] = token;
    if (byte_level) {
      if (auto raw = byte_level_to_bytes(token)) parts.model.add_token(std::move(*raw), id);
    } else {
      parts.model.add_token(token, id);
    }
  }
  const json& merges = model.contains("merges") ? model["merges"] : json::array();
  uint32_t rank = 0;
  std::string left, right;
  for (const json& m : merges) {
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ', 1);
      if (space == std::string::npos)
        return parse_error(fmt::format("{}: merge {:?} has no space", where, s));
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      return parse_error(fmt::format("{}: merge #{} is neither \"a b\" nor [a, b]", where, rank));
    }
    auto l = token_ids.find(left), r = token_ids.find(right), merged = token_ids.find(left + right);
    if (l == token_ids.end() || r == token_ids.end() || merged == token_ids.end()) {
      return parse_error(fmt::format("{}: merge #{} ({:?} + {:?}) uses a token missing from the vocabulary",
                                     where, rank, left, right));
    }
    parts.model.add_merge(l->second, r->second, merged->second, rank++);
  }
  parts.model.finalize();
  return Status::ok();
}

}  // namespace

Result<TokenizerParts> load_tokenizer_json(const std::filesystem::path& file) {
  D0_ASSIGN_OR_RETURN(std::string text, read_text_file(file));
  return parse_tokenizer_json(text, file.string());
}

Result<TokenizerParts> parse_tokenizer_json(std::string_view text, const std::string& where) {
  D0_ASSIGN_OR_RETURN(json j, parse_json_text(text, where, kTokenizerJsonLimits));
  if (!j.is_object() || !j.contains("model"))
    return parse_error(fmt::format("{}: no \"model\" object", where));
  TokenizerParts parts;
  parts.source = where;
  parts.kind = "tokenizer.json";
  try {
    D0_ASSIGN_OR_RETURN(parts.normalizer, make_normalizer(j.value("normalizer", json()), where));
    D0_ASSIGN_OR_RETURN(parts.pre_tokenizer, make_pre_tokenizer(j.value("pre_tokenizer", json()), where));
    D0_ASSIGN_OR_RETURN(parts.post_processor, make_post_processor(j.value("post_processor", json()), where));
    D0_ASSIGN_OR_RETURN(parts.decoder, make_decoder(j.value("decoder", json()), where));
    const bool byte_level = parts.pre_tokenizer && parts.pre_tokenizer->is_byte_level();
    D0_RETURN_IF_ERROR(load_bpe(j["model"], byte_level, where, parts));
    for (const json& t : j.value("added_tokens", json::array())) {
      AddedToken tok;
      tok.content = t.at("content").get<std::string>();
      // An id too large for int64 parses as a float, whose conversion would be undefined.
      if (!t.at("id").is_number_integer())
        return parse_error(fmt::format("{}: added token {:?}: id is not an integer", where, tok.content));
      const int64_t id = t.at("id").get<int64_t>();
      if (id < 0 || id >= 16'000'000)
        return out_of_range(fmt::format("{}: added token id {} is out of range", where, id));
      tok.id = static_cast<int32_t>(id);
      tok.special = t.value("special", false);
      tok.lstrip = t.value("lstrip", false);
      tok.rstrip = t.value("rstrip", false);
      tok.normalized = t.value("normalized", !tok.special);
      tok.single_word = t.value("single_word", false);
      parts.added.add(std::move(tok));
    }
  } catch (const json::exception& e) {
    return parse_error(fmt::format("{}: {}", where, e.what()));
  }
  parts.added.build(parts.normalizer.get());
  return parts;
}

}  // namespace day0::tokenizer
