// `day0 run --pp` under mpirun: two pipeline stages give the single process's tokens and
// log-probabilities on Llama, Qwen3-MoE, gpt-oss and DeepSeek-V3 miniatures, each rank reports its
// layers, weight share and bubble; TP 2 x PP 2 and EP 2 x PP 2 over four ranks do too; what is not
// split into stages is refused before loading.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mpirun.h"

namespace day0::testing {
namespace {

std::string golden(const std::string& name) {
  return std::string(DAY0_TEST_DATA_DIR) + "/golden/" + name;
}

std::string tag_for(const std::string& test) {
  return test + "-" + std::to_string(getpid());
}

std::vector<std::string> run_args(const std::string& model, const std::vector<std::string>& more) {
  std::vector<std::string> args = {"run",
                                   golden(model),
                                   "--prompt-ids",
                                   "1,17,42,99,3,250,128,7",
                                   "--threads",
                                   "1",
                                   "--json",
                                   "--max-new",
                                   "10",
                                   "--logprobs",
                                   "2",
                                   "--kv-dtype",
                                   "f32"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

#define D0_REQUIRE_MPIRUN() \
  if (find_mpirun().empty()) GTEST_SKIP() << "mpirun not found (make test installs openmpi-bin)"

// Tokens and log-probabilities of a pipelined run against one process, and its parallel section.
void expect_pipelined_run(const nlohmann::json& one, const nlohmann::json& run, int tp, int pp, int ep) {
  EXPECT_EQ(run["tokens"], one["tokens"]);
  EXPECT_EQ(run["tokens"].size(), 10u);
  ASSERT_EQ(run["logprobs"].size(), one["logprobs"].size());
  for (size_t i = 0; i < one["logprobs"].size(); ++i) {
    EXPECT_NEAR(run["logprobs"][i]["logprob"].get<double>(), one["logprobs"][i]["logprob"].get<double>(),
                1e-4)
        << "step " << i;
  }
  const nlohmann::json& p = run["parallel"];
  ASSERT_EQ(p["world"], tp * pp * ep);
  EXPECT_EQ(p["pp"], pp);
  EXPECT_EQ(p["micro_batches"], 2 * pp);
  EXPECT_GE(p["bubble_fraction"].get<double>(), 0);
  EXPECT_LE(p["bubble_fraction"].get<double>(), 1);
  const nlohmann::json& whole = one["parallel"]["ranks"][0];
  const int n_layers = whole["layers"]["end"];
  EXPECT_EQ(whole["layers"]["begin"], 0);
  ASSERT_EQ(p["ranks"].size(), static_cast<size_t>(tp * pp * ep));
  double bytes = 0;
  for (const auto& r : p["ranks"]) {
    const int s = r["pp_rank"];
    EXPECT_EQ(r["layers"]["begin"], s * n_layers / pp) << r.dump();
    EXPECT_EQ(r["layers"]["end"], (s + 1) * n_layers / pp) << r.dump();
    EXPECT_LT(r["weight_bytes"].get<double>(), whole["weight_bytes"].get<double>()) << r.dump();
    EXPECT_GT(r["pipeline_micro_batches"].get<double>(), 0);
    EXPECT_GE(r["bubble_fraction"].get<double>(), 0);
    EXPECT_LE(r["bubble_fraction"].get<double>(), 1);
    EXPECT_GT(r["comm_calls"].get<double>(), 0);
    bytes += r["weight_bytes"].get<double>();
  }
  // Without TP or EP the stages' shares add up to the model (an untied head: nothing mapped twice).
  if (tp * ep == 1) {
    EXPECT_EQ(bytes, whole["weight_bytes"].get<double>());
  }
}

class PipelineRun : public ::testing::TestWithParam<std::string> {};

TEST_P(PipelineRun, TwoStagesEqualOneProcess) {
  D0_REQUIRE_MPIRUN();
  const CliResult one = run_cli_bounded(run_args(GetParam(), {}), 60);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const MpiRunResult two = run_mpi(2, run_args(GetParam(), {"--pp", "2"}), 90, tag_for("pp2-" + GetParam()));
  ASSERT_EQ(two.exit_code, 0) << two.out << two.err;
  expect_pipelined_run(nlohmann::json::parse(one.out), nlohmann::json::parse(two.out), 1, 2, 1);
}

std::string test_name(const ::testing::TestParamInfo<std::string>& param) {
  std::string n = param.param;
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

INSTANTIATE_TEST_SUITE_P(Families, PipelineRun,
                         ::testing::Values("llama3", "qwen3-moe", "gpt-oss", "deepseek-v3"), test_name);

// Llama, and tied Qwen3: its last stage maps the embedding's vocabulary rows as its TP slice of the head.
TEST(PipelineRun, TensorTimesPipelineOverFourRanksEqualsOneProcess) {
  D0_REQUIRE_MPIRUN();
  for (const std::string model : {"llama3", "qwen3"}) {
    const CliResult one = run_cli_bounded(run_args(model, {}), 60);
    ASSERT_EQ(one.exit_code, 0) << one.err;
    const MpiRunResult four =
        run_mpi(4, run_args(model, {"--tp", "2", "--pp", "2"}), 120, tag_for("tp2pp2-" + model));
    ASSERT_EQ(four.exit_code, 0) << four.out << four.err;
    const auto b = nlohmann::json::parse(four.out);
    expect_pipelined_run(nlohmann::json::parse(one.out), b, 2, 2, 1);
    for (const auto& r : b["parallel"]["ranks"]) {
      // Rank = (pp * EP + ep) * TP + tp.
      EXPECT_EQ(r["rank"].get<int>(), r["pp_rank"].get<int>() * 2 + r["tp_rank"].get<int>()) << r.dump();
    }
  }
}

TEST(PipelineRun, ExpertTimesPipelineOverFourRanksEqualsOneProcess) {
  D0_REQUIRE_MPIRUN();
  const CliResult one = run_cli_bounded(run_args("qwen3-moe", {}), 60);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const MpiRunResult four =
      run_mpi(4, run_args("qwen3-moe", {"--ep", "2", "--pp", "2"}), 120, tag_for("ep2pp2"));
  ASSERT_EQ(four.exit_code, 0) << four.out << four.err;
  expect_pipelined_run(nlohmann::json::parse(one.out), nlohmann::json::parse(four.out), 1, 2, 2);
}

// MLA (split by heads under TP, its latent cache whole on every rank) in pipeline stages of TP pairs.
TEST(PipelineRun, MlaTensorTimesPipelineOverFourRanksEqualsOneProcess) {
  D0_REQUIRE_MPIRUN();
  const CliResult one = run_cli_bounded(run_args("deepseek-v3", {}), 60);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const MpiRunResult four =
      run_mpi(4, run_args("deepseek-v3", {"--tp", "2", "--pp", "2"}), 120, tag_for("tp2pp2-deepseek-v3"));
  ASSERT_EQ(four.exit_code, 0) << four.out << four.err;
  expect_pipelined_run(nlohmann::json::parse(one.out), nlohmann::json::parse(four.out), 2, 2, 1);
}

// Refused from the config alone, before MPI or any weight: no mpirun needed to see the message.
TEST(PipelineRun, RefusalsSayWhyBeforeLoading) {
  struct Refusal {
    std::vector<std::string> args;
    std::string says;
  };
  const Refusal refusals[] = {
      {run_args("llama3", {"--pp", "3"}), "2 decoder layers cannot give each stage one"},
      {run_args("qwen3-next", {"--pp", "2"}), "not yet"},
      {run_args("llama3", {"--pp", "2", "--dump", "/tmp/day0-pp-never-written.safetensors"}),
       "--dump with --pp"},
      {run_args("llama3", {"--micro-batches", "4"}), "needs --pp 2 or more"},
  };
  for (const Refusal& f : refusals) {
    const CliResult r = run_cli_bounded(f.args, 30);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(f.says), std::string::npos) << r.err;
  }
}

TEST(PipelineRun, WorldSizeThatDoesNotMatchTheLayoutIsRefused) {
  D0_REQUIRE_MPIRUN();
  const MpiRunResult r =
      run_mpi(2, run_args("llama3", {"--pp", "2", "--tp", "2"}), 60, tag_for("pp-mismatch"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("TP 2 x PP 2 x EP 1 = 4 ranks needs 4"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace day0::testing
