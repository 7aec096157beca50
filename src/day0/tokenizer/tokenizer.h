#pragma once
// Text <-> token ids for a model folder: Hugging Face tokenizer.json (also gzipped) or a tiktoken rank
// file, plus the special tokens and chat template of tokenizer_config.json / generation_config.json.
//
//   D0_ASSIGN_OR_RETURN(auto tok, load_tokenizer("models/my-model"));
//   std::vector<int32_t> ids = tok->encode("Hello", {.add_special_tokens = true});
//   std::string text = tok->decode(ids);
//
// Invalid UTF-8 input is first repaired the way Python's bytes.decode("utf-8", "replace") does (each
// maximal invalid subsequence becomes U+FFFD), since the reference libraries only accept valid text.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "day0/core/status.h"
#include "day0/tokenizer/added_tokens.h"
#include "day0/tokenizer/bpe_model.h"
#include "day0/tokenizer/pipeline.h"

namespace day0::tokenizer {

struct EncodeOptions {
  bool add_special_tokens = false;    // run the post-processor (BOS/EOS as the model folder says)
  bool split_special_tokens = false;  // treat special tokens in the text as plain text
};

struct SpecialTokens {
  std::string bos, eos, pad, unk;  // token strings ("" when the model has none)
  std::optional<int32_t> bos_id, eos_id, pad_id, unk_id;
  std::vector<int32_t> stop_ids;  // eos plus generation_config.json's eos_token_id list
  bool add_bos = false;           // encode(add_special_tokens=true) prepends BOS
  bool add_eos = false;
};

// Everything a tokenizer is made of; the loaders fill it.
struct TokenizerParts {
  std::string source;  // the file it came from, for messages
  std::string kind;    // "tokenizer.json" or "tiktoken"
  BpeModel model;
  std::vector<std::string> id_to_token;  // vocab strings (byte-level characters for byte-level models)
  AddedVocabulary added;
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<PostProcessor> post_processor;
  std::unique_ptr<Decoder> decoder;
  SpecialTokens special;
  std::vector<std::pair<std::string, std::string>> chat_templates;  // (name, source); "default" first
};

class Tokenizer {
 public:
  explicit Tokenizer(TokenizerParts parts);

  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options = {}) const;
  // Unknown ids are skipped; invalid UTF-8 produced by partial byte tokens becomes U+FFFD.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  // The vocabulary string of an id (added tokens included).
  std::optional<std::string> id_to_piece(int32_t id) const;
  std::optional<int32_t> piece_to_id(std::string_view piece) const;
  // One past the largest id.
  size_t vocab_size() const { return vocab_size_; }
  bool is_special(int32_t id) const;

  const SpecialTokens& special_tokens() const { return parts_.special; }
  const std::string& source() const { return parts_.source; }
  const std::string& kind() const { return parts_.kind; }
  // The named chat template ("default" when the folder ships one unnamed); nullopt when absent.
  std::optional<std::string> chat_template(std::string_view name = "default") const;
  const std::vector<std::pair<std::string, std::string>>& chat_templates() const {
    return parts_.chat_templates;
  }

 private:
  TokenizerParts parts_;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> token_to_id_;
  size_t vocab_size_ = 0;
};

// Loads tokenizer.json(.gz) or a tiktoken file from a model folder, with its configs. A .gguf file
// stands for the folder it converts to (io/gguf_convert.h: converted once into a cache folder).
Result<std::shared_ptr<const Tokenizer>> load_tokenizer(const std::filesystem::path& model_path);

// Loads one tokenizer.json (or .json.gz) file; configs beside it are read too.
Result<TokenizerParts> load_tokenizer_json(const std::filesystem::path& file);
// The same from the file's text; `where` names it in messages (a file, a request, a fuzz input).
Result<TokenizerParts> parse_tokenizer_json(std::string_view text, const std::string& where);

// How to use a tiktoken rank file: its split regex, special tokens and chunking.
struct TiktokenSpec {
  std::string pattern;
  std::vector<std::pair<std::string, int32_t>> special_tokens;
  size_t max_chunk_chars = 0;  // 0: no chunking (e.g. 400000, with max_run_chars 25000)
  size_t max_run_chars = 0;
  std::string bos, eos, pad, unk;
};

// The built-in encodings a bare *.tiktoken file can stand for: "o200k_base", "o200k_harmony", "cl100k_base".
Result<TiktokenSpec> builtin_tiktoken_spec(std::string_view name);
// Reads a tokenizer_spec.json (pat_str, special_tokens, reserved range, chunking).
Result<TiktokenSpec> read_tiktoken_spec(const std::filesystem::path& file);
Result<TokenizerParts> load_tiktoken(const std::filesystem::path& rank_file, const TiktokenSpec& spec);

}  // namespace day0::tokenizer
