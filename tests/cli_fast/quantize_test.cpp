// `day0 quantize` end to end: the output is a checkpoint every other command accepts, and bad usage
// exits 2 with the reason.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace day0::testing {
namespace {

namespace fs = std::filesystem;

const std::string kLlama = std::string(DAY0_TEST_DATA_DIR) + "/golden/llama3";

class CliQuantize : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir("day0_quantize_cli_"); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(CliQuantize, WritesACheckpointTheOtherCommandsAccept) {
  const std::string out = dir_ + "/int4";
  CliResult q =
      run_cli({"quantize", kLlama, "--to", "int4", "--group", "32", "--asymmetric", "--out", out, "--json"});
  ASSERT_EQ(q.exit_code, 0) << q.out << q.err;
  const auto j = nlohmann::json::parse(q.out);
  EXPECT_EQ(j["scheme"], "int4 g32 asym");
  EXPECT_EQ(j["quantized_tensors"], 14);
  EXPECT_LT(j["bytes_out"].get<uint64_t>(), j["bytes_in"].get<uint64_t>());
  EXPECT_NE(q.err.find("quantizing"), std::string::npos) << "progress on stderr: " << q.err;

  std::ifstream config_file(out + "/config.json");
  const auto config = nlohmann::json::parse(config_file);
  EXPECT_EQ(config["quantization_config"]["format"], "pack-quantized");
  EXPECT_EQ(config["quantization_config"]["config_groups"]["group_0"]["weights"]["symmetric"], false);

  CliResult verify = run_cli({"verify", out});
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
  CliResult inspect = run_cli({"inspect", out});
  EXPECT_EQ(inspect.exit_code, 0) << inspect.out << inspect.err;
  EXPECT_NE(inspect.out.find("int4 g32 asym projections"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find("checkpoint (int4 g32 asym)"), std::string::npos) << inspect.out;
  CliResult plan = run_cli({"plan", out, "--cluster", "8xH200", "--context", "256"});
  EXPECT_EQ(plan.exit_code, 0) << plan.out << plan.err;
  CliResult coverage = run_cli({"coverage", out});
  EXPECT_EQ(coverage.exit_code, 0) << coverage.out << coverage.err;
  CliResult run = run_cli({"run", out, "--prompt-ids", "1,2,3", "--max-new", "3"});
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
}

TEST_F(CliQuantize, BadUsageExitsTwo) {
  CliResult help = run_cli({"quantize", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("--asymmetric"), std::string::npos);
  EXPECT_EQ(run_cli({"quantize", kLlama, "--out", dir_ + "/a"}).exit_code, 2);  // no --to
  EXPECT_EQ(run_cli({"quantize", kLlama, "--to", "int3", "--out", dir_ + "/a"}).exit_code, 2);
  EXPECT_EQ(run_cli({"quantize", kLlama, "--to", "int4", "--group", "48", "--out", dir_ + "/a"}).exit_code,
            2);
  EXPECT_EQ(run_cli({"quantize", kLlama, "--to", "int4", "--symmetric", "--asymmetric", "--out", dir_ + "/a"})
                .exit_code,
            2);
  CliResult divide = run_cli({"quantize", std::string(DAY0_TEST_DATA_DIR) + "/golden/qwen3", "--to", "int8",
                              "--group", "64", "--out", dir_ + "/a"});
  EXPECT_EQ(divide.exit_code, 2) << divide.err;
  EXPECT_NE(divide.err.find("o_proj.weight"), std::string::npos) << divide.err;
  EXPECT_FALSE(fs::exists(dir_ + "/a"));
  CliResult head = run_cli({"quantize", kLlama, "--to", "int4", "--head", "int4", "--out", dir_ + "/a"});
  EXPECT_EQ(head.exit_code, 2) << head.err;
  EXPECT_NE(head.err.find("--head: int4 not in {keep,int8}"), std::string::npos) << head.err;
  EXPECT_NE(help.out.find("--head"), std::string::npos);
  CliResult catalog = run_cli({"quantize", "deepseek-v3", "--to", "int4", "--out", dir_ + "/a"});
  EXPECT_EQ(catalog.exit_code, 2) << catalog.err;
}

}  // namespace
}  // namespace day0::testing
