// Every vector in shared/tokenizers/*/tests: ids, token strings, ids with special tokens, and the
// llama.cpp .inp/.out cases.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "tokenizer/tokenizer_test_util.h"

namespace day0::testing {
namespace {

using tokenizer::EncodeOptions;

std::string ids_str(const std::vector<int32_t>& ids) {
  return fmt::format("[{}]", fmt::join(ids, ","));
}

class HfVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(HfVectors, IdsTokensAndSpecialsMatch) {
  D0_SKIP_WITHOUT_SHARED();
  auto tok = shared_tokenizer(GetParam());
  ASSERT_NE(tok, nullptr);
  const auto cases = read_jsonl(shared_tokenizers_dir() / GetParam() / "tests" / "vectors.jsonl");
  ASSERT_GT(cases.size(), 90u);
  for (const auto& c : cases) {
    const std::string text = c["text"].get<std::string>();
    const auto want = c["ids"].get<std::vector<int32_t>>();
    const auto got = tok->encode(text);
    EXPECT_EQ(ids_str(got), ids_str(want)) << "text: " << nlohmann::json(text).dump();
    std::vector<std::string> pieces;
    for (int32_t id : got) pieces.push_back(tok->id_to_piece(id).value_or("?"));
    EXPECT_EQ(pieces, c["tokens"].get<std::vector<std::string>>()) << "text: " << nlohmann::json(text).dump();
    const auto with_special = tok->encode(text, EncodeOptions{.add_special_tokens = true});
    EXPECT_EQ(ids_str(with_special), ids_str(c["ids_with_special"].get<std::vector<int32_t>>()))
        << "text: " << nlohmann::json(text).dump();
  }
}

INSTANTIATE_TEST_SUITE_P(Shared, HfVectors,
                         ::testing::Values("llama-3", "qwen3", "deepseek-v3", "mistral-7b-instruct-v0.3",
                                           "mixtral-8x7b-v0.1"),
                         [](const auto& param_info) {
                           std::string n = param_info.param;
                           for (char& ch : n) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return n;
                         });

struct LlamaCppCase {
  std::string model;
  std::string file;
};

class LlamaCppVectors : public ::testing::TestWithParam<LlamaCppCase> {};

TEST_P(LlamaCppVectors, MatchTransformers) {
  D0_SKIP_WITHOUT_SHARED();
  auto tok = shared_tokenizer(GetParam().model);
  ASSERT_NE(tok, nullptr);
  const auto dir = shared_tokenizers_dir() / GetParam().model / "tests";
  const std::string inp = read_file(dir / (GetParam().file + ".inp"));
  const std::string out = read_file(dir / (GetParam().file + ".out"));
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0;;) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) break;
    texts.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<std::string> lines;
  for (size_t pos = 0; pos < out.size();) {
    size_t next = out.find('\n', pos);
    if (next == std::string::npos) next = out.size();
    lines.push_back(out.substr(pos, next - pos));
    pos = next + 1;
  }
  ASSERT_EQ(texts.size(), 46u);
  ASSERT_GE(lines.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    std::string got;
    for (int32_t id : tok->encode(texts[i])) got += fmt::format(" {}", id);
    EXPECT_EQ(got, lines[i]) << "case " << i << ": " << nlohmann::json(texts[i]).dump();
  }
}

INSTANTIATE_TEST_SUITE_P(Shared, LlamaCppVectors,
                         ::testing::Values(LlamaCppCase{"llama-3", "llama.cpp-ggml-vocab-llama-bpe.gguf"},
                                           LlamaCppCase{"qwen3", "llama.cpp-ggml-vocab-qwen2.gguf"},
                                           LlamaCppCase{"qwen3",
                                                        "llama.cpp-ggml-vocab-deepseek-r1-qwen.gguf"}),
                         [](const auto& param_info) { return std::to_string(param_info.index); });

TEST(TiktokenVectors, O200kHarmonyOrdinaryAndAllSpecial) {
  D0_SKIP_WITHOUT_SHARED();
  auto tok = harmony_tiktoken();
  ASSERT_NE(tok, nullptr);
  const auto cases =
      read_jsonl(shared_tokenizers_dir() / "gpt-oss" / "tests" / "o200k_harmony_vectors.jsonl");
  ASSERT_EQ(cases.size(), 96u);
  for (const auto& c : cases) {
    const std::string text = c["text"].get<std::string>();
    EXPECT_EQ(ids_str(tok->encode(text, EncodeOptions{.split_special_tokens = true})),
              ids_str(c["ids_ordinary"].get<std::vector<int32_t>>()))
        << nlohmann::json(text).dump();
    EXPECT_EQ(ids_str(tok->encode(text)), ids_str(c["ids_allowed_special_all"].get<std::vector<int32_t>>()))
        << nlohmann::json(text).dump();
  }
}

TEST(TiktokenVectors, GptOssTokenizerJsonGzAgreesWithTiktoken) {
  D0_SKIP_WITHOUT_SHARED();
  auto tok = shared_tokenizer("gpt-oss");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->kind(), "tokenizer.json");
  const auto cases =
      read_jsonl(shared_tokenizers_dir() / "gpt-oss" / "tests" / "o200k_harmony_vectors.jsonl");
  size_t compared = 0;
  for (const auto& c : cases) {
    const std::string text = c["text"].get<std::string>();
    // The harmony reserved ids exist only in tiktoken's o200k_harmony, not in tokenizer.json.
    if (text.find("<|reserved_2") != std::string::npos) continue;
    EXPECT_EQ(ids_str(tok->encode(text)), ids_str(c["ids_allowed_special_all"].get<std::vector<int32_t>>()))
        << nlohmann::json(text).dump();
    ++compared;
  }
  EXPECT_EQ(compared, 95u);
}

TEST(TiktokenVectors, KimiK2OrdinaryAndAllSpecial) {
  D0_SKIP_WITHOUT_SHARED();
  auto tok = shared_tokenizer("kimi-k2");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->kind(), "tiktoken");
  const auto cases = read_jsonl(shared_tokenizers_dir() / "kimi-k2" / "tests" / "vectors.jsonl");
  ASSERT_EQ(cases.size(), 96u);
  for (const auto& c : cases) {
    const std::string text = c["text"].get<std::string>();
    EXPECT_EQ(ids_str(tok->encode(text, EncodeOptions{.split_special_tokens = true})),
              ids_str(c["ids_ordinary"].get<std::vector<int32_t>>()))
        << nlohmann::json(text).dump();
    EXPECT_EQ(ids_str(tok->encode(text)), ids_str(c["ids_allowed_special_all"].get<std::vector<int32_t>>()))
        << nlohmann::json(text).dump();
  }
}

}  // namespace
}  // namespace day0::testing
