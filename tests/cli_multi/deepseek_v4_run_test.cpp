// DeepSeek-V4-Flash's miniature (`day0 synth deepseek-v4-flash`: the release's tensor names and weight
// format, every attention layer kind, hash-routed layers, hyper-connections) under mpirun: `run --tp 2`
// over two ranks and `run --tp 2 --ep 2` over four give the single process's greedy tokens, and `serve
// --tp 2` answers a greedy completion with them.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mpirun.h"

namespace day0::testing {
namespace {

#define D0_REQUIRE_MPIRUN() \
  if (find_mpirun().empty()) GTEST_SKIP() << "mpirun not found (make test installs openmpi-bin)"

constexpr int kNewTokens = 8;
// 14 tokens: past the miniature's compression windows (4 and 8), so that both compressed layer kinds
// attend to entries, and the sparse layer's indexer keeps 2 of its 3.
const std::vector<int> kPrompt = {1, 17, 42, 99, 3, 250, 128, 7, 64, 31, 200, 5, 77, 12};

std::string ids_text(const std::vector<int>& ids) {
  std::string s;
  for (int id : ids) {
    if (!s.empty()) s += ',';
    s += std::to_string(id);
  }
  return s;
}

std::string tag_for(const char* test) {
  return std::string(test) + "-" + std::to_string(getpid());
}

class DeepseekV4Miniature : public ::testing::Test {
 protected:
  // One miniature for the suite: synth is the command under test too.
  static void SetUpTestSuite() {
    dir_ = new std::string(make_temp_dir("day0_v4_mini_"));
    const CliResult r =
        run_cli_bounded({"synth", "deepseek-v4-flash", "--out", model(), "--seed", "5", "--json"}, 60);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  static std::string model() { return *dir_ + "/mini"; }
  static std::vector<std::string> run_args(std::vector<std::string> more = {}) {
    std::vector<std::string> args = {
        "run",       model(), "--prompt-ids", ids_text(kPrompt), "--max-new", std::to_string(kNewTokens),
        "--threads", "1",     "--json"};
    args.insert(args.end(), more.begin(), more.end());
    return args;
  }
  // The single process's greedy tokens.
  static std::vector<int> one_process_tokens() {
    const CliResult one = run_cli_bounded(run_args(), 60);
    EXPECT_EQ(one.exit_code, 0) << one.err;
    if (one.exit_code != 0) return {};
    const auto tokens = nlohmann::json::parse(one.out)["tokens"].get<std::vector<int>>();
    EXPECT_EQ(tokens.size(), static_cast<size_t>(kNewTokens));
    return tokens;
  }
  static std::string* dir_;
};
std::string* DeepseekV4Miniature::dir_ = nullptr;

TEST_F(DeepseekV4Miniature, TensorParallelRunGivesOneProcessTokens) {
  D0_REQUIRE_MPIRUN();
  const std::vector<int> want = one_process_tokens();
  ASSERT_FALSE(want.empty());
  const MpiRunResult two = run_mpi(2, run_args({"--tp", "2"}), 90, tag_for("v4-tp2"));
  ASSERT_EQ(two.exit_code, 0) << two.out << two.err;
  const auto got = nlohmann::json::parse(two.out);  // rank 0 alone prints
  EXPECT_EQ(got["tokens"].get<std::vector<int>>(), want);
  EXPECT_EQ(got["parallel"]["tp"], 2);
}

TEST_F(DeepseekV4Miniature, TensorTimesExpertParallelRunOverFourRanksGivesOneProcessTokens) {
  D0_REQUIRE_MPIRUN();
  const std::vector<int> want = one_process_tokens();
  ASSERT_FALSE(want.empty());
  const MpiRunResult four = run_mpi(4, run_args({"--tp", "2", "--ep", "2"}), 120, tag_for("v4-tp2-ep2"));
  ASSERT_EQ(four.exit_code, 0) << four.out << four.err;
  const auto got = nlohmann::json::parse(four.out);
  EXPECT_EQ(got["tokens"].get<std::vector<int>>(), want);
  EXPECT_EQ(got["parallel"]["world"], 4);
  EXPECT_EQ(got["parallel"]["ep"], 2);
  // Each rank holds half of the routed experts, each split in two.
  for (const auto& r : got["parallel"]["ranks"]) {
    EXPECT_EQ(r["experts"]["end"].get<int>() - r["experts"]["begin"].get<int>(), 4) << r.dump();
  }
}

// One greedy completion from `serve --tp 2` (rank 0 serves, rank 1 follows its steps).
TEST_F(DeepseekV4Miniature, TensorParallelServeAnswersWithOneProcessTokens) {
  D0_REQUIRE_MPIRUN();
  const std::vector<int> want = one_process_tokens();
  ASSERT_FALSE(want.empty());
  const std::string tag = tag_for("v4-serve-tp2");
  MpiJob job(2,
             {"serve", model(), "--port", "0", "--threads", "1", "--kv-blocks", "256", "--served-model-name",
              "mini", "--tp", "2"},
             tag);
  ASSERT_TRUE(job.wait_for_output("listening on", 90)) << job.out() << job.err();
  const std::string marker = "listening on http://127.0.0.1:";
  const std::string out = job.out();
  const int port = std::stoi(out.substr(out.find(marker) + marker.size()));
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(60, 0);
  const nlohmann::json body = {{"model", "mini"},  {"prompt", kPrompt}, {"max_tokens", kNewTokens},
                               {"temperature", 0}, {"logprobs", 0},     {"ignore_eos", true}};
  auto res = client.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(res && res->status == 200) << (res ? res->body : httplib::to_string(res.error()));
  std::vector<int> got;  // the miniature has no tokenizer: ids from the logprobs' "token_id:N" names
  const nlohmann::json reply = nlohmann::json::parse(res->body);
  for (const auto& t : reply["choices"][0]["logprobs"]["tokens"]) {
    const std::string name = t.get<std::string>();
    got.push_back(std::stoi(name.substr(name.find(':') + 1)));
  }
  EXPECT_EQ(got, want);
  const int leader = rank_process(tag, 0);
  ASSERT_GT(leader, 0);
  kill(leader, SIGTERM);
  const MpiRunResult r = job.finish(30);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(processes_tagged(tag).empty());
}

}  // namespace
}  // namespace day0::testing
