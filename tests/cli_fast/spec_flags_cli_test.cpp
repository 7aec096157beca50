// `--spec` beyond `run`: `serve` and `bench` take the same flags with the same checks (--spec mtp refused
// on a checkpoint without MTP layers), `serve` its draft-row cap; `bench --spec ngram` and
// `--spec self-int4` report plain and speculative decode speed side by side, with the tokens checked
// equal, in the table and in --json.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace day0::testing {
namespace {

const std::string kGolden = std::string(DAY0_TEST_DATA_DIR) + "/golden/llama3";

TEST(CliSpecFlags, ServeAndBenchRefuseBadValuesClearly) {
  const struct {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      {{"serve", kGolden, "--spec", "mtp"}, "the checkpoint has no multi-token-prediction layers"},
      {{"bench", kGolden, "-p", "8", "--spec", "mtp"}, "the checkpoint has no multi-token-prediction layers"},
      {{"serve", kGolden, "--spec", "medusa"}, "--spec"},
      {{"serve", kGolden, "--spec", "ngram", "--spec-tokens", "17"}, "--spec-tokens"},
      {{"serve", kGolden, "--spec-tokens", "3"},
       "--spec-tokens needs --spec ngram or --spec self-int4, found --spec none"},
      {{"serve", kGolden, "--spec", "self-int4", "--spec-draft", "/nonexistent/draft"}, "/nonexistent/draft"},
      {{"serve", kGolden, "--spec", "ngram", "--spec-max-rows", "-1"}, "--spec-max-rows"},
      {{"serve", kGolden, "--spec-max-rows", "4"},
       "--spec-max-rows needs --spec ngram or --spec self-int4, found --spec none"},
      {{"serve", kGolden, "--spec", "ngram", "--spec-draft", "/tmp"},
       "--spec-draft needs --spec self-int4, found --spec ngram"},
      {{"bench", kGolden, "--spec", "ngram", "--spec-tokens", "0"}, "--spec-tokens"},
      {{"bench", kGolden, "--spec-tokens", "2"},
       "--spec-tokens needs --spec ngram or --spec self-int4, found --spec none"},
      {{"bench", kGolden, "-p", "8", "--spec", "self-int4", "--spec-draft", "/nonexistent/draft"},
       "/nonexistent/draft"},
  };
  for (const auto& c : cases) {
    const CliResult r = run_cli(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.message << "\n" << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.message << "\n" << r.err;
  }
  for (const char* command : {"serve", "bench"}) {
    const CliResult help = run_cli({command, "--help"});
    for (const char* flag : {"--spec ", "--spec-tokens", "--spec-draft"})
      EXPECT_NE(help.out.find(flag), std::string::npos) << command << " " << flag;
  }
  EXPECT_NE(run_cli({"serve", "--help"}).out.find("--spec-max-rows"), std::string::npos);
}

TEST(CliSpecFlags, BenchComparesPlainAndSpeculativeDecoding) {
  // The INT4 copy quantized at load drafts: the same tokens as plain decoding.
  {
    const CliResult r = run_cli({"bench", kGolden, "-p", "8", "-n", "16", "-r", "1", "--no-limits", "--spec",
                                 "self-int4", "--spec-tokens", "2", "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto doc = nlohmann::json::parse(r.out);
    const auto& s = doc["speculative"][0];
    EXPECT_EQ(s["source"], "self-int4");
    EXPECT_TRUE(s["same_tokens"].get<bool>());
    EXPECT_GT(s["drafted"].get<int64_t>(), 0);
    EXPECT_EQ(s["accepted"].get<int64_t>() + s["verify_steps"].get<int64_t>(), 15);
  }
  const std::vector<std::string> args = {"bench", kGolden, "-p",          "8",      "-n",    "24",
                                         "-r",    "1",     "--no-limits", "--spec", "ngram", "--spec-tokens",
                                         "3"};
  std::vector<std::string> json_args = args;
  json_args.push_back("--json");
  const CliResult r = run_cli(json_args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  ASSERT_EQ(doc["speculative"].size(), 1u);
  const auto& s = doc["speculative"][0];
  EXPECT_EQ(s["test"], "tg24");
  EXPECT_EQ(s["source"], "ngram");
  EXPECT_EQ(s["tokens"], 3);
  EXPECT_TRUE(s["same_tokens"].get<bool>());
  ASSERT_EQ(s["per_position"].size(), 3u);
  EXPECT_LE(s["accepted"].get<int64_t>(), s["drafted"].get<int64_t>());
  // Every token after the first came from a verification step: accepted drafts plus one per step.
  EXPECT_EQ(s["accepted"].get<int64_t>() + s["verify_steps"].get<int64_t>(), 23);
  EXPECT_GT(s["plain_tok_s_mean"].get<double>(), 0.0);
  EXPECT_GT(s["spec_tok_s_mean"].get<double>(), 0.0);
  const CliResult human = run_cli(args);
  ASSERT_EQ(human.exit_code, 0) << human.err;
  EXPECT_NE(human.out.find("speculative decoding: ngram, up to 3 drafts a step"), std::string::npos)
      << human.out;
  EXPECT_NE(human.out.find("tg24: "), std::string::npos) << human.out;
}

// The checkpoint's MTP layer drafts (DeepSeek-V3 and V4 miniatures): the same report fields, the tokens
// of plain decoding, a draft at every step with room for one, counted at every position.
TEST(CliSpecFlags, BenchReportsMtpDrafts) {
  for (const char* golden : {"deepseek-v3-mtp", "deepseek-v4-mtp"}) {
    SCOPED_TRACE(golden);
    const CliResult r =
        run_cli({"bench", std::string(DAY0_TEST_DATA_DIR) + "/golden/" + golden, "-p", "8", "-n", "12", "-r",
                 "1", "--no-limits", "--spec", "mtp", "--spec-tokens", "2", "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto doc = nlohmann::json::parse(r.out);
    ASSERT_EQ(doc["speculative"].size(), 1u);
    const auto& s = doc["speculative"][0];
    EXPECT_EQ(s["source"], "mtp");
    EXPECT_EQ(s["tokens"], 2);
    EXPECT_TRUE(s["same_tokens"].get<bool>());
    ASSERT_EQ(s["per_position"].size(), 2u);
    const auto steps = s["verify_steps"].get<int64_t>();
    EXPECT_EQ(s["accepted"].get<int64_t>() + steps, 11);
    // Every step but the last (no token budget left for a draft) drafts; the one before it only one.
    EXPECT_GE(s["drafted"].get<int64_t>(), steps - 1);
    EXPECT_LE(s["accepted"].get<int64_t>(), s["drafted"].get<int64_t>());
  }
}

}  // namespace
}  // namespace day0::testing
