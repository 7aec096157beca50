// Pipeline stages on small hand-written tokenizer.json files: BPE merge order, byte fallback, added-token
// flags, split behaviours, normalizers, gzip, and errors that name the unsupported component and file.
#include <gtest/gtest.h>
#include <zlib.h>

#include <unistd.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "day0/tokenizer/regex.h"
#include "day0/tokenizer/tokenizer.h"

namespace day0::testing {
namespace {

using json = nlohmann::json;
using tokenizer::Tokenizer;

std::filesystem::path temp_file(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("day0_tok_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir / name;
}

// A character-level BPE over a few letters; `extra` overrides top-level keys.
json tiny(json extra = json::object()) {
  json j = {{"model",
             {{"type", "BPE"},
              {"vocab",
               {{"<unk>", 0},
                {"a", 1},
                {"b", 2},
                {"c", 3},
                {"ab", 4},
                {"bc", 5},
                {"abc", 6},
                {" ", 7},
                {"<0x41>", 8},
                {"<0xC3>", 9},
                {"<0xA9>", 10}}},
              {"merges", json::array({"b c", "a bc", "a b"})},
              {"unk_token", "<unk>"}}},
            {"normalizer", nullptr},
            {"pre_tokenizer", nullptr},
            {"decoder", nullptr},
            {"added_tokens", json::array()}};
  for (auto& [k, v] : extra.items()) {
    if (k == "model") {
      for (auto& [mk, mv] : v.items()) j["model"][mk] = mv;
    } else {
      j[k] = v;
    }
  }
  return j;
}

Result<Tokenizer> load(const json& j, const std::string& name = "tokenizer.json") {
  const auto path = temp_file(name);
  std::ofstream(path) << j.dump();
  auto parts = tokenizer::load_tokenizer_json(path);
  if (!parts.is_ok()) return parts.status();
  return Tokenizer(std::move(*parts));
}

TEST(Bpe, LowestRankMergesFirst) {
  auto tok = load(tiny());
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  EXPECT_EQ(tok->encode("abc"), (std::vector<int32_t>{6}));  // b+c first, then a+bc
  EXPECT_EQ(tok->encode("ab"), (std::vector<int32_t>{4}));
  auto reordered = load(tiny({{"model", {{"merges", json::array({"a b", "b c", "a bc"})}}}}));
  ASSERT_TRUE(reordered.is_ok());
  EXPECT_EQ(reordered->encode("abc"), (std::vector<int32_t>{4, 3}));  // a+b wins, then no ab+c merge
}

TEST(Bpe, IgnoreMergesEmitsWholeVocabWords) {
  auto tok = load(tiny({{"model", {{"merges", json::array({"a b"})}, {"ignore_merges", true}}}}));
  ASSERT_TRUE(tok.is_ok());
  EXPECT_EQ(tok->encode("abc"), (std::vector<int32_t>{6}));
  auto without = load(tiny({{"model", {{"merges", json::array({"a b"})}}}}));
  EXPECT_EQ(without->encode("abc"), (std::vector<int32_t>{4, 3}));
}

TEST(Bpe, UnknownCharactersUseByteFallbackThenUnk) {
  auto tok = load(tiny({{"model", {{"byte_fallback", true}, {"fuse_unk", true}}}}));
  ASSERT_TRUE(tok.is_ok());
  EXPECT_EQ(tok->encode("a\xC3\xA9"), (std::vector<int32_t>{1, 9, 10}));  // é -> <0xC3><0xA9>
  EXPECT_EQ(tok->encode("azzb"), (std::vector<int32_t>{1, 0, 2}));        // no <0x7A>: one fused unk
  auto plain = load(tiny());
  EXPECT_EQ(plain->encode("azzb"), (std::vector<int32_t>{1, 0, 0, 2}));
}

TEST(Decoders, ByteFallbackFuseStripRebuildText) {
  json dec = {{"type", "Sequence"},
              {"decoders", json::array({{{"type", "ByteFallback"}},
                                        {{"type", "Fuse"}},
                                        {{"type", "Strip"}, {"content", "a"}, {"start", 1}, {"stop", 0}}})}};
  auto tok = load(tiny({{"decoder", dec}, {"model", {{"byte_fallback", true}}}}));
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  const std::vector<int32_t> ids = {1, 9, 10, 2, 8};
  EXPECT_EQ(tok->decode(ids),
            "\xC3\xA9"
            "bA");
  const std::vector<int32_t> broken = {9, 2};  // a lone lead byte
  EXPECT_EQ(tok->decode(broken),
            "\xEF\xBF\xBD"
            "b");
}

TEST(AddedTokens, StripFlagsAndSingleWord) {
  json added =
      json::array({{{"id", 20}, {"content", "<x>"}, {"special", true}, {"lstrip", true}, {"rstrip", true}},
                   {{"id", 21}, {"content", "ab"}, {"special", false}, {"single_word", true}}});
  auto tok = load(tiny({{"added_tokens", added}}));
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  EXPECT_EQ(tok->encode("a <x> b"), (std::vector<int32_t>{1, 20, 2}));       // spaces swallowed
  EXPECT_EQ(tok->encode("c ab c"), (std::vector<int32_t>{3, 7, 21, 7, 3}));  // whole word: added token
  EXPECT_EQ(tok->encode("cabc"), (std::vector<int32_t>{3, 6}));              // inside a word: plain BPE
  EXPECT_EQ(tok->encode("a<x>b", {.split_special_tokens = true}), (std::vector<int32_t>{1, 0, 0, 0, 2}));
}

// Found by make fuzz-long: an id too large for int64 is parsed as a float; converting it was undefined.
TEST(AddedTokens, AnIdThatIsNotAnIntegerIsAParseError) {
  for (const json& id : {json(2.9e75), json(20.5), json("20")}) {
    auto tok =
        load(tiny({{"added_tokens", json::array({{{"id", id}, {"content", "<x>"}, {"special", true}}})}}));
    ASSERT_FALSE(tok.is_ok()) << id.dump();
    EXPECT_EQ(tok.status().code(), StatusCode::kParseError) << tok.status().to_string();
    EXPECT_NE(tok.status().message().find("id is not an integer"), std::string::npos)
        << tok.status().to_string();
  }
}

TEST(PreTokenizers, SplitBehaviours) {
  auto with_split = [](const std::string& behavior, bool invert = false) {
    json pre = {
        {"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", behavior}, {"invert", invert}};
    return load(
        tiny({{"pre_tokenizer", pre}, {"model", {{"merges", json::array()}, {"ignore_merges", true}}}}));
  };
  EXPECT_EQ(with_split("Removed")->encode("ab  c"), (std::vector<int32_t>{4, 3}));
  EXPECT_EQ(with_split("Isolated")->encode("ab c"), (std::vector<int32_t>{4, 7, 3}));
  EXPECT_EQ(with_split("MergedWithNext")->encode("ab c"), (std::vector<int32_t>{4, 7, 3}));
  EXPECT_EQ(with_split("Removed", true)->encode("ab c"), (std::vector<int32_t>{7}));
  auto contiguous = with_split("Contiguous");
  EXPECT_EQ(contiguous->encode("ab  c"), (std::vector<int32_t>{4, 7, 7, 3}));
}

TEST(Normalizers, SequenceOfPrependReplaceStripAndNfkc) {
  json norm = {
      {"type", "Sequence"},
      {"normalizers", json::array({{{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}},
                                   {{"type", "NFKC"}},
                                   {{"type", "Replace"}, {"pattern", {{"Regex", "c+"}}}, {"content", "b"}},
                                   {{"type", "Prepend"}, {"prepend", "a"}}})}};
  auto tok = load(tiny({{"normalizer", norm}}));
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  // "  ｂccc " -> strip -> NFKC "bccc" -> "bb" -> "abb"
  EXPECT_EQ(tok->encode("  \xEF\xBD\x82"
                        "ccc "),
            (std::vector<int32_t>{4, 2}));
  EXPECT_TRUE(tok->encode("").empty());  // Prepend leaves empty text empty
}

TEST(Loading, GzipTokenizerJson) {
  const auto path = temp_file("tokenizer.json.gz");
  const std::string text = tiny().dump();
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
  gzclose(f);
  auto parts = tokenizer::load_tokenizer_json(path);
  ASSERT_TRUE(parts.is_ok()) << parts.status().to_string();
  EXPECT_EQ(Tokenizer(std::move(*parts)).encode("abc"), (std::vector<int32_t>{6}));
  std::ofstream(path) << "not gzip at all";
  EXPECT_FALSE(tokenizer::load_tokenizer_json(path).is_ok());
}

TEST(Loading, UnsupportedComponentsAreNamedWithTheFile) {
  struct Case {
    json extra;
    std::string component;
  };
  const Case cases[] = {
      {{{"model", {{"type", "WordPiece"}}}}, "WordPiece"},
      {{{"normalizer", {{"type", "BertNormalizer"}}}}, "BertNormalizer"},
      {{{"pre_tokenizer", {{"type", "Punctuation"}}}}, "Punctuation"},
      {{{"decoder", {{"type", "CTC"}}}}, "CTC"},
      {{{"post_processor", {{"type", "RobertaProcessing"}}}}, "RobertaProcessing"},
      {{{"model", {{"dropout", 0.1}}}}, "dropout"},
  };
  for (const Case& c : cases) {
    auto tok = load(tiny(c.extra), "bad_tokenizer.json");
    ASSERT_FALSE(tok.is_ok()) << c.component;
    EXPECT_EQ(tok.status().code(), StatusCode::kUnsupported) << tok.status().to_string();
    EXPECT_NE(tok.status().message().find(c.component), std::string::npos) << tok.status().to_string();
    EXPECT_NE(tok.status().message().find("bad_tokenizer.json"), std::string::npos)
        << tok.status().to_string();
  }
  auto missing_merge = load(tiny({{"model", {{"merges", json::array({"a zz"})}}}}));
  EXPECT_EQ(missing_merge.status().code(), StatusCode::kParseError);
  auto folder = tokenizer::load_tokenizer(temp_file("empty_dir_marker").parent_path() / "no_such_folder");
  EXPECT_EQ(folder.status().code(), StatusCode::kNotFound);
}

TEST(Regex, RustClassIntersectionBecomesLookahead) {
  auto t = tokenizer::translate_rust_regex(R"([\p{L}&&[^\p{Han}]]+|x)");
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ(*t, R"((?:(?![\p{Han}])[\p{L}])+|x)");
  auto re = tokenizer::Regex::compile(R"([\p{L}&&[^\p{Han}]]+)");
  ASSERT_TRUE(re.is_ok());
  std::vector<std::string> found;
  const std::string text =
      "ab\xE4\xB8\xAD"
      "cd";  // "ab中cd"
  re->for_each_match(text, [&](size_t b, size_t e) { found.push_back(text.substr(b, e - b)); });
  EXPECT_EQ(found, (std::vector<std::string>{"ab", "cd"}));
  EXPECT_FALSE(tokenizer::Regex::compile("(unclosed").is_ok());
}

}  // namespace
}  // namespace day0::testing
