// decode(encode(x)) == x on the vector texts and on random valid UTF-8, and invalid UTF-8 never crashes.
#include <gtest/gtest.h>

#include <utf8proc.h>
#include <random>

#include "day0/tokenizer/utf8.h"
#include "tokenizer/tokenizer_test_util.h"

namespace day0::testing {
namespace {

using tokenizer::append_utf8;

std::string nfc(const std::string& s) {
  utf8proc_uint8_t* out = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                              static_cast<utf8proc_ssize_t>(s.size()), &out,
                              static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  std::string r = n >= 0 ? std::string(reinterpret_cast<char*>(out), static_cast<size_t>(n)) : s;
  std::free(out);
  return r;
}

std::vector<std::string> vector_texts(const std::string& model, const std::string& file) {
  std::vector<std::string> texts;
  for (const auto& c : read_jsonl(shared_tokenizers_dir() / model / "tests" / file))
    texts.push_back(c["text"]);
  return texts;
}

// Random valid UTF-8 mixing ASCII, whitespace runs, Latin, Cyrillic, CJK, emoji and combining marks.
std::string random_text(std::mt19937& rng, size_t chars) {
  static const std::pair<char32_t, char32_t> ranges[] = {
      {0x20, 0x7E},     {0x09, 0x0D},     {0xA0, 0x24F},      {0x400, 0x4FF},     {0x300, 0x36F},
      {0x4E00, 0x9FFF}, {0x3040, 0x30FF}, {0x1F300, 0x1F6FF}, {0x10000, 0x10FFFF}};
  std::string s;
  for (size_t i = 0; i < chars; ++i) {
    const auto& [lo, hi] = ranges[rng() % std::size(ranges)];
    char32_t cp = lo + static_cast<char32_t>(rng() % (hi - lo + 1));
    if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';
    if ((cp & 0xFFFE) == 0xFFFE) cp = 'y';
    append_utf8(s, cp);
  }
  return s;
}

// Byte-level models reproduce any text exactly (Qwen3 after its NFC normalizer).
class ByteLevelRoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(ByteLevelRoundTrip, VectorTextsAndRandomText) {
  D0_SKIP_WITHOUT_SHARED();
  const std::string model = GetParam();
  auto tok = shared_tokenizer(model);
  ASSERT_NE(tok, nullptr);
  const bool normalizes = model == "qwen3";
  const std::string file = model == "gpt-oss" ? "o200k_harmony_vectors.jsonl" : "vectors.jsonl";
  for (const std::string& text : vector_texts(model, file)) {
    const std::string want = normalizes ? nfc(text) : text;
    EXPECT_EQ(tok->decode(tok->encode(text)), want) << nlohmann::json(text).dump();
  }
  std::mt19937 rng(1234);
  for (int i = 0; i < 200; ++i) {
    const std::string text = random_text(rng, 1 + rng() % 60);
    const std::string want = normalizes ? nfc(text) : text;
    ASSERT_EQ(tok->decode(tok->encode(text)), want) << nlohmann::json(text).dump();
  }
}

INSTANTIATE_TEST_SUITE_P(Shared, ByteLevelRoundTrip,
                         ::testing::Values("llama-3", "qwen3", "deepseek-v3", "gpt-oss", "kimi-k2"),
                         [](const auto& param_info) {
                           std::string n = param_info.param;
                           for (char& ch : n) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return n;
                         });

// SentencePiece-style models: the decoder strips the one leading space the encoder adds. As in the
// reference, Mistral's Metaspace(prepend_scheme="first") adds none to a text that already starts with a
// space, so that text loses it; Mixtral's legacy Prepend normalizer adds a space after every added
// token. Other texts round-trip exactly.
TEST(SentencePieceRoundTrip, TextsWithoutLeadingSpaceOrAddedTokens) {
  D0_SKIP_WITHOUT_SHARED();
  for (const std::string model : {"mistral-7b-instruct-v0.3", "mixtral-8x7b-v0.1"}) {
    auto tok = shared_tokenizer(model);
    ASSERT_NE(tok, nullptr);
    size_t checked = 0;
    for (const std::string& text : vector_texts(model, "vectors.jsonl")) {
      if (!text.empty() && text[0] == ' ' && model == "mistral-7b-instruct-v0.3") {
        const auto ids = tok->encode(text);
        EXPECT_EQ(tok->decode(ids), text.substr(1)) << model << " " << nlohmann::json(text).dump();
        continue;
      }
      bool has_added = false;
      for (int32_t id : tok->encode(text)) has_added = has_added || tok->is_special(id);
      if (has_added && model == "mixtral-8x7b-v0.1") continue;
      EXPECT_EQ(tok->decode(tok->encode(text)), text) << model << " " << nlohmann::json(text).dump();
      ++checked;
    }
    EXPECT_GT(checked, 70u);
    std::mt19937 rng(99);
    for (int i = 0; i < 200; ++i) {
      std::string text = random_text(rng, 1 + rng() % 60);
      if (text[0] == ' ') text[0] = 'a';
      ASSERT_EQ(tok->decode(tok->encode(text)), text) << model << " " << nlohmann::json(text).dump();
    }
  }
}

// Invalid UTF-8 is repaired like Python's bytes.decode("utf-8", "replace"): each maximal invalid
// subsequence becomes U+FFFD, then the text is encoded as usual.
TEST(InvalidUtf8, EncodesLikeReplacementCharacterAndNeverCrashes) {
  D0_SKIP_WITHOUT_SHARED();
  auto tok = shared_tokenizer("llama-3");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->encode("a\xff"
                        "b"),
            tok->encode("a\xEF\xBF\xBD"
                        "b"));
  EXPECT_EQ(tok->encode("\xE2\x82"), tok->encode("\xEF\xBF\xBD"));  // truncated 3-byte sequence: one U+FFFD
  EXPECT_EQ(tok->encode("\xC0\xAF"), tok->encode("\xEF\xBF\xBD\xEF\xBF\xBD"));  // overlong: two
  std::mt19937 rng(7);
  for (int i = 0; i < 300; ++i) {
    std::string bytes(rng() % 40, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    const auto ids = tok->encode(bytes);
    const std::string back = tok->decode(ids);
    EXPECT_TRUE(tokenizer::is_valid_utf8(back));
    EXPECT_EQ(back, tokenizer::sanitize_utf8(bytes));
  }
  // Ids outside the vocabulary are skipped when decoding; partial byte tokens become U+FFFD.
  const std::vector<int32_t> odd = {-5, 1 << 30, 9906};
  EXPECT_EQ(tok->decode(odd), "Hello");
}

}  // namespace
}  // namespace day0::testing
