// `day0 run` under mpirun: tensor parallelism over two ranks gives the single process's tokens and
// reports each rank's weight share and communication time; a wrong world size or an unsupported
// layout is refused before loading; a rank killed (SIGKILL) or hung (SIGSTOP) mid-generation ends
// the run within 10 s with a message naming it, and leaves no process behind.
#include <gtest/gtest.h>
#include <unistd.h>

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
  const MpiRunResult r = run_mpi(2, with(kRun, {"--tp", "3"}), 60, tag_for("mismatch"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("started 2 ranks"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("TP 3 x PP 1 x EP 1 = 3 ranks needs 3"), std::string::npos) << r.err;
}

TEST(DistributedRun, PipelineAndExpertParallelismSayNotYet) {
  for (const char* flag : {"--pp", "--ep"}) {
    const CliResult r = run_cli_bounded(with(kRun, {flag, "2"}), 30);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("not implemented yet"), std::string::npos) << r.err;
  }
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
