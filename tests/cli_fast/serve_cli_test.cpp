// `day0 serve` as a process: it binds, prints where it listens, and on SIGTERM / SIGINT stops
// admitting, finishes and exits 0; bad options exit 2; the launch line `day0 plan` prints uses only
// flags serve knows (a layout that does not fit a one-process miniature is refused by serve itself,
// not by the parser).
#include <gtest/gtest.h>

#include <csignal>
#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace day0::testing {
namespace {

const std::string kGolden = std::string(DAY0_TEST_DATA_DIR) + "/golden/llama3";

TEST(CliServe, HelpNamesTheOptions) {
  CliResult r = run_cli({"serve", "--help"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* flag : {"--host", "--port", "--api-key", "--max-seqs", "--max-batch-tokens", "--kv-blocks",
                           "--kv-memory", "--kv-dtype", "--served-model-name", "--threads", "--policy"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
}

TEST(CliServe, SigtermStopsGracefullyWithExitZero) {
  for (int sig : {SIGTERM, SIGINT}) {
    CliResult r = run_cli_bounded({"serve", kGolden, "--port", "0", "--kv-blocks", "256", "--threads", "1"},
                                  60, 1.5, sig);
    EXPECT_FALSE(r.timed_out);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("listening on http://127.0.0.1:"), std::string::npos) << r.out;
    EXPECT_NE(r.err.find(sig == SIGTERM ? "SIGTERM received" : "SIGINT received"), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("serve: stopped"), std::string::npos) << r.err;
  }
}

TEST(CliServe, BadOptionsExitTwo) {
  EXPECT_EQ(run_cli({"serve", kGolden, "--kv-blocks", "4", "--kv-memory", "100"}).exit_code, 2);
  EXPECT_EQ(run_cli({"serve", kGolden, "--policy", "greedy"}).exit_code, 2);
  EXPECT_EQ(run_cli({"serve", "/nonexistent/model"}).exit_code, 2);
  CliResult ctx = run_cli({"serve", kGolden, "--context", "100000"});
  EXPECT_EQ(ctx.exit_code, 2);
  EXPECT_NE(ctx.err.find("max_position_embeddings"), std::string::npos) << ctx.err;
}

TEST(CliServe, ThePlannersLaunchLineParses) {
  CliResult plan = run_cli({"plan", "deepseek-v3", "--cluster", "8xH200", "--json", "--top", "10"});
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  std::string line;
  const nlohmann::json plans = nlohmann::json::parse(plan.out)["plans"];
  for (const auto& p : plans) {
    if (p.contains("launch") && line.empty()) line = p["launch"];
  }
  const std::string marker = "day0 serve deepseek-v3 ";
  const size_t at = line.find(marker);
  ASSERT_NE(at, std::string::npos) << line;
  std::vector<std::string> args = {"serve", kGolden};
  std::string rest = line.substr(at + marker.size());
  for (size_t pos = 0; pos < rest.size();) {
    const size_t end = std::min(rest.find(' ', pos), rest.size());
    args.push_back(rest.substr(pos, end - pos));
    pos = end + 1;
  }
  CliResult r = run_cli(args);
  // Every flag is known; what refuses the degrees is serve itself (a dense miniature started as one
  // process cannot take DeepSeek-V3's layout), not the parser.
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err.find("not expected"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("was not"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("day0 serve: error:"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace day0::testing
