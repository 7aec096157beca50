// `day0 bench MODEL` as a user runs it: llama-bench's tests with --json beside the table, figures that
// agree with their own samples, the machine's limits unless told not to, and clear refusals.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace day0::testing {
namespace {

const std::string kGolden = std::string(DAY0_TEST_DATA_DIR) + "/golden/llama3";

TEST(CliBench, JsonHoldsEveryTestWithItsSamples) {
  CliResult r = run_cli(
      {"bench", kGolden, "-p", "6,10", "-n", "5", "-r", "2", "--threads", "1", "--no-limits", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("architecture"), "LlamaForCausalLM");
  EXPECT_EQ(j.at("dtype"), "bf16");
  EXPECT_EQ(j.at("kv_dtype"), "bf16");
  EXPECT_EQ(j.at("threads"), 1);
  EXPECT_EQ(j.at("repetitions"), 2);
  EXPECT_GT(j.at("weight_bytes_per_token").get<double>(), 0.0);
  EXPECT_FALSE(j.contains("machine"));  // --no-limits
  EXPECT_EQ(j.at("page_cache"), "keep");
  uint64_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(kGolden))
    if (e.path().extension() == ".safetensors") files += e.file_size();
  EXPECT_EQ(j.at("weight_file_bytes").get<uint64_t>(), files);
  EXPECT_LE(j.at("weight_bytes_in_huge_pages").get<uint64_t>(), uint64_t{1} << 40);
  const auto& tests = j.at("tests");
  ASSERT_EQ(tests.size(), 3u);
  const std::vector<std::string> names = {"pp6", "pp10", "tg5"};
  const std::vector<int64_t> calls = {2, 2, 10};
  for (size_t i = 0; i < 3; ++i) {
    const auto& t = tests[i];
    EXPECT_EQ(t.at("test"), names[i]);
    EXPECT_EQ(t.at("forward_calls"), calls[i]) << names[i];
    const auto samples = t.at("tok_s_samples").get<std::vector<double>>();
    const auto seconds = t.at("seconds_samples").get<std::vector<double>>();
    ASSERT_EQ(samples.size(), 2u);
    ASSERT_EQ(seconds.size(), 2u);
    const double tokens = t.at("tokens").get<double>();
    for (size_t k = 0; k < 2; ++k) EXPECT_NEAR(samples[k], tokens / seconds[k], 1e-9 * samples[k]);
    EXPECT_NEAR(t.at("tok_s_mean").get<double>(), (samples[0] + samples[1]) / 2, 1e-9 * samples[0]);
    EXPECT_EQ(t.contains("ttft_s_mean"), i < 2);
    EXPECT_FALSE(t.contains("share_of_limit"));
  }
  EXPECT_NE(r.err.find("bench: pp6 (2 runs after a warm-up)"), std::string::npos) << r.err;  // progress
}

TEST(CliBench, TableStatesTheLimitsMeasuredInTheSameRun) {
  CliResult r =
      run_cli({"bench", kGolden, "-p", "8", "-n", "4", "-r", "1", "--threads", "1", "--dtype", "f32"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* part : {"f32 activations", "machine (measured now, 1 thread): read bandwidth", "| pp8 ",
                           "| tg4 ", "(FP32 FMA", "(bandwidth)", "prefill's matmuls run on: FP32 FMA"}) {
    EXPECT_NE(r.out.find(part), std::string::npos) << part << "\n" << r.out;
  }
  // --json names the unit and its peak beside the others.
  CliResult j = run_cli(
      {"bench", kGolden, "-p", "8", "-n", "2", "-r", "1", "--threads", "1", "--dtype", "f32", "--json"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const auto machine = nlohmann::json::parse(j.out).at("machine");
  // f32 activations: FP32 FMA, on 256 bits where the host's widest level is avx2.
  const bool avx2 = machine.at("prefill_peak_name") == "FP32 FMA (AVX2)";
  if (!avx2) {
    EXPECT_EQ(machine.at("prefill_peak_name"), "FP32 FMA");
  }
  EXPECT_EQ(machine.at("prefill_peak_gflops"), machine.at(avx2 ? "fma_avx2_peak_gflops" : "fma_peak_gflops"));
  EXPECT_TRUE(machine.contains("amx_bf16_peak_gflops"));
}

// --page-cache reload drops the checkpoint's cached pages before the run maps them: the same tokens
// come back (the files are read again), and a value it does not know is refused.
TEST(CliBench, PageCacheReloadChangesNoToken) {
  const std::vector<std::string> run = {"run", kGolden,  "--prompt-ids", "1,2,3", "--max-new",
                                        "6",   "--json", "--threads",    "1"};
  CliResult kept = run_cli(run);
  ASSERT_EQ(kept.exit_code, 0) << kept.err;
  auto reload = run;
  reload.insert(reload.end(), {"--page-cache", "reload"});
  CliResult reloaded = run_cli(reload);
  ASSERT_EQ(reloaded.exit_code, 0) << reloaded.err;
  const auto a = nlohmann::json::parse(kept.out);
  const auto b = nlohmann::json::parse(reloaded.out);
  ASSERT_EQ(a.at("tokens").size(), 6u);
  EXPECT_EQ(a.at("tokens"), b.at("tokens"));

  CliResult bench = run_cli({"bench", kGolden, "-p", "4", "-n", "2", "-r", "1", "--threads", "1",
                             "--no-limits", "--json", "--page-cache", "reload"});
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  EXPECT_EQ(nlohmann::json::parse(bench.out).at("page_cache"), "reload");
  for (const char* command : {"bench", "run", "serve"}) {
    CliResult bad = run_cli({command, kGolden, "--page-cache", "evict"});
    EXPECT_EQ(bad.exit_code, 2) << command;
    EXPECT_NE(bad.err.find("--page-cache"), std::string::npos) << command << ": " << bad.err;
  }
}

TEST(CliBench, RefusesWhatItCannotRun) {
  CliResult none = run_cli({"bench"});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("give a checkpoint folder"), std::string::npos) << none.err;
  CliResult missing = run_cli({"bench", "/no/such/model", "--no-limits"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("/no/such/model"), std::string::npos) << missing.err;
  EXPECT_EQ(run_cli({"bench", kGolden, "-p", "0"}).exit_code, 2);
  EXPECT_EQ(run_cli({"bench", kGolden, "-r", "0"}).exit_code, 2);
  EXPECT_EQ(run_cli({"bench", kGolden, "--dtype", "f16"}).exit_code, 2);
  CliResult too_long = run_cli({"bench", kGolden, "-p", "1000000", "--no-limits"});
  EXPECT_EQ(too_long.exit_code, 2);
  EXPECT_NE(too_long.err.find("exceeds the model's context"), std::string::npos) << too_long.err;
  // The serve subcommand is still reached by name.
  CliResult serve = run_cli({"bench", "serve", "--help"});
  EXPECT_EQ(serve.exit_code, 0);
  EXPECT_NE(serve.out.find("--concurrency"), std::string::npos);
}

}  // namespace
}  // namespace day0::testing
