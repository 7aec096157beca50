// `day0 run --prompt` / `--chat`: text in, text out through the model's tokenizer and chat template.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace day0::testing {
namespace {

namespace fs = std::filesystem;

class RunText : public ::testing::Test {
 protected:
  void SetUp() override {
    tokenizer_ = std::string(DAY0_SHARED_DIR) + "/tokenizers/mistral-7b-instruct-v0.3";
    if (!fs::exists(tokenizer_)) GTEST_SKIP() << "shared tokenizers not found at " << tokenizer_;
    dir_ = make_temp_dir("day0_run_text_");
    // A miniature whose vocabulary matches the Mistral tokenizer's 32768 ids.
    CliResult synth = run_cli({"synth", "llama-3.1-8b", "--out", dir_ + "/model", "--vocab", "32768"});
    ASSERT_EQ(synth.exit_code, 0) << synth.err;
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  std::string tokenizer_, dir_;
};

TEST_F(RunText, PromptIsEncodedWithTheTokenizerAndTheCompletionDecoded) {
  CliResult r = run_cli({"run", dir_ + "/model", "--prompt", "Hello, world", "--tokenizer", tokenizer_,
                         "--max-new", "6", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  // "<s>" + the SentencePiece pieces of the text, exactly as tokenize says.
  CliResult ids = run_cli({"tokenize", tokenizer_, "Hello, world", "--json"});
  ASSERT_EQ(ids.exit_code, 0) << ids.err;
  auto expected = nlohmann::json::parse(ids.out)["ids"];
  EXPECT_EQ(j["prompt_tokens"].get<size_t>(), expected.size());
  ASSERT_TRUE(j.contains("text"));
  // The text is the decoding of the generated ids, special tokens left out.
  std::string id_list;
  for (const auto& t : j["tokens"]) {
    if (!id_list.empty()) id_list.push_back(',');
    id_list.append(std::to_string(t.get<int>()));
  }
  CliResult decoded = run_cli({"tokenize", tokenizer_, "--decode", id_list, "--skip-special", "--json"});
  ASSERT_EQ(decoded.exit_code, 0) << decoded.err;
  EXPECT_EQ(nlohmann::json::parse(decoded.out)["text"], j["text"]);
}

TEST_F(RunText, ChatMessagesGoThroughTheTemplate) {
  const std::string chat = dir_ + "/chat.json";
  std::ofstream(chat) << R"([{"role": "user", "content": "Hi there"}])";
  CliResult r = run_cli(
      {"run", dir_ + "/model", "--chat", chat, "--tokenizer", tokenizer_, "--max-new", "3", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  CliResult rendered = run_cli({"tokenize", tokenizer_, "--chat", chat, "--json"});
  ASSERT_EQ(rendered.exit_code, 0) << rendered.err;
  EXPECT_EQ(j["prompt_tokens"].get<size_t>(), nlohmann::json::parse(rendered.out)["ids"].size());
}

TEST_F(RunText, InteractiveChatAnswersEachLine) {
  CliResult r =
      run_cli({"run", dir_ + "/model", "--interactive", "--tokenizer", tokenizer_, "--max-new", "3"}, "",
              "Hi there\nAnd again\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  size_t replies = 0;
  for (size_t at = r.out.find("assistant> "); at != std::string::npos;
       at = r.out.find("assistant> ", at + 1)) {
    ++replies;
  }
  EXPECT_EQ(replies, 2u) << r.out;
  CliResult bad = run_cli({"run", dir_ + "/model", "--interactive", "--prompt", "x"});
  EXPECT_EQ(bad.exit_code, 2);
}

TEST_F(RunText, BadTextInputsAreExitTwo) {
  CliResult both = run_cli({"run", dir_ + "/model", "--prompt", "x", "--prompt-ids", "1,2"});
  EXPECT_EQ(both.exit_code, 2);
  CliResult none = run_cli({"run", dir_ + "/model"});
  EXPECT_EQ(none.exit_code, 2);
  const std::string bad_chat = dir_ + "/bad.json";
  std::ofstream(bad_chat) << R"({"not": "messages"})";
  CliResult chat = run_cli({"run", dir_ + "/model", "--chat", bad_chat, "--tokenizer", tokenizer_});
  EXPECT_EQ(chat.exit_code, 2);
  EXPECT_NE(chat.err.find("messages"), std::string::npos) << chat.err;
  // A tokenizer whose ids exceed the model's vocabulary is refused, naming the id.
  CliResult small = run_cli({"synth", "llama-3.1-8b", "--out", dir_ + "/small"});
  ASSERT_EQ(small.exit_code, 0) << small.err;
  CliResult vocab = run_cli({"run", dir_ + "/small", "--prompt", "Hello, world", "--tokenizer", tokenizer_});
  EXPECT_EQ(vocab.exit_code, 2);
  EXPECT_NE(vocab.err.find("outside the model's vocabulary"), std::string::npos) << vocab.err;
}

}  // namespace
}  // namespace day0::testing
