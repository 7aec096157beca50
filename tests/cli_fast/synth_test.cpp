#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace day0::testing {
namespace {

TEST(CliSynth, WritesAMiniatureThatVerifies) {
  const std::string dir = make_temp_dir("day0_synth_cli_");
  const std::string out = dir + "/mini";
  CliResult r = run_cli({"synth", "qwen3-30b-a3b", "--out", out, "--seed", "3", "--layers", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("qwen3_moe"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 layers"), std::string::npos) << r.out;
  for (const char* f : {"config.json", "model.safetensors.index.json", "SHA256SUMS"}) {
    EXPECT_TRUE(std::filesystem::exists(out + "/" + f)) << f;
  }
  CliResult v = run_cli({"verify", out});
  EXPECT_EQ(v.exit_code, 0) << v.out << v.err;
  EXPECT_NE(v.out.find("Summary: OK"), std::string::npos) << v.out;
  std::filesystem::remove_all(dir);
}

TEST(CliSynth, JsonOutputAndBadInput) {
  const std::string dir = make_temp_dir("day0_synth_cli_");
  CliResult r = run_cli({"synth", "gpt-oss-20b", "--out", dir + "/m", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["family"], "gpt_oss");
  EXPECT_GT(j["n_tensors"].get<int>(), 10);
  // The target exists and is not empty now: refused, nothing overwritten.
  CliResult again = run_cli({"synth", "gpt-oss-20b", "--out", dir + "/m"});
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_NE(again.err.find("already exists"), std::string::npos) << again.err;
  CliResult unknown = run_cli({"synth", "no-such-model", "--out", dir + "/x"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_FALSE(unknown.err.empty());
  CliResult bad_dims = run_cli({"synth", "gpt-oss-20b", "--out", dir + "/y", "--hidden", "48"});
  EXPECT_EQ(bad_dims.exit_code, 2);
  EXPECT_NE(bad_dims.err.find("multiples of 32"), std::string::npos) << bad_dims.err;
  CliResult no_out = run_cli({"synth", "gpt-oss-20b"});
  EXPECT_EQ(no_out.exit_code, 2);
  std::filesystem::remove_all(dir);
}

// DeepSeek-V4's attention line is the model summary's (inspect's), not one of synth's own: the same text
// for the miniature, naming its kinds of KV layers.
TEST(CliSynth, DeepseekV4StructureDescribesAttentionAsInspectDoes) {
  const std::string dir = make_temp_dir("day0_synth_cli_");
  const std::string out = dir + "/v4";
  CliResult r = run_cli({"synth", "deepseek-v4-flash", "--out", out, "--layers", "5", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string structure = nlohmann::json::parse(r.out)["structure"].get<std::string>();
  CliResult inspect = run_cli({"inspect", out});
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  const size_t row = inspect.out.find("\nAttention ");
  ASSERT_NE(row, std::string::npos) << inspect.out;
  const size_t from = inspect.out.find_first_not_of(' ', row + 10);
  const std::string attention = inspect.out.substr(from, inspect.out.find('\n', from) - from);
  EXPECT_NE(attention.find("compressed sparse"), std::string::npos) << attention;
  EXPECT_NE(structure.find("; " + attention + ";"), std::string::npos) << structure << "\n" << attention;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace day0::testing
