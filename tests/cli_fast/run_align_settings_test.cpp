// `day0 run --dump` then `day0 align --reference` on the same model, both with their defaults, must
// pass: the dump records the settings that shaped it and align repeats them, saying so; a flag given
// that differs from the dump's setting is reported, never silently kept.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace day0::testing {
namespace {

class RunAlignSettings : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir("day0_run_align_");
    model_ = dir_ + "/mini";
    // DeepSeek-V3's miniature: MLA, so the MLA form is one of the settings too.
    const CliResult s = run_cli({"synth", "deepseek-v3", "--out", model_, "--seed", "3", "--layers", "2"});
    ASSERT_EQ(s.exit_code, 0) << s.err;
    dump_ = dir_ + "/run.safetensors";
    const CliResult r =
        run_cli({"run", model_, "--prompt-ids", "3,1,4,1,5,9,2,6", "--max-new", "4", "--dump", dump_});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    ASSERT_NE(r.out.find("bf16 KV cache"), std::string::npos) << r.out;  // run's default
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_, model_, dump_;
};

TEST_F(RunAlignSettings, AlignWithDefaultsRepeatsTheDumpsSettingsAndPasses) {
  const CliResult a = run_cli({"align", model_, "--reference", dump_});
  EXPECT_EQ(a.exit_code, 0) << a.out << a.err;
  EXPECT_NE(a.out.find("verdict: PASS"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("cpu (f32 activations, bf16 KV cache)"), std::string::npos) << a.out;
  for (const char* setting :
       {"dtype f32 (from the dump's settings)", "kv dtype bf16 (from the dump's settings)",
        "backend cpu (from the dump's settings)", "mla auto (from the dump's settings)"}) {
    EXPECT_NE(a.out.find(setting), std::string::npos) << setting << "\n" << a.out;
  }
  EXPECT_EQ(a.out.find("warning"), std::string::npos) << a.out;

  const CliResult j = run_cli({"align", model_, "--reference", dump_, "--json"});
  ASSERT_EQ(j.exit_code, 0) << j.out << j.err;
  const auto doc = nlohmann::json::parse(j.out);
  EXPECT_TRUE(doc["pass"].get<bool>());
  EXPECT_TRUE(doc["settings_from_dump"].get<bool>());
  EXPECT_EQ(doc["kv_dtype"], "bf16");
  EXPECT_EQ(doc["settings"]["kv_dtype"]["source"], "dump");
  EXPECT_EQ(doc["settings"]["dtype"]["source"], "dump");
  EXPECT_EQ(doc["settings"]["backend"]["value"], "cpu");
  EXPECT_TRUE(doc["warnings"].empty()) << doc["warnings"];
}

TEST_F(RunAlignSettings, AFlagThatDiffersFromTheDumpIsReported) {
  // The given flag wins, and align says it differs from the dump's setting. An F32 cache against the
  // dump's BF16 one (align's choice before it read the dump's settings) fails the F32 thresholds.
  const CliResult a = run_cli({"align", model_, "--reference", dump_, "--kv-dtype", "f32"});
  EXPECT_EQ(a.exit_code, 1) << a.out << a.err;
  EXPECT_NE(a.out.find("f32 KV cache"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("kv dtype f32 (--kv-dtype)"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("warning    --kv-dtype f32 differs from the dump's kv dtype bf16"), std::string::npos)
      << a.out;
  EXPECT_NE(a.out.find("dtype f32 (from the dump's settings)"), std::string::npos) << a.out;

  // In JSON the warnings are a list, and stderr says them too.
  const CliResult j = run_cli({"align", model_, "--reference", dump_, "--dtype", "bf16", "--json"});
  EXPECT_TRUE(j.exit_code == 0 || j.exit_code == 1) << j.out << j.err;
  EXPECT_NE(j.err.find("warning: --dtype bf16 differs from the dump's dtype f32"), std::string::npos)
      << j.err;
  const auto doc = nlohmann::json::parse(j.out);
  ASSERT_EQ(doc["warnings"].size(), 1u) << doc["warnings"];
  EXPECT_EQ(doc["settings"]["dtype"]["source"], "flag");
  EXPECT_EQ(doc["precision"], "bf16");
  EXPECT_EQ(doc["settings"]["kv_dtype"]["source"], "dump");  // still the dump's bf16

  // A flag equal to the dump's setting is no conflict.
  const CliResult same = run_cli({"align", model_, "--reference", dump_, "--kv-dtype", "bf16"});
  EXPECT_EQ(same.exit_code, 0) << same.out << same.err;
  EXPECT_EQ(same.out.find("warning"), std::string::npos) << same.out;
}

}  // namespace
}  // namespace day0::testing
