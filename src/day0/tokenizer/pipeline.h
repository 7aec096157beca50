#pragma once
// The stages of a Hugging Face tokenizer.json pipeline: normalizer -> pre-tokenizer -> model ->
// post-processor, and the decoder going back. Each factory reads one JSON component and names the
// component and the file when it meets something it does not implement.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "day0/core/status.h"
#include "day0/tokenizer/regex.h"

namespace day0::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string normalize(std::string_view text) const = 0;
};

// A piece of text on its way to the model. `at_origin`: it starts at offset 0 of the input
// (Metaspace's prepend_scheme "first" depends on it).
struct Piece {
  std::string text;
  bool at_origin = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` with their finer split.
  virtual void split(std::vector<Piece>& pieces) const = 0;
  // True for a ByteLevel stage: the model then sees raw bytes.
  virtual bool is_byte_level() const { return false; }
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Rewrites the token strings (a decoder chain may join them).
  virtual void decode(std::vector<std::string>& tokens) const = 0;
};

// Adds special tokens around an encoded sequence (TemplateProcessing).
class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual std::vector<int32_t> process(const std::vector<int32_t>& ids) const = 0;
};

// `where` names the file for error messages. A null JSON value yields a null pointer (no stage).
Result<std::unique_ptr<Normalizer>> make_normalizer(const nlohmann::json& j, const std::string& where);
Result<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const nlohmann::json& j, const std::string& where);
Result<std::unique_ptr<Decoder>> make_decoder(const nlohmann::json& j, const std::string& where);
// `token_ids` resolves special-token strings named by a template to ids.
Result<std::unique_ptr<PostProcessor>> make_post_processor(const nlohmann::json& j, const std::string& where);

// Reads a {"String": ...} or {"Regex": ...} pattern object.
Result<Regex> compile_pattern(const nlohmann::json& pattern, const std::string& where,
                              const std::string& component);

// Pre-tokenizer that splits on a regex and keeps only the matches (tiktoken's behaviour).
std::unique_ptr<PreTokenizer> make_regex_match_pre_tokenizer(Regex regex);
// The chunking of a remote-code TikTokenTokenizer: cuts text into chunks of at most `max_chunk_chars`
// characters and cuts runs of more than `max_run_chars` whitespace or non-whitespace characters.
std::unique_ptr<PreTokenizer> make_chunking_pre_tokenizer(size_t max_chunk_chars, size_t max_run_chars);
std::unique_ptr<PreTokenizer> make_sequence_pre_tokenizer(std::vector<std::unique_ptr<PreTokenizer>> stages);
std::unique_ptr<PreTokenizer> make_byte_level_marker();
std::unique_ptr<Decoder> make_byte_level_decoder();
// Prepends/appends fixed ids (add_bos_token / add_eos_token of tokenizer_config.json).
std::unique_ptr<PostProcessor> make_bos_eos_processor(std::vector<int32_t> prefix,
                                                      std::vector<int32_t> suffix);

}  // namespace day0::tokenizer
