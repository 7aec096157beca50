#pragma once
// Whole-file reads for tokenizer files; *.gz files are inflated (gpt-oss ships tokenizer.json.gz).
#include <filesystem>
#include <string>

#include "day0/core/status.h"

namespace day0::tokenizer {

Result<std::string> read_text_file(const std::filesystem::path& path);

}  // namespace day0::tokenizer
