// Builds a Tokenizer from a tiktoken rank file ("base64(token) rank" per line): ranks are ids, and a
// pair merges when the concatenation is itself a token, the lower rank first.
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

bool base64_decode(std::string_view in, std::string& out) {
  out.clear();
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    int v = 0;
    if (c >= 'A' && c <= 'Z') {
      v = c - 'A';
    } else if (c >= 'a' && c <= 'z') {
      v = c - 'a' + 26;
    } else if (c >= '0' && c <= '9') {
      v = c - '0' + 52;
    } else if (c == '+') {
      v = 62;
    } else if (c == '/') {
      v = 63;
    } else if (c == '=') {
      break;
    } else {
      return false;
    }
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return true;
}

constexpr const char* kO200kPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kCl100kPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

}  // namespace

Result<TiktokenSpec> builtin_tiktoken_spec(std::string_view name) {
  TiktokenSpec spec;
  if (name == "cl100k_base") {
    spec.pattern = kCl100kPattern;
    spec.special_tokens = {{"<|endoftext|>", 100257},
                           {"<|fim_prefix|>", 100258},
                           {"<|fim_middle|>", 100259},
                           {"<|fim_suffix|>", 100260},
                           {"<|endofprompt|>", 100276}};
    spec.eos = "<|endoftext|>";
    return spec;
  }
  if (name == "o200k_base") {
    spec.pattern = kO200kPattern;
    spec.special_tokens = {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}};
    spec.eos = "<|endoftext|>";
    return spec;
  }
  if (name == "o200k_harmony") {
    spec.pattern = kO200kPattern;
    const std::pair<const char*, int32_t> named[] = {
        {"<|startoftext|>", 199998}, {"<|endoftext|>", 199999}, {"<|return|>", 200002},
        {"<|constrain|>", 200003},   {"<|channel|>", 200005},   {"<|start|>", 200006},
        {"<|end|>", 200007},         {"<|message|>", 200008},   {"<|call|>", 200012},
        {"<|endofprompt|>", 200018}};
    for (int32_t id = 199998; id <= 201087; ++id) {
      std::string token = fmt::format("<|reserved_{}|>", id);
      for (const auto& [text, nid] : named) {
        if (nid == id) token = text;
      }
      spec.special_tokens.emplace_back(std::move(token), id);
    }
    spec.bos = "<|startoftext|>";
    spec.eos = "<|return|>";
    spec.pad = "<|endoftext|>";
    return spec;
  }
  return not_found(fmt::format("no built-in tiktoken encoding named {:?}", std::string(name)));
}

Result<TiktokenSpec> read_tiktoken_spec(const std::filesystem::path& file) {
  const std::string where = file.string();
  D0_ASSIGN_OR_RETURN(std::string text, read_text_file(file));
  D0_ASSIGN_OR_RETURN(const json j, parse_json_text(text, where, kTokenizerJsonLimits));
  TiktokenSpec spec;
  try {
    spec.pattern = j.at("pat_str").get<std::string>();
    std::map<int32_t, std::string> specials;
    const json named = j.value("special_tokens", json::object());
    for (const auto& [id, name] : named.items()) {
      specials[std::stoi(id)] = name.get<std::string>();
    }
    if (j.contains("special_token_id_range")) {
      const auto range = j["special_token_id_range"].get<std::vector<int32_t>>();
      if (range.size() != 2 || range[0] > range[1] || range[1] - range[0] > 1'000'000) {
        return parse_error(fmt::format("{}: special_token_id_range must be [first, last]", where));
      }
      const std::string fmt_str =
          j.value("reserved_token_name_format", std::string("<|reserved_token_{id}|>"));
      for (int32_t id = range[0]; id <= range[1]; ++id) {
        if (specials.count(id) == 0) specials[id] = fmt::format(fmt::runtime(fmt_str), fmt::arg("id", id));
      }
    }
    for (const auto& [id, name] : specials) spec.special_tokens.emplace_back(name, id);
    if (j.contains("encode_semantics")) {
      const json& e = j["encode_semantics"];
      spec.max_chunk_chars = e.value("max_encode_chars_per_chunk", size_t{0});
      spec.max_run_chars = e.value("max_consecutive_whitespace_or_nonwhitespace_chars", size_t{0});
    }
    spec.bos = j.value("bos_token", std::string());
    spec.eos = j.value("eos_token", std::string());
    spec.pad = j.value("pad_token", std::string());
    spec.unk = j.value("unk_token", std::string());
  } catch (const std::exception& e) {
    return parse_error(fmt::format("{}: {}", where, e.what()));
  }
  return spec;
}

Result<TokenizerParts> load_tiktoken(const std::filesystem::path& rank_file, const TiktokenSpec& spec) {
  const std::string where = rank_file.string();
  D0_ASSIGN_OR_RETURN(std::string text, read_text_file(rank_file));
  TokenizerParts parts;
  parts.source = where;
  parts.kind = "tiktoken";
  BpeOptions opt;
  opt.byte_level = true;
  opt.ignore_merges = true;  // tiktoken emits a piece that is itself a token directly
  parts.model = BpeModel(opt);
  std::vector<std::string> bytes_of;  // rank -> raw bytes
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> rank_of;
  size_t pos = 0, line_no = 0;
  std::string token;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || !base64_decode(line.substr(0, space), token)) {
      return parse_error(fmt::format("{}:{}: expected \"base64 rank\"", where, line_no));
    }
    int64_t rank = 0;
    for (char c : line.substr(space + 1)) {
      if (c < '0' || c > '9' || rank > 16'000'000)
        return parse_error(fmt::format("{}:{}: bad rank", where, line_no));
      rank = rank * 10 + (c - '0');
    }
    if (static_cast<size_t>(rank) >= bytes_of.size()) bytes_of.resize(static_cast<size_t>(rank) + 1);
    bytes_of[static_cast<size_t>(rank)] = token;
    rank_of[token] = static_cast<int32_t>(rank);
  }
  if (bytes_of.empty()) return parse_error(fmt::format("{}: no ranks", where));
  parts.id_to_token.resize(bytes_of.size());
  for (size_t id = 0; id < bytes_of.size(); ++id) {
    if (bytes_of[id].empty()) continue;
    parts.id_to_token[id] = bytes_to_byte_level(bytes_of[id]);
    parts.model.add_token(bytes_of[id], static_cast<int32_t>(id));
  }
  // Every split of a token into two tokens is a merge ranked by the token itself.
  for (size_t id = 0; id < bytes_of.size(); ++id) {
    const std::string_view t = bytes_of[id];
    for (size_t cut = 1; cut < t.size(); ++cut) {
      auto l = rank_of.find(t.substr(0, cut));
      if (l == rank_of.end()) continue;
      auto r = rank_of.find(t.substr(cut));
      if (r == rank_of.end()) continue;
      parts.model.add_merge(l->second, r->second, static_cast<int32_t>(id), static_cast<uint32_t>(id));
    }
  }
  parts.model.finalize();
  D0_ASSIGN_OR_RETURN(Regex regex, Regex::compile(spec.pattern));
  std::vector<std::unique_ptr<PreTokenizer>> stages;
  if (spec.max_chunk_chars > 0 && spec.max_run_chars > 0) {
    stages.push_back(make_chunking_pre_tokenizer(spec.max_chunk_chars, spec.max_run_chars));
  }
  stages.push_back(make_regex_match_pre_tokenizer(std::move(regex)));
  parts.pre_tokenizer = make_sequence_pre_tokenizer(std::move(stages));
  parts.decoder = make_byte_level_decoder();
  for (const auto& [content, id] : spec.special_tokens) {
    AddedToken t;
    t.content = content;
    t.id = id;
    t.special = true;  // tiktoken matches all of them with allowed_special="all", none when ordinary
    parts.added.add(std::move(t));
  }
  parts.added.build(nullptr);
  parts.special.bos = spec.bos;
  parts.special.eos = spec.eos;
  parts.special.pad = spec.pad;
  parts.special.unk = spec.unk;
  return parts;
}

}  // namespace day0::tokenizer
