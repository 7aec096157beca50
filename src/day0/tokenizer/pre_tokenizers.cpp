// Pre-tokenizers of tokenizer.json (Split, ByteLevel, Metaspace, Digits, Sequence) and the tiktoken
// splitters (regex matches only, the remote-code chunking).
#include <fmt/format.h>
#include <algorithm>
#include <nlohmann/json.hpp>

#include "day0/tokenizer/pipeline.h"
#include "day0/tokenizer/regex.h"
#include "day0/tokenizer/text_util.h"
#include "day0/tokenizer/utf8.h"

namespace day0::tokenizer {
namespace {

using json = nlohmann::json;

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct Span {
  size_t begin, end;
  bool is_match;
};

// Applies a split behaviour to the spans (matches and the gaps between them) covering one piece.
std::vector<Span> apply_behavior(std::vector<Span> spans, Behavior behavior) {
  std::vector<Span> out;
  switch (behavior) {
    case Behavior::kIsolated:
      return spans;
    case Behavior::kRemoved:
      for (const Span& s : spans) {
        if (!s.is_match) out.push_back(s);
      }
      return out;
    case Behavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back(s);
        }
        previous_match = s.is_match;
      }
      return out;
    }
    case Behavior::kMergedWithNext: {
      bool previous_match = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty()) {
          out.back().begin = it->begin;
        } else {
          out.push_back(*it);
        }
        previous_match = it->is_match;
      }
      return {out.rbegin(), out.rend()};
    }
    case Behavior::kContiguous: {
      bool previous_match = false;
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back(s);
        }
        previous_match = s.is_match;
      }
      return out;
    }
  }
  return spans;
}

// Splits every piece on the regex with the given behaviour.
void split_pieces(std::vector<Piece>& pieces, const Regex& regex, Behavior behavior, bool invert) {
  std::vector<Piece> out;
  out.reserve(pieces.size() * 4);
  std::vector<Span> spans;
  for (Piece& piece : pieces) {
    spans.clear();
    const std::string_view text = piece.text;
    size_t last = 0;
    regex.for_each_match(text, [&](size_t b, size_t e) {
      if (b > last) spans.push_back({last, b, invert});
      spans.push_back({b, e, !invert});
      last = e;
    });
    if (last < text.size()) spans.push_back({last, text.size(), invert});
    for (const Span& s : apply_behavior(spans, behavior)) {
      if (s.end > s.begin)
        out.push_back({std::string(text.substr(s.begin, s.end - s.begin)), piece.at_origin && s.begin == 0});
    }
  }
  pieces = std::move(out);
}

class SplitPre final : public PreTokenizer {
 public:
  SplitPre(Regex regex, Behavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}
  void split(std::vector<Piece>& pieces) const override { split_pieces(pieces, regex_, behavior_, invert_); }

 private:
  Regex regex_;
  Behavior behavior_;
  bool invert_;
};

// Marks the hand-over to byte-level BPE; with use_regex it first applies GPT-2's split.
class ByteLevelPre final : public PreTokenizer {
 public:
  ByteLevelPre(bool add_prefix_space, std::optional<Regex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}
  void split(std::vector<Piece>& pieces) const override {
    if (add_prefix_space_) {
      for (Piece& p : pieces) {
        if (!p.text.empty() && p.text.front() != ' ') p.text.insert(p.text.begin(), ' ');
      }
    }
    if (regex_) split_pieces(pieces, *regex_, Behavior::kIsolated, false);
  }
  bool is_byte_level() const override { return true; }

 private:
  bool add_prefix_space_;
  std::optional<Regex> regex_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePre final : public PreTokenizer {
 public:
  MetaspacePre(std::string replacement, PrependScheme prepend, bool split, Regex splitter)
      : replacement_(std::move(replacement)),
        prepend_(prepend),
        split_(split),
        splitter_(std::move(splitter)) {}
  void split(std::vector<Piece>& pieces) const override {
    for (Piece& p : pieces) {
      std::string replaced;
      for (char c : p.text) {
        if (c == ' ') {
          replaced += replacement_;
        } else {
          replaced.push_back(c);
        }
      }
      const bool starts = replaced.rfind(replacement_, 0) == 0;
      if (!starts &&
          (prepend_ == PrependScheme::kAlways || (prepend_ == PrependScheme::kFirst && p.at_origin))) {
        replaced.insert(0, replacement_);
      }
      p.text = std::move(replaced);
    }
    if (split_) split_pieces(pieces, splitter_, Behavior::kMergedWithNext, false);
  }

 private:
  std::string replacement_;
  PrependScheme prepend_;
  bool split_;
  Regex splitter_;
};

class SequencePre final : public PreTokenizer {
 public:
  explicit SequencePre(std::vector<std::unique_ptr<PreTokenizer>> stages) : stages_(std::move(stages)) {}
  void split(std::vector<Piece>& pieces) const override {
    for (const auto& stage : stages_) stage->split(pieces);
  }
  bool is_byte_level() const override { return !stages_.empty() && stages_.back()->is_byte_level(); }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> stages_;
};

class RegexMatchPre final : public PreTokenizer {
 public:
  explicit RegexMatchPre(Regex regex) : regex_(std::move(regex)) {}
  void split(std::vector<Piece>& pieces) const override {
    split_pieces(pieces, regex_, Behavior::kRemoved, true);
  }
  bool is_byte_level() const override { return true; }

 private:
  Regex regex_;
};

// Python's str.isspace() for the characters that matter (the remote-code run splitting is written in Python).
bool python_isspace(char32_t cp) {
  return is_unicode_whitespace(cp) || (cp >= 0x1C && cp <= 0x1F);
}

class ChunkingPre final : public PreTokenizer {
 public:
  ChunkingPre(size_t max_chunk, size_t max_run) : max_chunk_(max_chunk), max_run_(max_run) {}
  void split(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (Piece& p : pieces) {
      const std::string_view text = p.text;
      // Character positions -> byte offsets of every chunk boundary.
      size_t chunk_start = 0, chars_in_chunk = 0, run_chars = 0, piece_start = 0;
      bool run_space = false;
      size_t pos = 0;
      auto emit = [&](size_t end) {
        if (end > piece_start)
          out.push_back(
              {std::string(text.substr(piece_start, end - piece_start)), p.at_origin && piece_start == 0});
        piece_start = end;
      };
      while (pos < text.size()) {
        char32_t cp = 0;
        size_t len = decode_utf8(text, pos, cp);
        if (len == 0) len = 1;
        if (chars_in_chunk == max_chunk_) {
          emit(pos);
          chunk_start = pos;
          chars_in_chunk = 0;
          run_chars = 0;
        }
        const bool space = python_isspace(cp);
        if (run_chars > 0 && space == run_space) {
          ++run_chars;
          if (run_chars > max_run_) {
            emit(pos);
            run_chars = 1;
          }
        } else {
          run_space = space;
          run_chars = 1;
        }
        ++chars_in_chunk;
        pos += len;
      }
      (void)chunk_start;
      emit(text.size());
    }
    pieces = std::move(out);
  }

 private:
  size_t max_chunk_, max_run_;
};

Result<Behavior> parse_behavior(const json& j, const std::string& where) {
  const std::string b = j.get<std::string>();
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  return unsupported(fmt::format("{}: Split behavior \"{}\" is not supported", where, b));
}

constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace

std::unique_ptr<PreTokenizer> make_regex_match_pre_tokenizer(Regex regex) {
  return std::make_unique<RegexMatchPre>(std::move(regex));
}
std::unique_ptr<PreTokenizer> make_chunking_pre_tokenizer(size_t max_chunk_chars, size_t max_run_chars) {
  return std::make_unique<ChunkingPre>(max_chunk_chars, max_run_chars);
}
std::unique_ptr<PreTokenizer> make_sequence_pre_tokenizer(std::vector<std::unique_ptr<PreTokenizer>> stages) {
  return std::make_unique<SequencePre>(std::move(stages));
}
std::unique_ptr<PreTokenizer> make_byte_level_marker() {
  return std::make_unique<ByteLevelPre>(false, std::nullopt);
}

Result<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const json& j, const std::string& where) {
  if (j.is_null()) return std::unique_ptr<PreTokenizer>();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return parse_error(fmt::format("{}: pre_tokenizer without a \"type\"", where));
  }
  const std::string type = j["type"].get<std::string>();
  try {
    if (type == "Split") {
      D0_ASSIGN_OR_RETURN(Regex re, compile_pattern(j.at("pattern"), where, "Split pre_tokenizer"));
      D0_ASSIGN_OR_RETURN(Behavior b, parse_behavior(j.at("behavior"), where));
      return std::unique_ptr<PreTokenizer>(new SplitPre(std::move(re), b, j.value("invert", false)));
    }
    if (type == "ByteLevel") {
      std::optional<Regex> re;
      if (j.value("use_regex", true)) {
        D0_ASSIGN_OR_RETURN(Regex compiled, Regex::compile(kGpt2Pattern));
        re = std::move(compiled);
      }
      return std::unique_ptr<PreTokenizer>(
          new ByteLevelPre(j.value("add_prefix_space", true), std::move(re)));
    }
    if (type == "Metaspace") {
      const std::string replacement = j.value("replacement", std::string("\u2581"));
      PrependScheme prepend = PrependScheme::kAlways;
      if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string()) {
        const std::string scheme = j["prepend_scheme"].get<std::string>();
        if (scheme == "first") {
          prepend = PrependScheme::kFirst;
        } else if (scheme == "never") {
          prepend = PrependScheme::kNever;
        } else if (scheme != "always") {
          return unsupported(
              fmt::format("{}: Metaspace prepend_scheme \"{}\" is not supported", where, scheme));
        }
      } else if (!j.value("add_prefix_space", true)) {
        prepend = PrependScheme::kNever;
      }
      D0_ASSIGN_OR_RETURN(Regex splitter, Regex::compile(replacement, /*literal=*/true));
      return std::unique_ptr<PreTokenizer>(
          new MetaspacePre(replacement, prepend, j.value("split", true), std::move(splitter)));
    }
    if (type == "Digits") {
      const bool individual = j.value("individual_digits", false);
      D0_ASSIGN_OR_RETURN(Regex re, Regex::compile(individual ? R"(\p{N})" : R"(\p{N}+)"));
      return std::unique_ptr<PreTokenizer>(new SplitPre(std::move(re), Behavior::kIsolated, false));
    }
    if (type == "Sequence") {
      std::vector<std::unique_ptr<PreTokenizer>> stages;
      const auto& list = j.at("pretokenizers");
      for (size_t i = 0; i < list.size(); ++i) {
        D0_ASSIGN_OR_RETURN(auto stage, make_pre_tokenizer(list[i], where));
        if (!stage) continue;
        if (!stages.empty() && stages.back()->is_byte_level()) {
          return unsupported(
              fmt::format("{}: a pre_tokenizer after ByteLevel in a Sequence is not supported", where));
        }
        stages.push_back(std::move(stage));
      }
      return std::unique_ptr<PreTokenizer>(new SequencePre(std::move(stages)));
    }
  } catch (const json::exception& e) {
    return parse_error(fmt::format("{}: pre_tokenizer {}: {}", where, type, e.what()));
  }
  return unsupported(fmt::format("{}: pre_tokenizer type \"{}\" is not supported", where, type));
}

}  // namespace day0::tokenizer
