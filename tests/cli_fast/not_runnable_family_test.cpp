// A family the engine parses, counts and plans but does not run yet (DeepSeek-V4 until its blocks are
// wired), end to end on its transformers-written golden: run, align and serve refuse it with exit 2 naming
// the mechanisms (never a crash, never a missing-tensor error); inspect, verify, coverage and plan work.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace day0::testing {
namespace {

const std::string kGolden = std::string(DAY0_TEST_DATA_DIR) + "/golden/deepseek-v4";

void expect_refused_by_name(const CliResult& r) {
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("not implemented: compressed sparse attention"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("shared key = value attention"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("no tensor"), std::string::npos) << r.err;
}

TEST(NotRunnableFamily, RunAlignAndServeRefuseNamingTheMechanisms) {
  expect_refused_by_name(run_cli({"run", kGolden, "--prompt-ids", "1,2,3", "--max-new", "2"}));
  expect_refused_by_name(run_cli({"align", kGolden, "--reference", kGolden + "/reference.safetensors"}));
  expect_refused_by_name(run_cli_bounded({"serve", kGolden, "--port", "0", "--threads", "1"}, 60.0));
}

TEST(NotRunnableFamily, InspectCountsAndSaysWhatDoesNotRun) {
  CliResult text = run_cli({"inspect", kGolden});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("Not runnable yet"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("compressed sparse (1 entry / 4 tokens"), std::string::npos) << text.out;
  CliResult json = run_cli({"inspect", "deepseek-v4-flash", "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const auto j = nlohmann::json::parse(json.out);
  EXPECT_FALSE(j["unimplemented_mechanisms"].empty());
  EXPECT_GT(j["params"]["mtp"].get<int64_t>(), 0);
  EXPECT_EQ(j["kv_cache"]["layer_kinds"].size(), 3u);
  EXPECT_TRUE(j["unknown_config_keys"].empty()) << j["unknown_config_keys"].dump();
}

TEST(NotRunnableFamily, VerifyPassesOnTheTransformersWrittenCheckpoint) {
  CliResult r = run_cli({"verify", kGolden});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
}

// coverage has no operator list to place: it lists the missing blocks and fails the check (exit 1).
TEST(NotRunnableFamily, CoverageListsTheMissingBlocks) {
  CliResult text = run_cli({"coverage", kGolden});
  EXPECT_EQ(text.exit_code, 1) << text.err;
  EXPECT_NE(text.out.find("missing  compressed sparse attention"), std::string::npos) << text.out;
  CliResult json = run_cli({"coverage", kGolden, "--json"});
  EXPECT_EQ(json.exit_code, 1) << json.err;
  const auto j = nlohmann::json::parse(json.out);
  EXPECT_FALSE(j["ok"].get<bool>());
  EXPECT_FALSE(j["unimplemented_mechanisms"].empty());
}

// plan places Flash on one 8xH200 node; each layout says why day0 cannot launch it yet, no launch line.
TEST(NotRunnableFamily, PlanPlacesFlashOnOneH200Node) {
  CliResult r = run_cli({"plan", "deepseek-v4-flash", "--cluster", "8xH200", "--json", "--top", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_FALSE(j["plans"].empty()) << r.out;
  for (const auto& plan : j["plans"]) {
    EXPECT_FALSE(plan.contains("launch")) << plan.dump();
    EXPECT_NE(plan["launch_not_runnable"].get<std::string>().find("shared key = value attention"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace day0::testing
