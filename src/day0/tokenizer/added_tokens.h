#pragma once
// Added and special tokens: found in the text before any other stage and emitted whole, with the
// lstrip / rstrip / single_word / normalized semantics of Hugging Face tokenizers.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace day0::tokenizer {

class Normalizer;

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool lstrip = false;       // swallow whitespace on the left
  bool rstrip = false;       // swallow whitespace on the right
  bool normalized = false;   // matched in the normalized text rather than the raw text
  bool single_word = false;  // only matches when not inside a word
};

// A slice of the input: an added token (id >= 0) or text for the normal pipeline (already normalized).
struct Segment {
  std::string text;
  int32_t id = -1;
  bool at_origin = false;  // starts at offset 0 of the input
};

class AddedVocabulary {
 public:
  void add(AddedToken token);
  // Prepares the matchers; normalized tokens are matched by their normalized content.
  void build(const Normalizer* normalizer);

  // Splits the text on added tokens (skipping special ones when split_special) and normalizes the rest.
  std::vector<Segment> split(std::string_view text, const Normalizer* normalizer, bool split_special) const;

  const AddedToken* by_id(int32_t id) const;
  const AddedToken* by_content(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  struct Matcher {
    std::vector<std::string> patterns;
    std::vector<size_t> token_index;                  // pattern -> index into tokens_
    std::array<std::vector<size_t>, 256> by_first{};  // first byte -> patterns, longest first
    void build();
    bool empty() const { return patterns.empty(); }
  };
  struct Match {
    size_t begin, end;
    size_t token;
  };
  std::optional<Match> find(const Matcher& m, std::string_view text, size_t from, bool split_special) const;
  void split_with(const Matcher& m, std::string_view text, bool at_origin, bool split_special,
                  std::vector<Segment>& out, const Normalizer* normalize_rest) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, size_t> by_content_;
  Matcher raw_;         // tokens matched in the raw text
  Matcher normalized_;  // tokens matched after normalization
};

}  // namespace day0::tokenizer
