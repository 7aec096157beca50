// Two "hosts" on one machine: two network namespaces joined by a veth pair, mpirun in the first
// starting the second rank in the other through an rsh agent (`ip netns exec`), ranks talking over
// Open MPI's TCP transport only. Tensor parallelism over them gives the single process's tokens, and
// each rank ran in its own namespace. Skipped, saying why, where namespaces cannot be made (not root,
// no iproute2, a sandbox that forbids it).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mpirun.h"

namespace day0::testing {
namespace {

int sh(const std::string& command) {
  return std::system((command + " >/dev/null 2>&1").c_str());
}

class TwoHosts : public ::testing::Test {
 protected:
  void SetUp() override {
    if (find_mpirun().empty()) GTEST_SKIP() << "mpirun not found (make test installs openmpi-bin)";
    if (geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
    if (sh("command -v ip") != 0) GTEST_SKIP() << "ip (iproute2) not found";
    const std::string id = std::to_string(getpid() % 100000);
    a_ = "d0h1-" + id;
    b_ = "d0h2-" + id;
    const std::string va = "d0a" + id, vb = "d0b" + id;
    const bool made =
        sh("ip netns add " + a_) == 0 && sh("ip netns add " + b_) == 0 &&
        sh("ip link add " + va + " type veth peer name " + vb) == 0 &&
        sh("ip link set " + va + " netns " + a_) == 0 && sh("ip link set " + vb + " netns " + b_) == 0 &&
        sh("ip -n " + a_ + " addr add 10.77.0.1/24 dev " + va) == 0 &&
        sh("ip -n " + b_ + " addr add 10.77.0.2/24 dev " + vb) == 0 &&
        sh("ip -n " + a_ + " link set " + va + " up") == 0 &&
        sh("ip -n " + b_ + " link set " + vb + " up") == 0 && sh("ip -n " + a_ + " link set lo up") == 0 &&
        sh("ip -n " + b_ + " link set lo up") == 0;
    if (!made) GTEST_SKIP() << "network namespaces cannot be made here (ip netns add / veth refused)";
    dir_ = make_temp_dir("day0-two-hosts-");
    agent_ = dir_ + "/netns-rsh";
    std::ofstream(agent_) << "#!/bin/sh\n"
                             "# mpirun's rsh agent: runs the command in the namespace of the host.\n"
                             "host=$1; shift\n"
                             "case \"$host\" in 10.77.0.1) ns="
                          << a_ << " ;; 10.77.0.2) ns=" << b_
                          << " ;; *) exit 1 ;; esac\n"
                             "exec ip netns exec \"$ns\" sh -c \"$*\"\n";
    std::filesystem::permissions(agent_, std::filesystem::perms::owner_all);
  }
  void TearDown() override {
    if (!a_.empty()) sh("ip netns del " + a_);  // the veth pair goes with its namespaces
    if (!b_.empty()) sh("ip netns del " + b_);
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  // `mpirun` over the two hosts, TCP only, from the first namespace.
  std::string mpirun_line(const std::string& command) const {
    return "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,tcp ip netns "
           "exec " +
           a_ + " " + find_mpirun() + " --host 10.77.0.1,10.77.0.2 -np 2 --mca plm_rsh_agent " + agent_ +
           " --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24 " + command +
           " 2>&1";
  }
  std::string a_, b_, dir_, agent_;
};

TEST_F(TwoHosts, TensorParallelOverTcpBetweenNamespacesEqualsOneProcess) {
  const std::string where =
      shell_output(mpirun_line("sh -c 'echo rank $OMPI_COMM_WORLD_RANK $(ip netns identify $$)'"));
  EXPECT_NE(where.find("rank 0 " + a_), std::string::npos) << where;
  EXPECT_NE(where.find("rank 1 " + b_), std::string::npos) << where;
  const std::string model = std::string(DAY0_TEST_DATA_DIR) + "/golden/llama3";
  const std::string run = std::string(DAY0_CLI_PATH) + " run " + model +
                          " --prompt-ids 1,17,42,99,3,250 --max-new 8 --threads 1 --json";
  const CliResult one = run_cli_bounded(
      {"run", model, "--prompt-ids", "1,17,42,99,3,250", "--max-new", "8", "--threads", "1", "--json"}, 60);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const std::string text = shell_output("timeout 120 " + mpirun_line(run + " --tp 2"));
  const size_t json_at = text.find('{');
  ASSERT_NE(json_at, std::string::npos) << text;
  const nlohmann::json two = nlohmann::json::parse(text.substr(json_at, text.rfind('}') - json_at + 1));
  EXPECT_EQ(two["tokens"], nlohmann::json::parse(one.out)["tokens"]);
  ASSERT_EQ(two["parallel"]["world"], 2);
  for (const auto& r : two["parallel"]["ranks"]) EXPECT_GT(r["comm_bytes_sent"].get<double>(), 0) << r.dump();
}

}  // namespace
}  // namespace day0::testing
