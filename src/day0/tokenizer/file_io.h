#pragma once
// Whole-file reads for tokenizer files; *.gz files are inflated (some releases ship tokenizer.json.gz).
#include <filesystem>
#include <string>

#include "day0/core/status.h"

namespace day0::tokenizer {

// Tokenizer files (plain or inflated) above this are refused as bad input.
inline constexpr size_t kMaxTokenizerFileBytes = size_t{128} << 20;

// Reads a regular file whole, inflating *.gz; never more than kMaxTokenizerFileBytes.
Result<std::string> read_text_file(const std::filesystem::path& path);

}  // namespace day0::tokenizer
