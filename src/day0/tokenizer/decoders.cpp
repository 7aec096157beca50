// Decoders of tokenizer.json (ByteLevel, ByteFallback, Metaspace, Fuse, Strip, Replace, Sequence) and the
// post-processors (TemplateProcessing, ByteLevel, Sequence).
#include <fmt/format.h>
#include <algorithm>
#include <nlohmann/json.hpp>

#include "day0/tokenizer/byte_level.h"
#include "day0/tokenizer/pipeline.h"
#include "day0/tokenizer/utf8.h"

namespace day0::tokenizer {
namespace {

using json = nlohmann::json;

// Joins everything, maps byte-level characters back to bytes (a token with a character outside the
// table keeps its own UTF-8) and repairs invalid UTF-8 with U+FFFD.
class ByteLevelDec final : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      if (auto raw = byte_level_to_bytes(t)) {
        bytes += *raw;
      } else {
        bytes += t;
      }
    }
    tokens.assign(1, sanitize_utf8(bytes));
  }
};

// <0xXX> tokens are gathered into bytes; an invalid byte run becomes one U+FFFD per byte.
class ByteFallbackDec final : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    size_t pending_count = 0;
    auto flush = [&] {
      if (pending_count == 0) return;
      if (is_valid_utf8(pending)) {
        out.push_back(pending);
      } else {
        for (size_t i = 0; i < pending_count; ++i) out.emplace_back("\uFFFD");
      }
      pending.clear();
      pending_count = 0;
    };
    for (std::string& t : tokens) {
      unsigned value = 0;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && parse_hex(t.substr(3, 2), value)) {
        pending.push_back(static_cast<char>(value));
        ++pending_count;
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    tokens = std::move(out);
  }

 private:
  static bool parse_hex(const std::string& s, unsigned& value) {
    value = 0;
    for (char c : s) {
      value <<= 4;
      if (c >= '0' && c <= '9') {
        value |= static_cast<unsigned>(c - '0');
      } else if (c >= 'A' && c <= 'F') {
        value |= static_cast<unsigned>(c - 'A' + 10);
      } else if (c >= 'a' && c <= 'f') {
        value |= static_cast<unsigned>(c - 'a' + 10);
      } else {
        return false;
      }
    }
    return true;
  }
};

class FuseDec final : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

// Removes up to `start` leading and `stop` trailing copies of `content` from every token.
class StripDec final : public Decoder {
 public:
  StripDec(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode(std::vector<std::string>& tokens) const override {
    if (content_.empty()) return;
    for (std::string& t : tokens) {
      size_t b = 0, e = t.size();
      for (size_t i = 0;
           i < start_ && t.compare(b, content_.size(), content_) == 0 && b + content_.size() <= e; ++i) {
        b += content_.size();
      }
      for (size_t i = 0; i < stop_ && e >= b + content_.size() &&
                         t.compare(e - content_.size(), content_.size(), content_) == 0;
           ++i) {
        e -= content_.size();
      }
      t = t.substr(b, e - b);
    }
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

class ReplaceDec final : public Decoder {
 public:
  ReplaceDec(Regex pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      std::string out;
      size_t last = 0;
      pattern_.for_each_match(t, [&](size_t b, size_t e) {
        out.append(t, last, b - last);
        out += content_;
        last = e;
      });
      out.append(t, last);
      t = std::move(out);
    }
  }

 private:
  Regex pattern_;
  std::string content_;
};

class MetaspaceDec final : public Decoder {
 public:
  MetaspaceDec(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      size_t pos = 0;
      while (pos < t.size()) {
        if (t.compare(pos, replacement_.size(), replacement_) == 0) {
          out.push_back(' ');
          pos += replacement_.size();
        } else {
          out.push_back(t[pos++]);
        }
      }
      if (i == 0 && strip_first_ && !out.empty() && out.front() == ' ') out.erase(0, 1);
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

class SequenceDec final : public Decoder {
 public:
  explicit SequenceDec(std::vector<std::unique_ptr<Decoder>> stages) : stages_(std::move(stages)) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (const auto& s : stages_) s->decode(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> stages_;
};

class TemplatePost final : public PostProcessor {
 public:
  struct Item {
    bool is_sequence;
    std::vector<int32_t> ids;
  };
  explicit TemplatePost(std::vector<Item> items) : items_(std::move(items)) {}
  std::vector<int32_t> process(const std::vector<int32_t>& ids) const override {
    std::vector<int32_t> out;
    for (const Item& item : items_) {
      const auto& src = item.is_sequence ? ids : item.ids;
      out.insert(out.end(), src.begin(), src.end());
    }
    return out;
  }

 private:
  std::vector<Item> items_;
};

class SequencePost final : public PostProcessor {
 public:
  explicit SequencePost(std::vector<std::unique_ptr<PostProcessor>> stages) : stages_(std::move(stages)) {}
  std::vector<int32_t> process(const std::vector<int32_t>& ids) const override {
    std::vector<int32_t> out = ids;
    for (const auto& s : stages_) out = s->process(out);
    return out;
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> stages_;
};

class FixedPost final : public PostProcessor {
 public:
  FixedPost(std::vector<int32_t> prefix, std::vector<int32_t> suffix)
      : prefix_(std::move(prefix)), suffix_(std::move(suffix)) {}
  std::vector<int32_t> process(const std::vector<int32_t>& ids) const override {
    std::vector<int32_t> out = prefix_;
    out.insert(out.end(), ids.begin(), ids.end());
    out.insert(out.end(), suffix_.begin(), suffix_.end());
    return out;
  }

 private:
  std::vector<int32_t> prefix_, suffix_;
};

Result<std::unique_ptr<PostProcessor>> make_template(const json& j, const std::string& where) {
  std::vector<TemplatePost::Item> items;
  const json& specials = j.contains("special_tokens") ? j["special_tokens"] : json::object();
  for (const json& piece : j.at("single")) {
    if (piece.contains("Sequence")) {
      if (piece["Sequence"].value("id", std::string("A")) != "A") {
        return unsupported(
            fmt::format("{}: TemplateProcessing single template names sequence other than A", where));
      }
      items.push_back({true, {}});
    } else if (piece.contains("SpecialToken")) {
      const std::string name = piece["SpecialToken"].at("id").get<std::string>();
      if (!specials.contains(name)) {
        return parse_error(fmt::format(
            "{}: TemplateProcessing uses special token {:?} missing from special_tokens", where, name));
      }
      items.push_back({false, specials[name].at("ids").get<std::vector<int32_t>>()});
    } else {
      return unsupported(fmt::format("{}: TemplateProcessing item {} is not supported", where, piece.dump()));
    }
  }
  return std::unique_ptr<PostProcessor>(new TemplatePost(std::move(items)));
}

}  // namespace

std::unique_ptr<Decoder> make_byte_level_decoder() {
  return std::make_unique<ByteLevelDec>();
}

std::unique_ptr<PostProcessor> make_bos_eos_processor(std::vector<int32_t> prefix,
                                                      std::vector<int32_t> suffix) {
  return std::make_unique<FixedPost>(std::move(prefix), std::move(suffix));
}

Result<std::unique_ptr<Decoder>> make_decoder(const json& j, const std::string& where) {
  if (j.is_null()) return std::unique_ptr<Decoder>();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return parse_error(fmt::format("{}: decoder without a \"type\"", where));
  }
  const std::string type = j["type"].get<std::string>();
  try {
    if (type == "ByteLevel") return std::unique_ptr<Decoder>(new ByteLevelDec());
    if (type == "ByteFallback") return std::unique_ptr<Decoder>(new ByteFallbackDec());
    if (type == "Fuse") return std::unique_ptr<Decoder>(new FuseDec());
    if (type == "Strip") {
      return std::unique_ptr<Decoder>(new StripDec(j.at("content").get<std::string>(),
                                                   j.at("start").get<size_t>(), j.at("stop").get<size_t>()));
    }
    if (type == "Replace") {
      D0_ASSIGN_OR_RETURN(Regex re, compile_pattern(j.at("pattern"), where, "Replace decoder"));
      return std::unique_ptr<Decoder>(new ReplaceDec(std::move(re), j.at("content").get<std::string>()));
    }
    if (type == "Metaspace") {
      bool strip_first = j.value("add_prefix_space", true);
      if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string())
        strip_first = j["prepend_scheme"] != "never";
      return std::unique_ptr<Decoder>(
          new MetaspaceDec(j.value("replacement", std::string("\u2581")), strip_first));
    }
    if (type == "Sequence") {
      std::vector<std::unique_ptr<Decoder>> stages;
      for (const auto& sub : j.at("decoders")) {
        D0_ASSIGN_OR_RETURN(auto stage, make_decoder(sub, where));
        if (stage) stages.push_back(std::move(stage));
      }
      return std::unique_ptr<Decoder>(new SequenceDec(std::move(stages)));
    }
  } catch (const json::exception& e) {
    return parse_error(fmt::format("{}: decoder {}: {}", where, type, e.what()));
  }
  return unsupported(fmt::format("{}: decoder type \"{}\" is not supported", where, type));
}

Result<std::unique_ptr<PostProcessor>> make_post_processor(const json& j, const std::string& where) {
  if (j.is_null()) return std::unique_ptr<PostProcessor>();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return parse_error(fmt::format("{}: post_processor without a \"type\"", where));
  }
  const std::string type = j["type"].get<std::string>();
  try {
    if (type == "ByteLevel") return std::unique_ptr<PostProcessor>(new SequencePost({}));  // offsets only
    if (type == "TemplateProcessing") return make_template(j, where);
    if (type == "Sequence") {
      std::vector<std::unique_ptr<PostProcessor>> stages;
      for (const auto& sub : j.at("processors")) {
        D0_ASSIGN_OR_RETURN(auto stage, make_post_processor(sub, where));
        if (stage) stages.push_back(std::move(stage));
      }
      return std::unique_ptr<PostProcessor>(new SequencePost(std::move(stages)));
    }
  } catch (const json::exception& e) {
    return parse_error(fmt::format("{}: post_processor {}: {}", where, type, e.what()));
  }
  return unsupported(fmt::format("{}: post_processor type \"{}\" is not supported", where, type));
}

}  // namespace day0::tokenizer
