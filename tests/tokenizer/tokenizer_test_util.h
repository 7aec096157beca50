#pragma once
// Shared helpers for the tokenizer tests: where the shared test data lives and cached tokenizers
// (loading a 10 MB tokenizer.json once per test binary keeps the tests fast).
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "day0/tokenizer/tokenizer.h"

namespace day0::testing {

// DAY0_SHARED_DIR/tokenizers, or empty when the shared folder is absent.
std::filesystem::path shared_tokenizers_dir();

// Loads (once) the tokenizer of shared/tokenizers/<model>; fails the test on error.
std::shared_ptr<const tokenizer::Tokenizer> shared_tokenizer(const std::string& model);
// gpt-oss's o200k_base.tiktoken as the o200k_harmony encoding.
std::shared_ptr<const tokenizer::Tokenizer> harmony_tiktoken();

std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& file);
std::string read_file(const std::filesystem::path& file);

}  // namespace day0::testing

#define D0_SKIP_WITHOUT_SHARED()                                                                    \
  do {                                                                                              \
    if (::day0::testing::shared_tokenizers_dir().empty())                                           \
      GTEST_SKIP() << "shared tokenizer data not found at " DAY0_SHARED_DIR "/tokenizers: skipped"; \
  } while (0)
