// DeepSeek-V4 end to end through the CLI on its transformers-written golden (every layer kind, hash
// layers, 4 hyper-connected streams): run generates, align passes and names the tied indexer selection
// it stopped at, inspect / verify / coverage / plan treat it as any family the engine runs.
#include <gtest/gtest.h>

#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "day0/align/reference_dump.h"

namespace day0::testing {
namespace {

const std::string kGolden = std::string(DAY0_TEST_DATA_DIR) + "/golden/deepseek-v4";

// Prompt 0 of the golden has no tied selection: run's greedy tokens are transformers' continuation.
TEST(DeepseekV4Cli, RunGivesTransformersGreedyContinuation) {
  auto ref = read_reference_dump(kGolden + "/reference.safetensors");
  ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
  const ReferencePrompt& p = ref->prompts.front();
  ASSERT_FALSE(p.greedy_ids.empty());
  const std::string ids = fmt::format("{}", fmt::join(p.input_ids, ","));
  CliResult r =
      run_cli({"run", kGolden, "--prompt-ids", ids, "--max-new", std::to_string(p.greedy_ids.size()),
               "--dtype", "f32", "--kv-dtype", "f32", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tokens"].get<std::vector<int64_t>>(), p.greedy_ids) << r.out;
}

// The golden's prompt 1 ties at greedy step 3 (tests/runtime/hyper_connection_engine_test.cpp): align
// compares up to it, says so in both outputs, and passes on the rest.
TEST(DeepseekV4Cli, AlignPassesAndReportsTheTiedSelection) {
  const std::string ref = kGolden + "/reference.safetensors";
  CliResult text = run_cli({"align", kGolden, "--reference", ref, "--dtype", "f32", "--kv-dtype", "f32"});
  EXPECT_EQ(text.exit_code, 0) << text.out << text.err;
  EXPECT_NE(text.out.find("greedy step 3 ties"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("verdict: PASS"), std::string::npos) << text.out;
  CliResult json =
      run_cli({"align", kGolden, "--reference", ref, "--dtype", "f32", "--kv-dtype", "f32", "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const auto j = nlohmann::json::parse(json.out);
  ASSERT_EQ(j["selection_tie_cuts"].size(), 1u) << json.out;
  EXPECT_EQ(j["selection_tie_cuts"][0]["prompt"], 1);
  EXPECT_EQ(j["selection_tie_cuts"][0]["greedy_steps_compared"], 3);
}

TEST(DeepseekV4Cli, InspectCountsEveryLayerKind) {
  CliResult text = run_cli({"inspect", kGolden});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_EQ(text.out.find("Not runnable yet"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("compressed sparse (1 entry / 4 tokens"), std::string::npos) << text.out;
  CliResult json = run_cli({"inspect", "deepseek-v4-flash", "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const auto j = nlohmann::json::parse(json.out);
  EXPECT_TRUE(j["unimplemented_mechanisms"].empty());
  EXPECT_GT(j["params"]["mtp"].get<int64_t>(), 0);
  EXPECT_EQ(j["kv_cache"]["layer_kinds"].size(), 3u);
  EXPECT_TRUE(j["unknown_config_keys"].empty()) << j["unknown_config_keys"].dump();
}

TEST(DeepseekV4Cli, VerifyPassesOnTheTransformersWrittenCheckpoint) {
  CliResult r = run_cli({"verify", kGolden});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
}

// coverage places the recorded op list: the shared K=V attention, compressor, indexer and
// hyper-connection kernels among them.
TEST(DeepseekV4Cli, CoveragePlacesEveryOp) {
  CliResult json = run_cli({"coverage", kGolden, "--json"});
  EXPECT_EQ(json.exit_code, 0) << json.out << json.err;
  const auto j = nlohmann::json::parse(json.out);
  EXPECT_TRUE(j["ok"].get<bool>()) << json.out;
  EXPECT_FALSE(j.contains("unimplemented_mechanisms") && !j["unimplemented_mechanisms"].empty());
  const std::string ops = j.dump();
  for (const char* op : {"indexer_topk", "kv_compress", "hc_"})
    EXPECT_NE(ops.find(op), std::string::npos) << op << " in " << ops.substr(0, 2000);
}

// plan places Flash on one 8xH200 node, and no plan says the engine lacks a block for it.
TEST(DeepseekV4Cli, PlanPlacesFlashOnOneH200Node) {
  CliResult r = run_cli({"plan", "deepseek-v4-flash", "--cluster", "8xH200", "--json", "--top", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_FALSE(j["plans"].empty()) << r.out;
  for (const auto& plan : j["plans"]) {
    if (plan.contains("launch_not_runnable")) {
      EXPECT_EQ(plan["launch_not_runnable"].get<std::string>().find("no block"), std::string::npos)
          << plan.dump();
    }
  }
}

// plan --tp asks for one TP degree: 16 splits Flash's 64 heads but not its 8 output projection groups, so
// it is refused with the numbers; 8 is planned, every plan at TP 8.
TEST(DeepseekV4Cli, PlanRefusesATensorParallelismThatSplitsAnOutputGroup) {
  CliResult refused = run_cli({"plan", "deepseek-v4-flash", "--cluster", "2x8xH200", "--allow-cross-node-tp",
                               "--tp", "16", "--json"});
  EXPECT_NE(refused.exit_code, 0) << refused.out;
  EXPECT_NE(refused.err.find("8 output projection groups (o_groups) do not divide into 16 parts"),
            std::string::npos)
      << refused.err;
  CliResult r = run_cli({"plan", "deepseek-v4-flash", "--cluster", "2x8xH200", "--tp", "8", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_FALSE(j["plans"].empty()) << r.out;
  for (const auto& plan : j["plans"]) EXPECT_EQ(plan["tp"], 8) << plan.dump();
}

}  // namespace
}  // namespace day0::testing
