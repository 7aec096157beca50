// day0 tokenize as a user runs it, on the shared Llama-3 / Qwen3 tokenizers.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace day0::testing {
namespace {

std::string shared_model(const std::string& name) {
  const auto p = std::filesystem::path(DAY0_SHARED_DIR) / "tokenizers" / name;
  return std::filesystem::is_directory(p) ? p.string() : std::string();
}

#define SKIP_WITHOUT(model) \
  if (model.empty()) GTEST_SKIP() << "shared tokenizer data not found under " DAY0_SHARED_DIR ": skipped"

TEST(TokenizeCli, PrintsIdsWithBosAndPiecesTable) {
  const std::string model = shared_model("llama-3");
  SKIP_WITHOUT(model);
  CliResult r = run_cli({"tokenize", model, "Hello world"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "128000 9906 1917\n");
  r = run_cli({"tokenize", model, "Hello world", "--no-add-special", "--pieces"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("9906  \"Hello\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1917  \"\xC4\xA0world\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 tokens"), std::string::npos) << r.out;
}

// No input is a usage error (exit 2, the sources named); an explicit "" is the empty text.
TEST(TokenizeCli, NoInputIsAnErrorAndEmptyTextIsNot) {
  const std::string model = shared_model("llama-3");
  SKIP_WITHOUT(model);
  CliResult r = run_cli({"tokenize", model});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.err.find("give TEXT, --file, --decode or --chat"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  r = run_cli({"tokenize", model, ""});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "128000\n");
}

TEST(TokenizeCli, JsonEncodeDecodeAndFile) {
  const std::string model = shared_model("llama-3");
  SKIP_WITHOUT(model);
  const std::string dir = make_temp_dir("day0_tokenize_");
  const std::string file = dir + "/text.txt";
  std::ofstream(file) << "Hello world";
  CliResult r = run_cli({"tokenize", model, "--file", file, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["ids"], nlohmann::json({128000, 9906, 1917}));
  EXPECT_EQ(j["pieces"], nlohmann::json({"<|begin_of_text|>", "Hello", "\xC4\xA0world"}));
  r = run_cli({"tokenize", model, "--decode", "128000, 9906,1917", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["text"], "<|begin_of_text|>Hello world");
  r = run_cli({"tokenize", model, "--decode", "9906,1917"});
  EXPECT_EQ(r.out, "Hello world\n");
  std::filesystem::remove_all(dir);
}

TEST(TokenizeCli, ChatRendersTemplateThenEncodes) {
  const std::string model = shared_model("qwen3");
  SKIP_WITHOUT(model);
  const std::string dir = make_temp_dir("day0_tokenize_");
  const std::string msgs = dir + "/messages.json";
  std::ofstream(msgs) << R"([{"role": "user", "content": "Hi"}])";
  CliResult r = run_cli({"tokenize", model, "--chat", msgs, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["text"], "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(j["ids"].front(), 151644);  // <|im_start|>, no BOS added on top of the template
  EXPECT_EQ(j["ids"].size(), j["pieces"].size());
  std::filesystem::remove_all(dir);
}

TEST(TokenizeCli, BadInputsExitTwo) {
  const std::string model = shared_model("llama-3");
  SKIP_WITHOUT(model);
  EXPECT_EQ(run_cli({"tokenize", model, "--decode", "1,x"}).exit_code, 2);
  EXPECT_EQ(run_cli({"tokenize", model, "text", "--decode", "1"}).exit_code, 2);
  EXPECT_EQ(run_cli({"tokenize", "/nonexistent/model", "text"}).exit_code, 2);
  CliResult r = run_cli({"tokenize", model, "--chat", "/nonexistent/messages.json"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("messages.json"), std::string::npos) << r.err;
  EXPECT_EQ(run_cli({"tokenize", "--help"}).exit_code, 0);
}

}  // namespace
}  // namespace day0::testing
