// `day0 run` under mpirun: tensor parallelism over two ranks gives the single process's tokens and
// reports each rank's weight share and communication time; so does expert parallelism on a MoE
// miniature (EP 2 under both MoE combines, TP 2 x EP 2 over four ranks), reporting each rank's experts;
// a wrong world size or an unsupported layout is refused before loading; a rank killed (SIGKILL) or
// hung (SIGSTOP) mid-generation ends the run within 10 s with a message naming it, and leaves no
// process behind.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mpirun.h"

namespace day0::testing {
namespace {

std::string llama() {
  return std::string(DAY0_TEST_DATA_DIR) + "/golden/llama3";
}

std::string tag_for(const char* test) {
  return std::string(test) + "-" + std::to_string(getpid());
}

const std::vector<std::string> kRun = {"run",       llama(), "--prompt-ids", "1,17,42,99,3,250",
                                       "--threads", "1",     "--json"};

#define D0_REQUIRE_MPIRUN() \
  if (find_mpirun().empty()) GTEST_SKIP() << "mpirun not found (make test installs openmpi-bin)"

std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TEST(DistributedRun, TensorParallelTokensEqualOneProcessAndEachRankHoldsItsShare) {
  D0_REQUIRE_MPIRUN();
  const CliResult one = run_cli_bounded(with(kRun, {"--max-new", "12"}), 60);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const MpiRunResult two = run_mpi(2, with(kRun, {"--max-new", "12", "--tp", "2"}), 60, tag_for("tp2"));
  ASSERT_EQ(two.exit_code, 0) << two.out << two.err;
  const auto a = nlohmann::json::parse(one.out);
  const auto b = nlohmann::json::parse(two.out);  // rank 0 alone prints
  EXPECT_EQ(b["tokens"], a["tokens"]);
  EXPECT_EQ(b["tokens"].size(), 12u);
  ASSERT_EQ(b["parallel"]["world"], 2);
  ASSERT_EQ(b["parallel"]["ranks"].size(), 2u);
  const double whole = a["parallel"]["ranks"][0]["weight_bytes"];
  EXPECT_EQ(a["parallel"]["world"], 1);
  for (const auto& r : b["parallel"]["ranks"]) {
    EXPECT_LT(r["weight_bytes"].get<double>(), 0.6 * whole) << r.dump();
    EXPECT_EQ(2 * r["weight_bytes_split"].get<double>(),
              a["parallel"]["ranks"][0]["weight_bytes_split"].get<double>());
    EXPECT_GT(r["comm_calls"].get<double>(), 0);
    EXPECT_GE(r["comm_idle_ratio"].get<double>(), 0);
    EXPECT_LT(r["comm_idle_ratio"].get<double>(), 1);
  }
}

TEST(DistributedRun, WorldSizeThatDoesNotMatchTheLayoutIsRefused) {
  D0_REQUIRE_MPIRUN();
  const MpiRunResult r = run_mpi(2, with(kRun, {"--tp", "4"}), 60, tag_for("mismatch"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("started 2 ranks"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("TP 4 x PP 1 x EP 1 = 4 ranks needs 4"), std::string::npos) << r.err;
}

// `day0 run` of a golden miniature: the fixed prompt, 10 greedy tokens, one thread, JSON.
std::vector<std::string> golden_run(const std::string& model) {
  return {"run",
          std::string(DAY0_TEST_DATA_DIR) + "/golden/" + model,
          "--prompt-ids",
          "1,17,42,99,3,250",
          "--threads",
          "1",
          "--json",
          "--max-new",
          "10"};
}

const std::vector<std::string> kMoeRun = golden_run("qwen3-moe");

// Refused from the config alone, before MPI or any weight: no mpirun needed to see the message.
TEST(DistributedRun, ExpertParallelismRefusalsSayWhyBeforeLoading) {
  struct Refusal {
    std::vector<std::string> args;
    std::string says;
  };
  const std::string deepseek = std::string(DAY0_TEST_DATA_DIR) + "/golden/deepseek-v3";
  const Refusal refusals[] = {
      {with(kRun, {"--ep", "2"}), "the model has no routed experts"},
      {with(kMoeRun, {"--ep", "16"}), "8 routed experts cannot give each of 16 ranks"},
      {{"run", deepseek, "--prompt-ids", "1,2", "--tp", "8"},
       "4 MLA attention heads do not divide into 8 parts"},
      {with(kMoeRun, {"--moe-combine", "all-to-all"}), "needs --ep 2 or more"},
  };
  for (const Refusal& f : refusals) {
    const CliResult r = run_cli_bounded(f.args, 30);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(f.says), std::string::npos) << r.err;
  }
}

// The parallel section of an EP run against one process: tokens, every rank's experts and bytes.
void expect_expert_parallel_run(const nlohmann::json& one, const nlohmann::json& run, int tp, int ep,
                                const std::string& combine) {
  EXPECT_EQ(run["tokens"], one["tokens"]);
  EXPECT_EQ(run["tokens"].size(), 10u);
  const nlohmann::json& p = run["parallel"];
  ASSERT_EQ(p["world"], tp * ep);
  EXPECT_EQ(p["ep"], ep);
  EXPECT_EQ(p["tp"], tp);
  EXPECT_EQ(p["moe_combine"], combine);
  const nlohmann::json& whole = one["parallel"]["ranks"][0];
  const double experts = whole["weight_bytes_experts"];
  EXPECT_GT(experts, 0);
  EXPECT_EQ(whole["experts"]["begin"], 0);
  EXPECT_EQ(whole["experts"]["end"], 8);
  ASSERT_EQ(p["ranks"].size(), static_cast<size_t>(tp * ep));
  for (const auto& r : p["ranks"]) {
    const int e = r["ep_rank"];
    EXPECT_EQ(r["experts"]["begin"], e * 8 / ep) << r.dump();
    EXPECT_EQ(r["experts"]["end"], (e + 1) * 8 / ep) << r.dump();
    // Its block of the experts (each split over TP), the rest as with tensor parallelism alone.
    const int held = r["experts"]["end"].get<int>() - r["experts"]["begin"].get<int>();
    EXPECT_EQ(r["weight_bytes_experts"].get<double>() * tp * 8, experts * held) << r.dump();
    EXPECT_LT(r["weight_bytes"].get<double>(), whole["weight_bytes"].get<double>());
    if (tp == 1) {
      EXPECT_EQ(r["weight_bytes_split"].get<double>() - r["weight_bytes_experts"].get<double>(),
                whole["weight_bytes_split"].get<double>() - experts);
      EXPECT_EQ(r["weight_bytes_replicated"], whole["weight_bytes_replicated"]);
    }
    EXPECT_GT(r["comm_calls"].get<double>(), 0);
    EXPECT_GT(r["comm_bytes_sent"].get<double>(), 0);
    EXPECT_GE(r["comm_idle_ratio"].get<double>(), 0);
    EXPECT_LT(r["comm_idle_ratio"].get<double>(), 1);
  }
}

TEST(DistributedRun, ExpertParallelTokensEqualOneProcessUnderBothCombines) {
  D0_REQUIRE_MPIRUN();
  const CliResult one = run_cli_bounded(kMoeRun, 60);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const auto a = nlohmann::json::parse(one.out);
  for (const std::string combine : {"all-reduce", "all-to-all"}) {
    const MpiRunResult two =
        run_mpi(2, with(kMoeRun, {"--ep", "2", "--moe-combine", combine}), 60, tag_for("ep2"));
    ASSERT_EQ(two.exit_code, 0) << two.out << two.err;
    expect_expert_parallel_run(a, nlohmann::json::parse(two.out), 1, 2, combine);
  }
}

// 8 experts over 3 ranks: blocks of 2, 3 and 3 (and the all-to-all's uneven blocks of rows).
TEST(DistributedRun, UnevenExpertBlocksOverThreeRanksEqualOneProcess) {
  D0_REQUIRE_MPIRUN();
  const CliResult one = run_cli_bounded(kMoeRun, 60);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const MpiRunResult three =
      run_mpi(3, with(kMoeRun, {"--ep", "3", "--moe-combine", "all-to-all"}), 60, tag_for("ep3"));
  ASSERT_EQ(three.exit_code, 0) << three.out << three.err;
  const auto b = nlohmann::json::parse(three.out);
  expect_expert_parallel_run(nlohmann::json::parse(one.out), b, 1, 3, "all-to-all");
  EXPECT_EQ(b["parallel"]["ranks"][0]["experts"]["end"], 2);
}

TEST(DistributedRun, TensorTimesExpertParallelOverFourRanksEqualsOneProcess) {
  D0_REQUIRE_MPIRUN();
  const CliResult one = run_cli_bounded(kMoeRun, 60);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const MpiRunResult four = run_mpi(4, with(kMoeRun, {"--tp", "2", "--ep", "2"}), 60, tag_for("tp2ep2"));
  ASSERT_EQ(four.exit_code, 0) << four.out << four.err;
  expect_expert_parallel_run(nlohmann::json::parse(one.out), nlohmann::json::parse(four.out), 2, 2,
                             "all-reduce");
}

// DeepSeek-V3 (MLA, FP8 blocks, a dense first layer, group-limited sigmoid routing, a shared expert):
// TP 2 splits its heads, EP 2 places its experts, TP 2 x EP 2 both; the tokens are one process's.
TEST(DistributedRun, MlaModelUnderTensorAndExpertParallelismEqualsOneProcess) {
  D0_REQUIRE_MPIRUN();
  const std::vector<std::string> run = golden_run("deepseek-v3");
  const CliResult one = run_cli_bounded(run, 60);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const auto a = nlohmann::json::parse(one.out);
  const MpiRunResult tp = run_mpi(2, with(run, {"--tp", "2"}), 60, tag_for("mla-tp2"));
  ASSERT_EQ(tp.exit_code, 0) << tp.out << tp.err;
  const auto b = nlohmann::json::parse(tp.out);
  EXPECT_EQ(b["tokens"], a["tokens"]);
  for (const auto& r : b["parallel"]["ranks"])
    EXPECT_LT(r["weight_bytes"].get<double>(), 0.7 * a["parallel"]["ranks"][0]["weight_bytes"].get<double>());
  const MpiRunResult ep = run_mpi(2, with(run, {"--ep", "2"}), 60, tag_for("mla-ep2"));
  ASSERT_EQ(ep.exit_code, 0) << ep.out << ep.err;
  expect_expert_parallel_run(a, nlohmann::json::parse(ep.out), 1, 2, "all-reduce");
  const MpiRunResult four = run_mpi(4, with(run, {"--tp", "2", "--ep", "2", "--moe-combine", "all-to-all"}),
                                    60, tag_for("mla-tp2ep2"));
  ASSERT_EQ(four.exit_code, 0) << four.out << four.err;
  EXPECT_EQ(nlohmann::json::parse(four.out)["tokens"], a["tokens"]);
}

// A shared expert under EP 2: each rank computes it for its block of the step's rows before one
// blocking sum, or, with --comm-overlap, every rank computes it for every row while the routed sum is
// in flight (one overlapped all-reduce a MoE layer and step); F32 and BF16 tokens are one process's
// either way.
TEST(DistributedRun, SharedExpertOverlapsTheRoutedSumAndEqualsOneProcess) {
  D0_REQUIRE_MPIRUN();
  for (const std::string dtype : {"f32", "bf16"}) {
    const std::vector<std::string> run = with(golden_run("deepseek-v3"), {"--dtype", dtype});
    const CliResult one = run_cli_bounded(run, 60);
    ASSERT_EQ(one.exit_code, 0) << one.err;
    const auto a = nlohmann::json::parse(one.out);
    for (const bool overlap : {true, false}) {
      const MpiRunResult two =
          run_mpi(2,
                  with(run, overlap ? std::vector<std::string>{"--ep", "2", "--comm-overlap"}
                                    : std::vector<std::string>{"--ep", "2"}),
                  60, tag_for("overlap"));
      ASSERT_EQ(two.exit_code, 0) << two.out << two.err;
      const auto b = nlohmann::json::parse(two.out);
      EXPECT_EQ(b["tokens"], a["tokens"]) << dtype << " overlap " << overlap;
      for (const auto& r : b["parallel"]["ranks"]) {
        // deepseek-v3's miniature: one dense layer, then MoE layers with a shared expert; 10 forward
        // calls (the prompt, 9 decode steps).
        const double overlapped = r["comm_overlapped_calls"].get<double>();
        if (overlap) {
          EXPECT_GT(overlapped, 0) << r.dump();
          EXPECT_EQ(static_cast<int64_t>(overlapped) % 10, 0) << "one a MoE layer and step: " << r.dump();
        } else {
          EXPECT_EQ(overlapped, 0) << r.dump();
        }
      }
    }
  }
}

// Attention data parallelism: each EP rank runs the prompt as its own sequence (a DP replica), its MoE
// layers exchanging picks with the other rank's; the tokens are one process's.
TEST(DistributedRun, DataParallelAttentionReplicasEqualOneProcess) {
  D0_REQUIRE_MPIRUN();
  for (const char* model : {"qwen3-moe", "deepseek-v3"}) {
    const std::vector<std::string> run = golden_run(model);
    const CliResult one = run_cli_bounded(run, 60);
    ASSERT_EQ(one.exit_code, 0) << one.err;
    const MpiRunResult two = run_mpi(2, with(run, {"--ep", "2", "--dp-attention", "2"}), 60, tag_for("dp2"));
    ASSERT_EQ(two.exit_code, 0) << two.out << two.err;
    const auto a = nlohmann::json::parse(one.out), b = nlohmann::json::parse(two.out);
    EXPECT_EQ(b["tokens"], a["tokens"]) << model;
    EXPECT_EQ(b["parallel"]["dp_attention"], 2);
    EXPECT_EQ(b["parallel"]["moe_combine"], "all-to-all");
  }
  const CliResult bad = run_cli_bounded(with(kMoeRun, {"--dp-attention", "2"}), 30);
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("DP = EP, TP 1 and PP 1"), std::string::npos) << bad.err;
}

// Redundant experts: a recorded one-process load places 2 extra copies per MoE layer over EP 2; the
// tokens are one process's under both combines, every (token, expert) pick is computed exactly once
// over the ranks, some on the copies, and each rank binds its block plus its copies.
TEST(DistributedRun, RedundantExpertsFromARecordedLoadEqualOneProcess) {
  D0_REQUIRE_MPIRUN();
  const std::string load = ::testing::TempDir() + "day0_expert_load_" + std::to_string(getpid()) + ".json";
  const CliResult one = run_cli_bounded(with(kMoeRun, {"--record-expert-load", load}), 60);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const auto a = nlohmann::json::parse(one.out);
  std::ifstream in(load);
  ASSERT_TRUE(in.good()) << load;
  const auto recorded = nlohmann::json::parse(in);
  ASSERT_EQ(recorded["n_experts"], 8);
  ASSERT_FALSE(recorded["layers"].empty());
  double routed_picks = 0, first_layer = -1;
  for (const auto& l : recorded["layers"]) {
    double sum = 0;
    for (const auto& n : l["picks"]) sum += n.get<double>();
    if (first_layer < 0) first_layer = sum;
    EXPECT_EQ(sum, first_layer) << "every MoE layer routes the same tokens";
    routed_picks += sum;
  }
  EXPECT_GT(routed_picks, 0);
  const double experts = a["parallel"]["ranks"][0]["weight_bytes_experts"];
  for (const std::string combine : {"all-reduce", "all-to-all"}) {
    const MpiRunResult two = run_mpi(2,
                                     with(kMoeRun, {"--ep", "2", "--moe-combine", combine,
                                                    "--redundant-experts", "2", "--expert-load", load}),
                                     60, tag_for("eplb"));
    ASSERT_EQ(two.exit_code, 0) << two.out << two.err;
    const auto b = nlohmann::json::parse(two.out);
    EXPECT_EQ(b["tokens"], a["tokens"]) << combine;
    EXPECT_EQ(b["parallel"]["redundant_experts"], 2);
    double computed = 0, on_replicas = 0;
    for (const auto& r : b["parallel"]["ranks"]) {
      computed += r["expert_picks_computed"].get<double>();
      on_replicas += r["replica_picks_computed"].get<double>();
      // Its block of 4 and its copies, in every MoE layer; the copies are other ranks' experts.
      const int e = r["ep_rank"];
      int copies = -1;
      for (const auto& l : r["replicas"]) {
        const int here = static_cast<int>(l["experts"].size());
        if (copies < 0) copies = here;
        for (const auto& x : l["experts"]) EXPECT_NE(x.get<int>() / 4, e) << r.dump();
      }
      ASSERT_GE(copies, 0) << r.dump();
      EXPECT_EQ(r["weight_bytes_experts"].get<double>() * 8, experts * (4 + copies)) << combine << r.dump();
    }
    EXPECT_EQ(computed, routed_picks) << combine << ": each pick computed once";
    EXPECT_GT(on_replicas, 0) << combine;
  }
  std::remove(load.c_str());
}

// Refused before MPI or any weight is read, naming the flag and the numbers.
TEST(DistributedRun, RedundantExpertRefusalsSayWhy) {
  const std::string bad_load = ::testing::TempDir() + "day0_bad_load_" + std::to_string(getpid()) + ".json";
  {
    std::ofstream out(bad_load);
    out << R"({"format": "day0-expert-load", "version": 1, "n_experts": 16, "layers": []})";
  }
  struct Refusal {
    std::vector<std::string> args;
    std::string says;
  };
  const Refusal refusals[] = {
      {with(kMoeRun, {"--redundant-experts", "2"}), "needs --ep 2 or more"},
      {with(kMoeRun, {"--ep", "2", "--redundant-experts", "9"}), "take at most 8 copies"},
      {with(kMoeRun, {"--ep", "2", "--expert-load", bad_load}), "needs --redundant-experts"},
      {with(kMoeRun, {"--ep", "2", "--redundant-experts", "2", "--expert-load", bad_load}),
       "n_experts: expected 8 (the model's routed experts), found 16"},
      {with(kRun, {"--ep", "2", "--redundant-experts", "2"}), "the model has no routed experts"},
  };
  for (const Refusal& f : refusals) {
    const CliResult r = run_cli_bounded(f.args, 30);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(f.says), std::string::npos) << r.err;
  }
  std::remove(bad_load.c_str());
}

TEST(DistributedRun, KilledRankEndsTheRunNamingItWithoutOrphans) {
  D0_REQUIRE_MPIRUN();
  const std::string tag = tag_for("kill");
  const MpiRunResult r = run_mpi(2, with(kRun, {"--max-new", "200", "--tp", "2", "--comm-timeout", "8"}), 30,
                                 tag, {"DAY0_TEST_FAULT=kill:1:4"});
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, 10.0);
  const std::string all = r.out + r.err;
  EXPECT_NE(all.find("rank 1"), std::string::npos) << all;
  EXPECT_TRUE(processes_tagged(tag).empty());
}

TEST(DistributedRun, HungRankIsNamedWithinTheTimeoutWithoutOrphans) {
  D0_REQUIRE_MPIRUN();
  const std::string tag = tag_for("hang");
  const MpiRunResult r = run_mpi(2, with(kRun, {"--max-new", "200", "--tp", "2", "--comm-timeout", "2"}), 30,
                                 tag, {"DAY0_TEST_FAULT=stop:1:4"});
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.seconds, 10.0);
  EXPECT_NE(r.err.find("timed out after 2."), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 1 of 2 silent"), std::string::npos) << r.err;
  EXPECT_TRUE(processes_tagged(tag).empty());
}

}  // namespace
}  // namespace day0::testing
