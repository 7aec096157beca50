#pragma once
// The one bounded way to read JSON that comes from outside (config.json, cluster files, tokenizer
// files, chat messages, reference dumps, later request bodies). Before nlohmann parses anything, a
// single non-recursive pass over the bytes enforces:
//   - a size cap (checked on the file before it is read, and on the text),
//   - a nesting-depth cap (objects + arrays), so nothing downstream recurses deeply
//     (nlohmann's dump(), copies and comparisons are recursive),
//   - finite numbers: `1e400` is bad input naming the source and the key path, not an exception.
// Every failure is a Status (parse / invalid argument / out of range), never a throw.
// Thread safety: all functions are pure or touch only the named file.
#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "day0/core/status.h"

namespace day0 {

struct JsonLimits {
  size_t max_bytes = size_t{64} << 20;  // 64 MiB: far above any config or chat; tokenizers pass more
  int max_depth = 64;                   // real configs nest < 8, tokenizer.json < 10
};

// The limits of each kind of outside JSON.
inline constexpr JsonLimits kConfigJsonLimits{size_t{16} << 20, 32};      // config.json
inline constexpr JsonLimits kTokenizerJsonLimits{size_t{128} << 20, 32};  // tokenizer*.json
inline constexpr JsonLimits kChatJsonLimits{size_t{64} << 20, 64};        // chat messages + tools

// Checks size, depth and number range of `text` without building anything. `source` names the file
// or request in messages; the key path is printed like `rope_scaling.factor` or `messages[3].content`.
Status check_json_text(std::string_view text, const std::string& source, const JsonLimits& limits = {});

// check_json_text, then nlohmann's parser; every parser failure becomes a kParseError naming source.
Result<nlohmann::json> parse_json_text(std::string_view text, const std::string& source,
                                       const JsonLimits& limits = {});
Result<nlohmann::ordered_json> parse_ordered_json_text(std::string_view text, const std::string& source,
                                                       const JsonLimits& limits = {});

// OK when `path` names a regular file of at most max_bytes (following symlinks), else bad input.
Status check_regular_file(const std::filesystem::path& path, size_t max_bytes);

// Reads a regular file of at most limits.max_bytes (a directory, FIFO or device is refused before any
// read) and returns its bytes.
Result<std::string> read_bounded_file(const std::filesystem::path& path, size_t max_bytes);
// read_bounded_file + parse_json_text.
Result<nlohmann::json> read_json_file(const std::filesystem::path& path, const JsonLimits& limits = {});

// A short, bounded description of a value for error messages: scalars as JSON (strings cut), arrays
// and objects as their first characters, produced without recursion.
std::string json_excerpt(const nlohmann::json& value, size_t max_chars = 60);
std::string json_excerpt(const nlohmann::ordered_json& value, size_t max_chars = 60);

}  // namespace day0
