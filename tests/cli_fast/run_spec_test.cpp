// `day0 run --spec ngram|self-int4|mtp`: the tokens of plain decoding, the speculation figures in the human
// and JSON output (DeepSeek-V4's compressed KV rolled back too), and clear refusals of bad values and of MTP
// drafts from a checkpoint without MTP layers.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace day0::testing {
namespace {

const std::string kModel = std::string(DAY0_TEST_DATA_DIR) + "/golden/llama3";
const std::vector<std::string> kPrompt = {"--prompt-ids", "5,9,2,6,5,3,5,9,2,6,5,3,5,9", "--max-new", "14"};

std::vector<std::string> run_args(std::vector<std::string> extra) {
  std::vector<std::string> args = {"run", kModel};
  args.insert(args.end(), kPrompt.begin(), kPrompt.end());
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST(RunSpec, EveryDraftSourceGivesPlainDecodingsTokensAndReportsAcceptance) {
  const std::string dir = make_temp_dir("day0_run_spec_");
  const std::string draft = dir + "/int4";
  const CliResult q =
      run_cli({"quantize", kModel, "--to", "int4", "--group", "32", "--out", draft, "--quiet"});
  ASSERT_EQ(q.exit_code, 0) << q.err;
  const CliResult plain = run_cli(run_args({"--json"}));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const auto expected = nlohmann::json::parse(plain.out);
  EXPECT_FALSE(expected.contains("speculative"));
  const std::vector<std::vector<std::string>> variants = {
      {"--spec", "ngram"},
      {"--spec", "ngram", "--spec-tokens", "7"},
      {"--spec", "self-int4", "--spec-draft", draft, "--spec-tokens", "5"},
      {"--spec", "self-int4", "--spec-tokens", "2"}};  // quantized at load
  for (const auto& variant : variants) {
    std::vector<std::string> extra = variant;
    extra.push_back("--json");
    const CliResult r = run_cli(run_args(extra));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto doc = nlohmann::json::parse(r.out);
    EXPECT_EQ(doc["tokens"], expected["tokens"]) << variant[1];
    const auto& spec = doc["speculative"];
    EXPECT_EQ(spec["source"], variant[1]);
    const int64_t k = variant.back() == "ngram" ? 4 : std::stoll(variant.back());
    EXPECT_EQ(spec["tokens"].get<int64_t>(), k);
    ASSERT_EQ(spec["per_position"].size(), static_cast<size_t>(k));
    EXPECT_LE(spec["accepted"].get<int64_t>(), spec["drafted"].get<int64_t>());
    // Every token after the first came from a verification step: accepted drafts plus one per step.
    EXPECT_EQ(spec["accepted"].get<int64_t>() + spec["verify_steps"].get<int64_t>(), 13);
    const double rate = spec["acceptance_rate"].get<double>();
    EXPECT_GE(rate, 0.0);
    EXPECT_LE(rate, 1.0);
    EXPECT_GT(doc["timing"]["decode_tokens_per_second"].get<double>(), 0.0);
  }
  // The prompt repeats itself: the n-gram lookup has drafts, and the human output says how they fared.
  const CliResult human = run_cli(run_args({"--spec", "ngram"}));
  ASSERT_EQ(human.exit_code, 0) << human.err;
  EXPECT_NE(human.out.find("speculative ngram, up to 4 drafts a step:"), std::string::npos) << human.out;
  EXPECT_NE(human.out.find("by position"), std::string::npos) << human.out;
  std::filesystem::remove_all(dir);
}

// The DeepSeek-V3 and DeepSeek-V4 miniatures with one MTP layer (tests/golden/deepseek-v3-mtp, eh_proj;
// tests/golden/deepseek-v4-mtp, over hyper-connection streams): their own drafts, 1 to 3 a step.
TEST(RunSpec, MtpDraftsGivePlainDecodingsTokensAndReportAcceptance) {
  for (const char* golden : {"deepseek-v3-mtp", "deepseek-v4-mtp"}) {
    SCOPED_TRACE(golden);
    const std::string model = std::string(DAY0_TEST_DATA_DIR) + "/golden/" + golden;
    const std::vector<std::string> base = {"run",       model, "--prompt-ids", "5,9,2,6,5,3,5,9,2",
                                           "--max-new", "10"};
    std::vector<std::string> plain_args = base;
    plain_args.push_back("--json");
    const CliResult plain = run_cli(plain_args);
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    const auto expected = nlohmann::json::parse(plain.out);
    for (const char* k : {"1", "2", "3"}) {
      std::vector<std::string> args = base;
      args.insert(args.end(), {"--spec", "mtp", "--spec-tokens", k, "--json"});
      const CliResult r = run_cli(args);
      ASSERT_EQ(r.exit_code, 0) << r.err;
      const auto doc = nlohmann::json::parse(r.out);
      EXPECT_EQ(doc["tokens"], expected["tokens"]) << k;
      const auto& spec = doc["speculative"];
      EXPECT_EQ(spec["source"], "mtp");
      EXPECT_EQ(spec["tokens"].get<int64_t>(), std::stoll(k));
      EXPECT_EQ(spec["accepted"].get<int64_t>() + spec["verify_steps"].get<int64_t>(), 9);
      // A draft every step but the last, which has no token budget left for one.
      EXPECT_GE(spec["drafted"].get<int64_t>(), spec["verify_steps"].get<int64_t>() - 1);
      const double rate = spec["acceptance_rate"].get<double>();
      EXPECT_GE(rate, 0.0);
      EXPECT_LE(rate, 1.0);
    }
    std::vector<std::string> human_args = base;
    human_args.insert(human_args.end(), {"--spec", "mtp"});
    const CliResult human = run_cli(human_args);
    ASSERT_EQ(human.exit_code, 0) << human.err;
    EXPECT_NE(human.out.find("speculative mtp, up to 4 drafts a step:"), std::string::npos) << human.out;
  }
}

// DeepSeek-V4's compressed KV attention: rejected drafts go back to the checkpoint taken before them
// (entries cut, partial groups restored), so n-gram drafts give plain decoding's tokens. (self-int4 is
// refused on this miniature: its experts' 16 columns take no INT4 group size; a draft engine of the same
// weights is tested in tests/runtime/compressed_kv_cache_test.cpp.)
TEST(RunSpec, DraftsOnDeepSeekV4GivePlainDecodingsTokens) {
  const std::string model = std::string(DAY0_TEST_DATA_DIR) + "/golden/deepseek-v4";
  // A prompt with repeats for the n-gram lookup to draft from, which the model does not follow.
  std::vector<std::string> plain_args = {"run",       model, "--prompt-ids", "1,2,3,4,1,2,3,4,1,2,3,4,1,2",
                                         "--max-new", "14",  "--json"};
  const CliResult plain = run_cli(plain_args);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const auto expected = nlohmann::json::parse(plain.out);
  int64_t rejected = 0;
  for (const std::vector<std::string>& variant :
       {std::vector<std::string>{"--spec", "ngram"}, {"--spec", "ngram", "--spec-tokens", "7"}}) {
    std::vector<std::string> args = plain_args;
    args.insert(args.end(), variant.begin(), variant.end());
    const CliResult r = run_cli(args);
    ASSERT_EQ(r.exit_code, 0) << variant[1] << ": " << r.err;
    const auto doc = nlohmann::json::parse(r.out);
    EXPECT_EQ(doc["tokens"], expected["tokens"]) << variant[1];
    const auto& spec = doc["speculative"];
    EXPECT_EQ(spec["accepted"].get<int64_t>() + spec["verify_steps"].get<int64_t>(), 13) << variant[1];
    rejected += spec["drafted"].get<int64_t>() - spec["accepted"].get<int64_t>();
  }
  EXPECT_GT(rejected, 0) << "no draft was rolled back";
}

TEST(RunSpec, BadValuesAndMtpWithoutMtpLayersAreRefusedClearly) {
  const struct {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      {{"--spec", "mtp"},
       "the checkpoint has no multi-token-prediction layers: config.json's num_nextn_predict_layers is 0 or "
       "absent"},
      {{"--spec", "medusa"}, "--spec"},
      {{"--spec", "ngram", "--spec-tokens", "0"}, "--spec-tokens"},
      {{"--spec", "ngram", "--spec-tokens", "17"}, "--spec-tokens"},
      {{"--spec-tokens", "3"}, "--spec-tokens needs --spec ngram or --spec self-int4, found --spec none"},
      {{"--spec", "ngram", "--spec-draft", "/nonexistent"},
       "--spec-draft needs --spec self-int4, found --spec ngram"},
      {{"--spec", "self-int4", "--spec-draft", "/nonexistent/draft"}, "/nonexistent/draft"},
  };
  for (const auto& c : cases) {
    const CliResult r = run_cli(run_args(c.args));
    EXPECT_NE(r.exit_code, 0) << c.message;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.message << "\n" << r.err;
  }
  const CliResult help = run_cli({"run", "--help"});
  for (const char* flag : {"--spec ", "--spec-tokens", "--spec-draft"})
    EXPECT_NE(help.out.find(flag), std::string::npos) << flag;
}

}  // namespace
}  // namespace day0::testing
