// The tokenizer of a GGUF file (tokenizer.ggml.*) rebuilt as a Hugging Face tokenizer.json plus
// tokenizer_config.json. Only byte-level BPE ("gpt2" in GGUF) is rebuilt; tokenizer.ggml.pre names the
// pre-tokenizer, mapped here to the split rules the original tokenizer.json of that family carries.
#include <fmt/format.h>

#include "day0/io/gguf_convert_internal.h"

namespace day0::gguf {
namespace {

using ojson = nlohmann::ordered_json;

// ggml token types.
constexpr int64_t kTokenNormal = 1;
constexpr int64_t kTokenControl = 3;
constexpr int64_t kTokenUserDefined = 4;

ojson byte_level(bool add_prefix_space, bool trim_offsets, bool use_regex) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", add_prefix_space},
          {"trim_offsets", trim_offsets},
          {"use_regex", use_regex}};
}

ojson split_isolated(const std::string& regex) {
  return {{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}};
}

ojson sequence(std::vector<ojson> parts) {
  return {{"type", "Sequence"}, {"pretokenizers", std::move(parts)}};
}

// The split patterns of the published tokenizer.json files, named by the tokenizer.ggml.pre value
// that selects them.
const char* const kLlama3Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kQwen2Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

struct PreTokenizerRule {
  ojson pre_tokenizer;
  bool ignore_merges = false;
};

Result<PreTokenizerRule> pre_tokenizer_for(const std::string& pre, const std::string& file) {
  // "smollm": digits one by one, then GPT-2 byte-level splitting (SmolLM / SmolLM2, StarCoder-style).
  if (pre == "smollm" || pre == "starcoder" || pre == "refact") {
    return PreTokenizerRule{
        sequence({{{"type", "Digits"}, {"individual_digits", true}}, byte_level(false, true, true)}), false};
  }
  if (pre == "gpt-2" || pre == "gpt2" || pre == "default")
    return PreTokenizerRule{byte_level(false, true, true), false};
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") {
    return PreTokenizerRule{sequence({split_isolated(kLlama3Pattern), byte_level(false, true, false)}), true};
  }
  if (pre == "qwen2") {
    return PreTokenizerRule{sequence({split_isolated(kQwen2Pattern), byte_level(false, false, false)}),
                            false};
  }
  return unsupported(
      fmt::format("{}: tokenizer.ggml.pre \"{}\" is not known (known: smollm, starcoder, refact, gpt-2, "
                  "default, llama-bpe, "
                  "qwen2); add its split rules to io/gguf_tokenizer.cpp",
                  file, pre));
}

Result<const Value*> string_array(const GgufFile& f, std::string_view key) {
  const Value* v = f.find(key);
  if (v == nullptr) return not_found(fmt::format("{}: metadata {} is missing", f.name(), key));
  if (v->type != ValueType::kArray || v->elem_type != ValueType::kString) {
    return invalid_argument(fmt::format("{}: {}: expected an array of strings", f.name(), key));
  }
  return v;
}

std::optional<int64_t> token_id(const GgufFile& f, std::string_view key, size_t n_tokens) {
  auto id = f.optional_int(key);
  if (!id || *id < 0 || static_cast<size_t>(*id) >= n_tokens) return std::nullopt;
  return id;
}

}  // namespace

Status build_hf_tokenizer(const GgufFile& f, HfConversion& out) {
  D0_ASSIGN_OR_RETURN(std::string model, f.get_string("tokenizer.ggml.model"));
  if (model != "gpt2") {
    return unsupported(fmt::format(
        "{}: tokenizer.ggml.model \"{}\": only byte-level BPE (\"gpt2\") tokenizers can be rebuilt yet",
        f.name(), model));
  }
  std::string pre = "default";
  if (f.find("tokenizer.ggml.pre")) {
    D0_ASSIGN_OR_RETURN(pre, f.get_string("tokenizer.ggml.pre"));
  }
  D0_ASSIGN_OR_RETURN(PreTokenizerRule rule, pre_tokenizer_for(pre, f.name()));
  D0_ASSIGN_OR_RETURN(const Value* tokens, string_array(f, "tokenizer.ggml.tokens"));
  D0_ASSIGN_OR_RETURN(const Value* merges, string_array(f, "tokenizer.ggml.merges"));
  const Value* types = f.find("tokenizer.ggml.token_type");
  if (types != nullptr) {
    const bool integer_elems = types->type == ValueType::kArray &&
                               (types->elem_type == ValueType::kI32 || types->elem_type == ValueType::kU32);
    if (!integer_elems || types->count != tokens->count) {
      return invalid_argument(
          fmt::format("{}: tokenizer.ggml.token_type: expected {} int32 values (one per token)", f.name(),
                      tokens->count));
    }
  }
  const size_t n_tokens = tokens->strings.size();
  ojson vocab = ojson::object();
  ojson added = ojson::array();
  for (size_t i = 0; i < n_tokens; ++i) {
    const std::string piece(tokens->strings[i]);
    if (vocab.contains(piece)) {
      return invalid_argument(
          fmt::format("{}: tokenizer.ggml.tokens[{}] {:?} repeats an earlier token", f.name(), i, piece));
    }
    vocab[piece] = i;
    const int64_t type = types ? types->int_at(i) : kTokenNormal;
    if (type == kTokenControl || type == kTokenUserDefined) {
      added.push_back({{"id", i},
                       {"content", piece},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", type == kTokenControl}});
    }
  }
  ojson merge_list = ojson::array();
  for (std::string_view m : merges->strings) merge_list.push_back(std::string(m));

  const bool add_bos = f.optional_bool("tokenizer.ggml.add_bos_token").value_or(false);
  const bool add_eos = f.optional_bool("tokenizer.ggml.add_eos_token").value_or(false);
  const auto bos = token_id(f, "tokenizer.ggml.bos_token_id", n_tokens);
  const auto eos = token_id(f, "tokenizer.ggml.eos_token_id", n_tokens);
  const auto eot = token_id(f, "tokenizer.ggml.eot_token_id", n_tokens);
  const auto pad = token_id(f, "tokenizer.ggml.padding_token_id", n_tokens);
  const auto unk = token_id(f, "tokenizer.ggml.unknown_token_id", n_tokens);
  auto piece_of = [&](std::optional<int64_t> id) -> ojson {
    if (!id) return nullptr;
    return std::string(tokens->strings[static_cast<size_t>(*id)]);
  };
  if ((add_bos && !bos) || (add_eos && !eos)) {
    return invalid_argument(
        fmt::format("{}: the tokenizer adds BOS/EOS but names no valid token id for it", f.name()));
  }

  ojson post = byte_level(false, false, true);
  if (add_bos || add_eos) {
    ojson single = ojson::array();
    ojson pair = ojson::array();
    ojson specials = ojson::object();
    auto special = [&](int64_t id) {
      const std::string p(tokens->strings[static_cast<size_t>(id)]);
      specials[p] = {{"id", p}, {"ids", {id}}, {"tokens", {p}}};
      return ojson{{"SpecialToken", {{"id", p}, {"type_id", 0}}}};
    };
    if (add_bos) single.push_back(special(*bos));
    single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
    if (add_eos) single.push_back(special(*eos));
    pair = single;
    pair.push_back({{"Sequence", {{"id", "B"}, {"type_id", 1}}}});
    post = {{"type", "Sequence"},
            {"processors",
             {byte_level(false, false, true),
              {{"type", "TemplateProcessing"},
               {"single", single},
               {"pair", pair},
               {"special_tokens", specials}}}}};
  }

  out.tokenizer = {{"version", "1.0"},
                   {"truncation", nullptr},
                   {"padding", nullptr},
                   {"added_tokens", std::move(added)},
                   {"normalizer", nullptr},
                   {"pre_tokenizer", rule.pre_tokenizer},
                   {"post_processor", post},
                   {"decoder", byte_level(true, true, true)},
                   {"model",
                    {{"type", "BPE"},
                     {"dropout", nullptr},
                     {"unk_token", nullptr},
                     {"continuing_subword_prefix", nullptr},
                     {"end_of_word_suffix", nullptr},
                     {"fuse_unk", false},
                     {"byte_fallback", false},
                     {"ignore_merges", rule.ignore_merges},
                     {"vocab", std::move(vocab)},
                     {"merges", std::move(merge_list)}}}};

  out.tokenizer_config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                          {"bos_token", piece_of(bos)},
                          {"eos_token", piece_of(eos)},
                          {"pad_token", piece_of(pad)},
                          {"unk_token", piece_of(unk)},
                          {"add_bos_token", add_bos},
                          {"add_eos_token", add_eos},
                          {"clean_up_tokenization_spaces", false}};
  if (const Value* ct = f.find("tokenizer.chat_template")) {
    if (ct->type != ValueType::kString) {
      return invalid_argument(fmt::format("{}: tokenizer.chat_template: expected a string", f.name()));
    }
    out.tokenizer_config["chat_template"] = std::string(ct->str);
  }
  out.generation_config = {{"_from_model_config", true}};
  if (bos) out.generation_config["bos_token_id"] = *bos;
  if (eos) {
    if (eot && *eot != *eos) {
      out.generation_config["eos_token_id"] = {*eos, *eot};
    } else {
      out.generation_config["eos_token_id"] = *eos;
    }
  }
  if (pad) out.generation_config["pad_token_id"] = *pad;
  return Status::ok();
}

}  // namespace day0::gguf
