#pragma once
// Text in, text out for generation: a prompt (plain text, or chat messages rendered with the model's
// template) encoded with the model's tokenizer and checked against the model's vocabulary, and a
// streaming decoder that turns generated ids into text piece by piece without splitting a UTF-8
// character across pieces.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "day0/core/status.h"
#include "day0/tokenizer/tokenizer.h"

namespace day0 {

// `text` encoded with BOS as the tokenizer config asks (plain prompts).
Result<std::vector<int32_t>> encode_text_prompt(const tokenizer::Tokenizer& tok, const std::string& text,
                                                int64_t model_vocab);
// `messages` (an array of {role, content}, or an object with "messages" and optional "tools")
// rendered with the folder's chat template plus the generation prompt, then encoded without adding
// BOS again (the template writes it).
Result<std::vector<int32_t>> encode_chat_prompt(const tokenizer::Tokenizer& tok,
                                                const nlohmann::ordered_json& chat, int64_t model_vocab,
                                                std::string* rendered = nullptr);

class StreamingDecoder {
 public:
  explicit StreamingDecoder(const tokenizer::Tokenizer& tok) : tok_(tok) {}
  // Adds one generated id; returns the text that is now final (may be empty while a multi-byte
  // character or a merge is still incomplete).
  std::string push(int32_t id);
  // Whatever is left once generation ends.
  std::string finish();
  const std::vector<int32_t>& ids() const { return ids_; }

 private:
  const tokenizer::Tokenizer& tok_;
  std::vector<int32_t> ids_;
  size_t emitted_ = 0;  // bytes of decode(ids_) already returned
};

}  // namespace day0
