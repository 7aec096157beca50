#pragma once
// The byte-pair-encoding core shared by tokenizer.json BPE models and tiktoken rank files: a
// vocabulary of byte strings and a table of pair merges, each with a rank (lower merges first).
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace day0::tokenizer {

// Lets unordered_map<std::string, ...> be searched with a string_view without a copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

struct BpeOptions {
  // Input words are raw bytes and every byte is one initial symbol (byte-level BPE, tiktoken);
  // otherwise every UTF-8 character is one initial symbol (SentencePiece-style BPE).
  bool byte_level = true;
  bool ignore_merges = false;  // a word that is itself in the vocabulary is emitted whole
  bool byte_fallback = false;  // unknown characters become <0xXX> byte tokens
  bool fuse_unk = false;       // consecutive unknown characters become a single unk
  std::optional<int32_t> unk_id;
};

class BpeModel {
 public:
  explicit BpeModel(BpeOptions options = {}) : options_(options) { byte_ids_.fill(-1); }

  // `key` is what words are matched against: raw bytes in byte-level mode, text otherwise.
  void add_token(std::string key, int32_t id);
  // Merging `left` and `right` yields `merged`; lower ranks merge first, ties go leftmost.
  void add_merge(int32_t left, int32_t right, int32_t merged, uint32_t rank);
  // Call once after all tokens were added (resolves the byte-fallback and byte tables).
  void finalize();

  std::optional<int32_t> find(std::string_view key) const;
  const BpeOptions& options() const { return options_; }
  size_t merge_count() const { return merges_.size(); }

  // Appends the ids of one pre-tokenized word.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

 private:
  struct Merge {
    uint32_t rank;
    int32_t merged;
  };
  const Merge* find_merge(int32_t left, int32_t right) const {
    auto it = merges_.find((static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
                           static_cast<uint32_t>(right));
    return it == merges_.end() ? nullptr : &it->second;
  }
  void initial_symbols(std::string_view word, std::vector<int32_t>& symbols) const;
  void merge_small(std::vector<int32_t>& symbols) const;
  void merge_large(std::vector<int32_t>& symbols) const;

  BpeOptions options_;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> vocab_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_ids_;        // byte-level: id of each single byte
  std::array<int32_t, 256> fallback_ids_{};  // byte_fallback: id of <0xXX>
  bool has_all_fallback_ = false;
};

}  // namespace day0::tokenizer
