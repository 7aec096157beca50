// Interrupted work leaves nothing behind: SIGINT / SIGTERM remove the temporaries on the spot, and
// what a SIGKILL leaves (named with the dead pid) is removed by the next run.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_runner.h"

namespace day0::testing {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + " ";
  return s;
}

pid_t dead_pid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  int status = 0;
  waitpid(pid, &status, 0);
  return pid;
}

class Interrupt : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = make_temp_dir("day0_interrupt_");
    tmp_ = root_ + "/tmp";
    work_ = root_ + "/work";
    fs::create_directories(tmp_);
    fs::create_directories(work_);
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string root_, tmp_, work_;
};

TEST_F(Interrupt, AdaptSigintRemovesItsScratchAndStaleOnesGoNextRun) {
  // Left by runs killed with SIGKILL: the scratch of a dead pid and a half-written report set.
  const std::string dead = std::to_string(dead_pid());
  fs::create_directories(tmp_ + "/.day0-adapt.tmp-" + dead + "-AAAAAA/model");
  fs::create_directories(work_ + "/.out.tmp-" + dead + "-BBBBBB");
  std::ofstream(work_ + "/.out.tmp-" + dead + "-BBBBBB/report.json") << "{";
  // A long soak keeps the run busy when the signal comes (the other stages take about 2 s).
  CliResult r = run_cli_bounded(
      {"adapt", "--out", work_ + "/out", "--soak-requests", "100000000", "--soak-seconds", "120"}, 180, 4.0,
      SIGINT, {"TMPDIR=" + tmp_});
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 128 + SIGINT) << r.err;
  // Nothing of this run or of the killed ones is left; no report was half-written.
  EXPECT_TRUE(entries(tmp_).empty()) << joined(entries(tmp_));
  for (const auto& name : entries(work_)) {
    EXPECT_TRUE(name == ".out.lock") << "left behind: " << name;  // the lock file is kept on purpose
  }
}

TEST_F(Interrupt, SynthSigtermRemovesItsPartialShards) {
  // Large enough to be still writing when the signal comes.
  CliResult r =
      run_cli_bounded({"synth", "llama-3.1-8b", "--out", work_ + "/m", "--hidden", "1024", "--heads", "16",
                       "--head-dim", "64", "--intermediate", "4096", "--layers", "8", "--vocab", "32768"},
                      120, 1.0, SIGTERM);
  EXPECT_FALSE(r.timed_out);
  if (r.exit_code == 0) GTEST_SKIP() << "synth finished before the signal";
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
  EXPECT_TRUE(entries(work_).empty()) << joined(entries(work_));
}

TEST_F(Interrupt, StaleSynthTemporariesAreRemovedByTheNextRun) {
  const std::string stale = work_ + "/.m.tmp-" + std::to_string(dead_pid()) + "-CCCCCC";
  fs::create_directories(stale);
  std::ofstream(stale + "/model-00001-of-00003.safetensors") << "partial";
  CliResult r = run_cli_bounded({"synth", "llama-3.1-8b", "--out", work_ + "/m"}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(joined(entries(work_)), "m ");
}

}  // namespace
}  // namespace day0::testing
