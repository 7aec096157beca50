// `day0 run` and `day0 align` end to end on a golden miniature, including bad-input paths.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "cli/cli_runner.h"

namespace day0::testing {
namespace {

const std::string kModel = std::string(DAY0_TEST_DATA_DIR) + "/golden/qwen3";
const std::string kRef = kModel + "/reference.safetensors";

bool have_model() {
  return std::filesystem::exists(kRef);
}

TEST(RunCli, GeneratesWithTimingAndLogprobs) {
  if (!have_model()) GTEST_SKIP() << "golden qwen3 missing";
  const auto r = run_cli({"run", kModel, "--prompt-ids", "1,2,3", "--max-new", "4", "--logprobs", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("generated  4 tokens"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("TTFT"), std::string::npos);
  EXPECT_NE(r.out.find("decode"), std::string::npos);
  EXPECT_NE(r.out.find("logprob"), std::string::npos);
}

TEST(RunCli, JsonAndSeededSampling) {
  if (!have_model()) GTEST_SKIP() << "golden qwen3 missing";
  const std::vector<std::string> args = {"run",           kModel, "--prompt-ids", "5,6,7,8", "--max-new", "5",
                                         "--temperature", "1.3",  "--top-p",      "0.9",     "--seed",    "3",
                                         "--json"};
  const auto a = run_cli(args), b = run_cli(args);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const auto ja = nlohmann::json::parse(a.out), jb = nlohmann::json::parse(b.out);
  EXPECT_EQ(ja["tokens"].size(), 5u);
  EXPECT_EQ(ja["tokens"], jb["tokens"]);
  EXPECT_EQ(ja["kv_dtype"], "bf16");  // the default, stated
  EXPECT_GT(ja["timing"]["prefill_tokens_per_second"].get<double>(), 0.0);
}

TEST(RunCli, DumpIsAReferenceAlignAccepts) {
  if (!have_model()) GTEST_SKIP() << "golden qwen3 missing";
  const std::string dir = make_temp_dir("day0_run_dump");
  const std::string dump = dir + "/engine.safetensors";
  // align --dtype f32 compares at float32 precision: the dump is made with an exact (F32) KV cache.
  const auto r = run_cli({"run", kModel, "--prompt-ids", "9,8,7,6,5", "--max-new", "3", "--dump", dump,
                          "--backend", "reference", "--kv-dtype", "f32"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("f32 KV cache"), std::string::npos) << r.out;
  const auto a = run_cli({"align", kModel, "--reference", dump, "--backend", "cpu"});
  EXPECT_EQ(a.exit_code, 0) << a.out << a.err;
  EXPECT_NE(a.out.find("day0 run (reference)"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("f32 KV cache"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("kv dtype f32 (from the dump's settings)"), std::string::npos) << a.out;
  // Measuring another backend than the dump's is the point here, but it is said.
  EXPECT_NE(a.out.find("--backend cpu differs from the dump's backend reference"), std::string::npos)
      << a.out;
  // A BF16-cache dump differs from an F32-cache engine by more than float32 noise: an explicit
  // --kv-dtype f32 against it fails, and align names the difference of settings.
  const auto r16 = run_cli({"run", kModel, "--prompt-ids", "9,8,7,6,5", "--max-new", "3", "--dump", dump,
                            "--backend", "reference"});
  ASSERT_EQ(r16.exit_code, 0) << r16.err;
  EXPECT_NE(r16.out.find("bf16 KV cache"), std::string::npos) << r16.out;
  const auto f32 = run_cli({"align", kModel, "--reference", dump, "--backend", "cpu", "--kv-dtype", "f32"});
  EXPECT_EQ(f32.exit_code, 1) << f32.out << f32.err;
  EXPECT_NE(f32.out.find("--kv-dtype f32 differs from the dump's kv dtype bf16"), std::string::npos)
      << f32.out;
  std::filesystem::remove_all(dir);
}

TEST(AlignCli, PassesOnTheGoldenAndReportsJson) {
  if (!have_model()) GTEST_SKIP() << "golden qwen3 missing";
  const auto r = run_cli({"align", kModel, "--reference", kRef, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["pass"].get<bool>());
  EXPECT_EQ(j["kv_dtype"], "f32");  // --dtype f32 compares with an exact cache
  // A transformers dump records no engine settings: align's own defaults, as before.
  EXPECT_FALSE(j["settings_from_dump"].get<bool>());
  EXPECT_EQ(j["settings"]["kv_dtype"]["source"], "default");
  EXPECT_TRUE(j["warnings"].empty());
  EXPECT_EQ(j["logits"]["same_top1"].get<double>(), 1.0);
  EXPECT_FALSE(j["layers"].empty());
  EXPECT_TRUE(j["first_failing_layer"].is_null());
}

TEST(AlignCli, ExitsOneOutsideThresholds) {
  if (!have_model()) GTEST_SKIP() << "golden qwen3 missing";
  const auto r = run_cli({"align", kModel, "--reference", kRef, "--dtype", "bf16", "--max-abs-err", "1e-9"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("verdict: FAIL"), std::string::npos);
  EXPECT_NE(r.out.find("logits max abs error"), std::string::npos);
}

TEST(AlignCli, AgainstOurReferenceBackend) {
  if (!have_model()) GTEST_SKIP() << "golden qwen3 missing";
  const auto r = run_cli({"align", kModel, "--against", "reference", "--prompt-ids", "1,2,3;4,5,6,7,8"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("day0 reference backend"), std::string::npos) << r.out;
}

TEST(AlignCli, RejectsBadInput) {
  if (!have_model()) GTEST_SKIP() << "golden qwen3 missing";
  // A safetensors file that is not a dump: the model's own weights.
  auto r = run_cli({"align", kModel, "--reference", kModel + "/model.safetensors"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("not a day0-reference/1 reference dump"), std::string::npos) << r.err;
  r = run_cli({"align", kModel});
  EXPECT_EQ(r.exit_code, 2);
  r = run_cli({"align", kModel, "--reference", kRef, "--against", "hf"});
  EXPECT_EQ(r.exit_code, 2);
  r = run_cli({"run", kModel, "--prompt-ids", "1,x"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("not a token id"), std::string::npos) << r.err;
  r = run_cli({"run", kModel, "--prompt-ids", "99999"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("outside the vocabulary"), std::string::npos) << r.err;
  r = run_cli({"run", "/nonexistent/model", "--prompt-ids", "1"});
  EXPECT_EQ(r.exit_code, 2);
  r = run_cli({"run", kModel, "--prompt-ids", "1", "--backend", "tpu"});
  EXPECT_EQ(r.exit_code, 2);
}

}  // namespace
}  // namespace day0::testing
