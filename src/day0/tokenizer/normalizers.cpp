// Normalizers of tokenizer.json: Unicode forms (utf8proc), Prepend, Replace, Strip, Lowercase, Sequence.
#include <utf8proc.h>
#include <algorithm>

#include <cstdlib>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "day0/tokenizer/pipeline.h"
#include "day0/tokenizer/regex.h"
#include "day0/tokenizer/text_util.h"
#include "day0/tokenizer/utf8.h"

namespace day0::tokenizer {
namespace {

using json = nlohmann::json;

class UnicodeForm final : public Normalizer {
 public:
  explicit UnicodeForm(int options) : options_(options) {}
  std::string normalize(std::string_view text) const override {
    if (text.empty()) return {};
    utf8proc_uint8_t* out = nullptr;
    const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                static_cast<utf8proc_ssize_t>(text.size()), &out,
                                static_cast<utf8proc_option_t>(options_));
    if (n < 0) return std::string(text);  // invalid input cannot reach here (sanitised earlier)
    std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
    std::free(out);
    return result;
  }

 private:
  int options_;
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string normalize(std::string_view text) const override {
    if (text.empty()) return {};
    return prefix_ + std::string(text);
  }

 private:
  std::string prefix_;
};

class Replace final : public Normalizer {
 public:
  Replace(Regex pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  std::string normalize(std::string_view text) const override {
    std::string out;
    size_t last = 0;
    pattern_.for_each_match(text, [&](size_t b, size_t e) {
      out.append(text.substr(last, b - last));
      out += content_;
      last = e;
    });
    out.append(text.substr(last));
    return out;
  }

 private:
  Regex pattern_;
  std::string content_;
};

class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  std::string normalize(std::string_view text) const override {
    return std::string(strip_whitespace(text, left_, right_));
  }

 private:
  bool left_, right_;
};

class Lowercase final : public Normalizer {
 public:
  std::string normalize(std::string_view text) const override {
    std::string out;
    out.reserve(text.size());
    size_t pos = 0;
    char32_t cp = 0;
    while (pos < text.size()) {
      const size_t len = decode_utf8(text, pos, cp);
      if (len == 0) {
        out.push_back(text[pos++]);
        continue;
      }
      append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
      pos += len;
    }
    return out;
  }
};

class Sequence final : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> stages) : stages_(std::move(stages)) {}
  std::string normalize(std::string_view text) const override {
    std::string s(text);
    for (const auto& stage : stages_) s = stage->normalize(s);
    return s;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> stages_;
};

}  // namespace

Result<Regex> compile_pattern(const json& pattern, const std::string& where, const std::string& component) {
  if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string()) {
    return Regex::compile(pattern["String"].get<std::string>(), /*literal=*/true);
  }
  if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
    auto r = Regex::compile(pattern["Regex"].get<std::string>());
    if (!r) return r.status().with_context(fmt::format("{}: {} pattern", where, component));
    return r;
  }
  return parse_error(
      fmt::format("{}: {}: pattern must be {{\"String\": ...}} or {{\"Regex\": ...}}", where, component));
}

Result<std::unique_ptr<Normalizer>> make_normalizer(const json& j, const std::string& where) {
  if (j.is_null()) return std::unique_ptr<Normalizer>();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return parse_error(fmt::format("{}: normalizer without a \"type\"", where));
  }
  const std::string type = j["type"].get<std::string>();
  try {
    if (type == "NFC")
      return std::unique_ptr<Normalizer>(new UnicodeForm(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    if (type == "NFD")
      return std::unique_ptr<Normalizer>(new UnicodeForm(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE));
    if (type == "NFKC") {
      return std::unique_ptr<Normalizer>(
          new UnicodeForm(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT));
    }
    if (type == "NFKD") {
      return std::unique_ptr<Normalizer>(
          new UnicodeForm(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT));
    }
    if (type == "Prepend")
      return std::unique_ptr<Normalizer>(new Prepend(j.at("prepend").get<std::string>()));
    if (type == "Lowercase") return std::unique_ptr<Normalizer>(new Lowercase());
    if (type == "Strip") {
      return std::unique_ptr<Normalizer>(
          new Strip(j.value("strip_left", true), j.value("strip_right", true)));
    }
    if (type == "Replace") {
      D0_ASSIGN_OR_RETURN(Regex re, compile_pattern(j.at("pattern"), where, "Replace normalizer"));
      return std::unique_ptr<Normalizer>(new Replace(std::move(re), j.at("content").get<std::string>()));
    }
    if (type == "Sequence") {
      std::vector<std::unique_ptr<Normalizer>> stages;
      for (const auto& sub : j.at("normalizers")) {
        D0_ASSIGN_OR_RETURN(auto stage, make_normalizer(sub, where));
        if (stage) stages.push_back(std::move(stage));
      }
      return std::unique_ptr<Normalizer>(new Sequence(std::move(stages)));
    }
  } catch (const json::exception& e) {
    return parse_error(fmt::format("{}: normalizer {}: {}", where, type, e.what()));
  }
  return unsupported(fmt::format("{}: normalizer type \"{}\" is not supported", where, type));
}

}  // namespace day0::tokenizer
