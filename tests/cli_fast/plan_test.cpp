#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace day0::testing {
namespace {

nlohmann::json parse_json(const std::string& text) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    ADD_FAILURE() << "not JSON: " << e.what() << "\n" << text;
    return {};
  }
}

TEST(CliPlan, DeepSeekV3OnOneH200NodePrintsPlansAndLaunchLines) {
  CliResult r = run_cli({"plan", "deepseek-v3", "--cluster", "8xH200", "--top", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("mpirun -np "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("smallest deployment unit"), std::string::npos);
  EXPECT_NE(r.out.find("70,272 bytes a token"), std::string::npos);
  EXPECT_NE(r.out.find("routed experts"), std::string::npos);
  EXPECT_NE(r.out.find("Estimates, not measurements"), std::string::npos);
}

TEST(CliPlan, JsonCarriesDegreesMemoryAndTimes) {
  CliResult r = run_cli({"plan", "deepseek-v3", "--cluster", "8xH200", "--json", "--top", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = parse_json(r.out);
  ASSERT_TRUE(j.is_object());
  EXPECT_TRUE(j["fits"].get<bool>());
  EXPECT_EQ(j["model"]["kv_bytes_per_token"].get<double>(), 70272);
  ASSERT_EQ(j["plans"].size(), 4u);
  double last_tpot = 0;
  for (const auto& p : j["plans"]) {
    EXPECT_EQ(p["devices"].get<int64_t>(),
              p["tp"].get<int64_t>() * p["pp"].get<int64_t>() * p["dp"].get<int64_t>());
    EXPECT_LE(p["memory"]["total_bytes"].get<double>(), p["memory"]["capacity_bytes"].get<double>());
    EXPECT_GE(p["tpot_s"].get<double>(), last_tpot);  // min-latency: best first
    last_tpot = p["tpot_s"].get<double>();
    // Transfer and waits apart: the idle ratio holds the transfer's share and the waits on top.
    EXPECT_GE(p["idle_ratio"].get<double>(), p["comm_share"].get<double>());
    EXPECT_TRUE(p["decode_comm_s"].contains("skew_wait")) << p.dump();
    // A launch line starts one rank per device of the plan, or the plan says why day0 cannot run it.
    if (p.contains("launch")) {
      const std::string line = p["launch"];
      EXPECT_EQ(
          line.rfind("mpirun -np " + std::to_string(p["devices"].get<int64_t>()) + " day0 serve deepseek-v3 ",
                     0),
          0u)
          << line;
    } else {
      EXPECT_NE(p["launch_not_runnable"].get<std::string>().find("DP-attention"), std::string::npos)
          << p.dump();
      EXPECT_NE(p["dp"], p["ep"]);
    }
  }
}

TEST(CliPlan, LaunchLinesForSlurmAndBeyondOneNode) {
  // Kimi K2 at 128k on H800 takes two nodes: the mpirun line names a host file and places a node's
  // devices per node; srun says the same in its own flags.
  const std::vector<std::string> args = {"plan",      "kimi-k2", "--cluster",     "2x8xH800",
                                         "--context", "131072",  "--concurrency", "1",
                                         "--weights", "fp8",     "--json"};
  auto first_launch = [](const CliResult& r) {
    const nlohmann::json plans = parse_json(r.out)["plans"];
    for (const auto& p : plans) {
      if (p.contains("launch")) return std::pair{p["launch"].get<std::string>(), p["devices"].get<int64_t>()};
    }
    return std::pair{std::string(), int64_t{0}};
  };
  const CliResult mpi = run_cli(args);
  ASSERT_EQ(mpi.exit_code, 0) << mpi.err;
  const auto [line, devices] = first_launch(mpi);
  ASSERT_FALSE(line.empty()) << mpi.out;
  ASSERT_GT(devices, 8);
  EXPECT_EQ(
      line.rfind(
          fmt::format("mpirun -np {} --hostfile HOSTS --map-by ppr:8:node day0 serve kimi-k2 ", devices), 0),
      0u)
      << line;
  std::vector<std::string> slurm_args = args;
  slurm_args.insert(slurm_args.end(), {"--launch", "slurm"});
  const CliResult slurm = run_cli(slurm_args);
  ASSERT_EQ(slurm.exit_code, 0) << slurm.err;
  const std::string srun = first_launch(slurm).first;
  EXPECT_EQ(
      srun.rfind(fmt::format("srun --mpi=pmix --nodes={} --ntasks={} --ntasks-per-node=8 day0 serve kimi-k2 ",
                             (devices + 7) / 8, devices),
                 0),
      0u)
      << srun;
  EXPECT_EQ(run_cli({"plan", "kimi-k2", "--cluster", "8xH800", "--launch", "pbs"}).exit_code, 2);
}

// --emit k8s writes the best runnable plan as a LeaderWorkerSet (one pod a node, the node's devices each)
// and the leader's Service; the leader's mpirun line is the plan's own. Read back with PyYAML where
// Python has it (Debian's python3-yaml; make test installs it), else checked as text.
TEST(CliPlan, EmitK8sWritesALeaderWorkerSetOfThePlan) {
  const std::string dir = make_temp_dir("day0_k8s_");
  const std::string file = dir + "/kimi.yaml";
  const CliResult r = run_cli({"plan", "kimi-k2", "--cluster", "2x8xH800", "--context", "131072",
                               "--concurrency", "1", "--weights", "fp8", "--emit", "k8s", "--out", file,
                               "--image", "registry.local/day0:1", "--k8s-name", "kimi"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(file);
  const std::string yaml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(yaml.find("kind: LeaderWorkerSet"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("kind: Service"), std::string::npos);
  EXPECT_NE(yaml.find("image: registry.local/day0:1"), std::string::npos);
  EXPECT_NE(yaml.find("nvidia.com/gpu: \"8\""), std::string::npos);
  // The plan's degrees, one rank per device over the group's nodes.
  const CliResult plan = run_cli({"plan", "kimi-k2", "--cluster", "2x8xH800", "--context", "131072",
                                  "--concurrency", "1", "--weights", "fp8", "--json"});
  ASSERT_EQ(plan.exit_code, 0);
  std::string degrees;
  int64_t devices = 0;
  const nlohmann::json plans = parse_json(plan.out)["plans"];
  for (const auto& p : plans) {
    if (!p.contains("launch")) continue;
    const std::string line = p["launch"];
    degrees = line.substr(line.find("day0 serve kimi-k2") + std::string("day0 serve kimi-k2").size());
    devices = p["devices"];
    break;
  }
  ASSERT_GT(devices, 0);
  EXPECT_NE(yaml.find(fmt::format(
                "mpirun --allow-run-as-root -np {} --hostfile /tmp/hosts --map-by ppr:8:node", devices)),
            std::string::npos)
      << yaml;
  EXPECT_NE(yaml.find("day0 serve /models/kimi-k2" + degrees + " --host 0.0.0.0 --port 8000"),
            std::string::npos)
      << degrees << "\n"
      << yaml;
  if (std::system("python3 -c 'import yaml' 2>/dev/null") != 0) {
    std::fprintf(stderr, "EmitK8s: PyYAML not found, the manifests were checked as text only\n");
  } else {
    const std::string check = fmt::format(
        "python3 -c \"import yaml,sys; d=list(yaml.safe_load_all(open('{}'))); "
        "l=d[0]['spec']['leaderWorkerTemplate']; "
        "assert d[0]['kind']=='LeaderWorkerSet' and l['size']=={} and d[1]['kind']=='Service', d; "
        "c=l['leaderTemplate']['spec']['containers'][0]; "
        "assert c['resources']['limits']['nvidia.com/gpu']=='8'; "
        "assert 'mpirun' in c['args'][0] and 'sshd' in "
        "l['workerTemplate']['spec']['containers'][0]['args'][0]; "
        "assert d[1]['spec']['selector']['leaderworkerset.sigs.k8s.io/name']=='kimi'\"",
        file, (devices + 7) / 8);
    EXPECT_EQ(std::system(check.c_str()), 0) << yaml;
  }
  EXPECT_EQ(run_cli({"plan", "kimi-k2", "--cluster", "8xH800", "--emit", "k8s", "--k8s-name", "Bad_Name"})
                .exit_code,
            2);
  EXPECT_EQ(run_cli({"plan", "kimi-k2", "--cluster", "8xH800", "--emit", "helm"}).exit_code, 2);
  std::filesystem::remove_all(dir);
}

TEST(CliPlan, ModelThatFitsNowhereExitsTwoWithTheSmallestCluster) {
  CliResult r = run_cli({"plan", "deepseek-v3", "--cluster", "8xA100-80G", "--weights", "bf16"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.err.find("does not fit on 8xA100-80G"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("3x8xA100-80G"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("DOES NOT FIT"), std::string::npos);
}

TEST(CliPlan, KimiK2At128kNeedsTwoH800Nodes) {
  CliResult r = run_cli({"plan", "kimi-k2", "--cluster", "8xH800", "--context", "131072", "--concurrency",
                         "1", "--weights", "fp8", "--json"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  const auto j = parse_json(r.out);
  EXPECT_FALSE(j["fits"].get<bool>());
  EXPECT_EQ(j["smallest_cluster"]["devices"].get<int64_t>(), 16);
  EXPECT_EQ(j["smallest_cluster"]["unit"]["devices"].get<int64_t>(), 16);
}

TEST(CliPlan, ExplainListsRejectedLayoutsWithReasons) {
  CliResult r = run_cli({"plan", "deepseek-v3", "--cluster", "2x8xH200", "--weights", "fp8", "--explain"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rejected layouts"), std::string::npos);
  EXPECT_NE(r.out.find("over by"), std::string::npos);
  EXPECT_NE(r.out.find("spans nodes"), std::string::npos);
}

TEST(CliPlan, WhatIfTableOverContexts) {
  CliResult r = run_cli({"plan", "llama-3.1-8b", "--cluster", "1xH100", "--context", "8192,131072",
                         "--concurrency", "1,64", "--json"});
  const auto j = parse_json(r.out);
  ASSERT_EQ(j["what_if"].size(), 4u) << r.out << r.err;
  // 64 sequences of 128k tokens of Llama-3.1-8B KV (16 GiB each) do not fit one H100: exit 2.
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(j["what_if"][0]["fits"].get<bool>());
  EXPECT_FALSE(j["what_if"][3]["fits"].get<bool>());
}

TEST(CliPlan, ClusterFileWorksAndBadFilesAreRejected) {
  const std::string dir = make_temp_dir("day0_plan_");
  const std::string good = dir + "/good.json";
  const std::string bad = dir + "/bad.json";
  std::ofstream(good) << R"({"name": "lab", "nodes": 1, "devices_per_node": 4,
    "device": {"name": "X1", "memory_gb": 192, "memory_bandwidth_gb_s": 5000, "peak_tflops": {"bf16": 1000}},
    "intra_node": {"bandwidth_gb_s": 400, "latency_us": 3}, "inter_node": {"bandwidth_gb_s": 50, "latency_us": 10}})";
  std::ofstream(bad) << R"({"name": "lab", "nodes": 1, "devices_per_node": 4,
    "device": {"name": "X1", "memory_gb": -192, "memory_bandwidth_gb_s": 5000, "peak_tflops": {"bf16": 1000}},
    "intra_node": {"bandwidth_gb_s": 400, "latency_us": 3}, "inter_node": {"bandwidth_gb_s": 50, "latency_us": 10}})";
  CliResult ok = run_cli({"plan", "llama-3.1-70b", "--cluster", good});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("lab"), std::string::npos);
  CliResult neg = run_cli({"plan", "llama-3.1-70b", "--cluster", bad});
  EXPECT_EQ(neg.exit_code, 2);
  EXPECT_NE(neg.err.find("device.memory_gb: must not be negative"), std::string::npos) << neg.err;
  std::filesystem::remove_all(dir);
}

TEST(CliPlan, BadUsageExitsTwo) {
  const std::vector<std::vector<std::string>> cases = {
      {"plan", "deepseek-v3", "--cluster", "8xH200", "--objective", "fastest"},
      {"plan", "deepseek-v3", "--cluster", "8xB300"},
      {"plan", "deepseek-v3"},
      {"plan", "no-such-model", "--cluster", "8xH200"},
      {"plan", "deepseek-v3", "--cluster", "8xH200", "--weights", "fp6"},
      {"plan", "deepseek-v3", "--cluster", "8xH200", "--context", "0"},
  };
  for (const auto& args : cases) {
    CliResult r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << args.back() << ": " << r.out << r.err;
    EXPECT_FALSE(r.err.empty()) << args.back();
  }
  CliResult objective = run_cli(cases[0]);
  EXPECT_NE(objective.err.find("unknown objective 'fastest'"), std::string::npos) << objective.err;
}

TEST(CliPlan, HelpDescribesTheFlags) {
  CliResult r = run_cli({"plan", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag :
       {"--cluster", "--context", "--concurrency", "--weights", "--kv-dtype", "--objective", "--explain",
        "--json", "--allow-cross-node-tp", "--redundant-experts"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
}

}  // namespace
}  // namespace day0::testing
