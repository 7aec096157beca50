#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "tokenizer/tokenizer_test_util.h"

namespace day0::testing {

std::filesystem::path shared_tokenizers_dir() {
  const std::filesystem::path p = std::filesystem::path(DAY0_SHARED_DIR) / "tokenizers";
  return std::filesystem::is_directory(p) ? p : std::filesystem::path();
}

std::shared_ptr<const tokenizer::Tokenizer> shared_tokenizer(const std::string& model) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const tokenizer::Tokenizer>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(model);
  if (it != cache.end()) return it->second;
  auto loaded = tokenizer::load_tokenizer(shared_tokenizers_dir() / model);
  EXPECT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  if (!loaded.is_ok()) return nullptr;
  cache[model] = *loaded;
  return *loaded;
}

std::shared_ptr<const tokenizer::Tokenizer> harmony_tiktoken() {
  static std::shared_ptr<const tokenizer::Tokenizer> tok = [] {
    auto spec = tokenizer::builtin_tiktoken_spec("o200k_harmony");
    EXPECT_TRUE(spec.is_ok());
    auto parts = tokenizer::load_tiktoken(shared_tokenizers_dir() / "gpt-oss" / "o200k_base.tiktoken", *spec);
    EXPECT_TRUE(parts.is_ok()) << parts.status().to_string();
    if (!parts.is_ok()) return std::shared_ptr<const tokenizer::Tokenizer>();
    return std::shared_ptr<const tokenizer::Tokenizer>(
        std::make_shared<tokenizer::Tokenizer>(std::move(*parts)));
  }();
  return tok;
}

std::string read_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& file) {
  std::vector<nlohmann::json> out;
  std::istringstream in(read_file(file));
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

}  // namespace day0::testing
