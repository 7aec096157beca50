// `day0 serve` under mpirun: rank 0 serves HTTP and schedules, the other ranks follow its steps with
// their shards. Greedy completions of concurrent requests under TP 2 (Llama), EP 2 (Qwen3-MoE) and
// PP 2 equal the single process's tokens; so do a repeated prompt and a multi-turn follow-up served
// from the prefix cache (the hits counted in /metrics), the followers replaying rank 0's cache
// operations; /metrics reports the communication idle ratio; SIGTERM to mpirun ends every rank with
// exit 0 (a follower holding any KV block at the end would not); a hung follower ends the job within
// its timeout naming the rank; nothing is left behind.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "mpirun.h"

namespace day0::testing {
namespace {

#define D0_REQUIRE_MPIRUN() \
  if (find_mpirun().empty()) GTEST_SKIP() << "mpirun not found (make test installs openmpi-bin)"

std::string golden(const char* name) {
  return std::string(DAY0_TEST_DATA_DIR) + "/golden/" + name;
}

std::string tag_for(const char* test) {
  return std::string(test) + "-" + std::to_string(getpid());
}

const std::vector<std::vector<int>> kPrompts = {
    {1, 17, 42, 99, 3, 250}, {5, 9, 200, 31}, {77, 12, 8, 140, 66}};
constexpr int kNewTokens = 8;

std::string ids_text(const std::vector<int>& ids) {
  std::string s;
  for (int id : ids) {
    if (!s.empty()) s += ',';
    s += std::to_string(id);
  }
  return s;
}

// The single process's greedy tokens for `prompt` (`day0 run`).
std::vector<int> reference_tokens_for(const std::string& model, const std::vector<int>& prompt) {
  const CliResult r = run_cli_bounded({"run", model, "--prompt-ids", ids_text(prompt), "--max-new",
                                       std::to_string(kNewTokens), "--threads", "1", "--json"},
                                      60);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? nlohmann::json::parse(r.out)["tokens"].get<std::vector<int>>()
                          : std::vector<int>{};
}

std::vector<std::vector<int>> reference_tokens(const std::string& model) {
  std::vector<std::vector<int>> out;
  for (const auto& prompt : kPrompts) out.push_back(reference_tokens_for(model, prompt));
  return out;
}

int port_of(const std::string& out) {
  const std::string marker = "listening on http://127.0.0.1:";
  const size_t at = out.find(marker);
  return at == std::string::npos ? -1 : std::stoi(out.substr(at + marker.size()));
}

// A greedy completion of `prompt` (token ids; the miniatures have no tokenizer): the generated ids,
// read back from the logprobs' "token_id:N" names.
std::vector<int> complete(int port, const std::vector<int>& prompt) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(60, 0);
  const nlohmann::json body = {{"model", "mini"},  {"prompt", prompt}, {"max_tokens", kNewTokens},
                               {"temperature", 0}, {"logprobs", 0},    {"ignore_eos", true}};
  auto res = client.Post("/v1/completions", body.dump(), "application/json");
  if (!res || res->status != 200) {
    ADD_FAILURE() << "completion failed: " << (res ? res->body : httplib::to_string(res.error()));
    return {};
  }
  std::vector<int> ids;
  const nlohmann::json reply = nlohmann::json::parse(res->body);
  for (const auto& t : reply["choices"][0]["logprobs"]["tokens"]) {
    const std::string name = t.get<std::string>();
    ids.push_back(std::stoi(name.substr(name.find(':') + 1)));
  }
  if (ids.empty()) ADD_FAILURE() << "no tokens in " << res->body;
  return ids;
}

double metric(int port, const std::string& name) {
  httplib::Client client("127.0.0.1", port);
  auto res = client.Get("/metrics");
  if (!res || res->status != 200) return -1;
  std::istringstream lines(res->body);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(name, 0) != 0) continue;
    const char next = line.size() > name.size() ? line[name.size()] : '\0';
    if (next == ' ' || next == '{') return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return -1;
}

// Prefix caching under mpirun (blocks of 32 tokens): a prompt of 60 tokens leaves an entry of its
// first block once pre-filled and one of two blocks (its last 28 tokens and 4 generated ones) when it
// finishes. The same prompt again starts from the first block; a follow-up turn (prompt, reply, 12
// more tokens) from both. Each gives `day0 run`'s tokens, and every block rank 0 still holds is the
// cache's two blocks in each of its `kv_layers` layers. A follower that did not replay the entries
// fails at the first hit (it would hold no cache to start from), one that kept a block fails the stop.
void reuses_cached_prefixes(int port, const std::string& model, int kv_layers) {
  std::vector<int> prompt;
  for (int j = 0; j < 60; ++j) prompt.push_back((j * 11 + 5) % 250);
  const std::vector<int> reply = reference_tokens_for(model, prompt);
  ASSERT_EQ(reply.size(), static_cast<size_t>(kNewTokens));
  std::vector<int> follow_up = prompt;
  follow_up.insert(follow_up.end(), reply.begin(), reply.end());
  for (int j = 0; j < 12; ++j) follow_up.push_back((j * 7 + 3) % 250);
  const std::vector<int> follow_up_reply = reference_tokens_for(model, follow_up);
  const double hits = metric(port, "day0:prefix_cache_hits_total");
  EXPECT_EQ(metric(port, "day0:prefix_caching_enabled"), 1.0);
  EXPECT_EQ(complete(port, prompt), reply) << "first time";
  EXPECT_EQ(metric(port, "day0:prefix_cache_hits_total"), hits);
  EXPECT_EQ(complete(port, prompt), reply) << "again, from the cached first block";
  EXPECT_EQ(metric(port, "day0:prefix_cache_hits_total"), hits + 32);
  EXPECT_EQ(complete(port, follow_up), follow_up_reply) << "the next turn, from the cached two blocks";
  EXPECT_EQ(metric(port, "day0:prefix_cache_hits_total"), hits + 32 + 64);
  // Gauges are published after the step that answered: give them a moment.
  for (int i = 0; i < 20 && metric(port, "day0:kv_cache_used_blocks") != 2.0 * kv_layers; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(metric(port, "day0:kv_cache_used_blocks"), 2.0 * kv_layers);
}

MpiRunResult stop_gracefully(MpiJob& job, const std::string& tag) {
  const int leader = rank_process(tag, 0);
  EXPECT_GT(leader, 0);
  if (leader > 0) kill(leader, SIGTERM);
  return job.finish(30);
}

// `kv_layers`: the layers whose KV blocks rank 0 holds.
void serves_like_one_process(const std::string& model, const std::vector<std::string>& degrees, int np,
                             const char* tag_name, int kv_layers) {
  const auto expected = reference_tokens(model);
  const std::string tag = tag_for(tag_name);
  std::vector<std::string> args = {
      "serve", model, "--port", "0", "--threads", "1", "--kv-blocks", "512", "--served-model-name", "mini"};
  args.insert(args.end(), degrees.begin(), degrees.end());
  MpiJob job(np, args, tag);
  ASSERT_TRUE(job.wait_for_output("listening on", 90)) << job.out() << job.err();
  const int port = port_of(job.out());
  ASSERT_GT(port, 0) << job.out();
  // All prompts at once (one batch, continuous batching), then each alone again.
  std::vector<std::vector<int>> got(kPrompts.size());
  {
    std::vector<std::thread> clients;
    for (size_t i = 0; i < kPrompts.size(); ++i)
      clients.emplace_back([&, i] { got[i] = complete(port, kPrompts[i]); });
    for (auto& c : clients) c.join();
  }
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    EXPECT_EQ(got[i], expected[i]) << "prompt " << i << " served together";
    EXPECT_EQ(complete(port, kPrompts[i]), expected[i]) << "prompt " << i << " served alone";
  }
  const double idle = metric(port, "day0:communication_idle_ratio");
  EXPECT_GT(idle, 0.0);
  EXPECT_LT(idle, 1.0);
  // Every finished sequence gives its blocks back; the gauge is published after the step that answered
  // (a loaded machine has shown the last reply before it: give it a moment, as below).
  for (int i = 0; i < 20 && metric(port, "day0:kv_cache_used_blocks") != 0.0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(metric(port, "day0:kv_cache_used_blocks"), 0.0);
  reuses_cached_prefixes(port, model, kv_layers);
  // A graceful stop is rank 0's SIGTERM (mpirun's own exit status counts a signal it got as failure).
  const MpiRunResult r = stop_gracefully(job, tag);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("under mpirun"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("serve: stopped"), std::string::npos) << r.err;
  EXPECT_TRUE(processes_tagged(tag).empty());
}

TEST(DistributedServe, TensorParallelCompletionsEqualOneProcess) {
  D0_REQUIRE_MPIRUN();
  serves_like_one_process(golden("llama3"), {"--tp", "2"}, 2, "serve-tp2", 2);
}

TEST(DistributedServe, ExpertParallelCompletionsEqualOneProcess) {
  D0_REQUIRE_MPIRUN();
  serves_like_one_process(golden("qwen3-moe"), {"--ep", "2", "--moe-combine", "all-to-all"}, 2, "serve-ep2",
                          2);
}

// Two redundant expert copies per layer (equal weights: no load file): the completions are still one
// process's, with concurrent requests whose picks the copies share.
TEST(DistributedServe, RedundantExpertCopiesServeLikeOneProcess) {
  D0_REQUIRE_MPIRUN();
  serves_like_one_process(golden("qwen3-moe"), {"--ep", "2", "--redundant-experts", "2"}, 2, "serve-eplb", 2);
}

// Attention data parallelism: every rank serves its own requests on its own port. The prompts sent to
// both ports at once (each rank's MoE layers meeting the other's steps), then one alone on rank 1
// (rank 0 idle: its one-row filler steps meet rank 1's collectives), give the single process's
// tokens; both pools return every block; rank 0's SIGTERM ends both ranks with exit 0.
TEST(DistributedServe, DataParallelAttentionRanksServeTheirOwnRequestsLikeOneProcess) {
  D0_REQUIRE_MPIRUN();
  const std::string model = golden("qwen3-moe");
  const auto expected = reference_tokens(model);
  const std::string tag = tag_for("serve-dp2");
  MpiJob job(2,
             {"serve", model, "--port", "0", "--threads", "1", "--kv-blocks", "512", "--served-model-name",
              "mini", "--ep", "2", "--dp-attention", "2"},
             tag);
  std::vector<int> ports;
  for (int i = 0; i < 900 && ports.size() < 2; ++i) {
    ports.clear();
    const std::string out = job.out();
    const std::string marker = "listening on http://127.0.0.1:";
    for (size_t at = out.find(marker); at != std::string::npos; at = out.find(marker, at + 1))
      ports.push_back(std::stoi(out.substr(at + marker.size())));
    if (ports.size() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(ports.size(), 2u) << job.out() << job.err();
  EXPECT_NE(ports[0], ports[1]);
  std::vector<std::vector<std::vector<int>>> got(2, std::vector<std::vector<int>>(kPrompts.size()));
  {
    std::vector<std::thread> clients;
    for (size_t r = 0; r < 2; ++r) {
      for (size_t i = 0; i < kPrompts.size(); ++i)
        clients.emplace_back([&, r, i] { got[r][i] = complete(ports[r], kPrompts[i]); });
    }
    for (auto& c : clients) c.join();
  }
  for (size_t r = 0; r < 2; ++r) {
    for (size_t i = 0; i < kPrompts.size(); ++i)
      EXPECT_EQ(got[r][i], expected[i]) << "port " << ports[r] << " prompt " << i << " served together";
  }
  EXPECT_EQ(complete(ports[1], kPrompts[2]), expected[2]) << "alone on rank 1";
  for (int port : ports) {
    for (int i = 0; i < 20 && metric(port, "day0:kv_cache_used_blocks") != 0.0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    // Prefix caching keeps the prompts' whole blocks (none here: every prompt is shorter than one).
    EXPECT_EQ(metric(port, "day0:kv_cache_used_blocks"), 0.0) << port;
    const double idle = metric(port, "day0:communication_idle_ratio");  // waits in the MoE layers
    EXPECT_GT(idle, 0.0) << port;
    EXPECT_LT(idle, 1.0) << port;
  }
  const MpiRunResult r = stop_gracefully(job, tag);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("attention data-parallel"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("another rank is shutting down"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("serve: stopped"), r.err.rfind("serve: stopped")) << "both ranks stop: " << r.err;
  EXPECT_TRUE(processes_tagged(tag).empty());
  // Layouts it does not run are refused before loading.
  const CliResult bad =
      run_cli_bounded({"serve", model, "--port", "0", "--ep", "1", "--dp-attention", "2"}, 30);
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("DP = EP, TP 1 and PP 1"), std::string::npos) << bad.err;
}

TEST(DistributedServe, PipelineStagesServeLikeOneProcess) {
  D0_REQUIRE_MPIRUN();
  serves_like_one_process(golden("llama3"), {"--pp", "2"}, 2, "serve-pp2", 1);  // a layer a stage
}

// `day0 plan` on a two-device machine prints a launch line that serves as printed (with an ephemeral
// port and one thread a rank added).
TEST(DistributedServe, ThePlannersLaunchLineServesAsPrinted) {
  D0_REQUIRE_MPIRUN();
  const std::string dir = make_temp_dir("day0-launch-");
  const std::string cluster = dir + "/two.json";
  std::ofstream(cluster) << R"({"name": "two-cpus", "nodes": 1, "devices_per_node": 2,
    "device": {"name": "CPU", "memory_gb": 4, "memory_bandwidth_gb_s": 20, "peak_tflops": {"bf16": 1}},
    "intra_node": {"bandwidth_gb_s": 20, "latency_us": 2}, "inter_node": {"bandwidth_gb_s": 1, "latency_us": 50}})";
  const std::string model = golden("llama3");
  const CliResult plan = run_cli({"plan", model, "--cluster", cluster, "--context", "64", "--concurrency",
                                  "4", "--json", "--top", "50"});
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  std::string line;
  const nlohmann::json plans = nlohmann::json::parse(plan.out)["plans"];
  for (const auto& p : plans) {
    if (p.contains("launch") && p["tp"] == 2) line = p["launch"];
  }
  ASSERT_FALSE(line.empty()) << plan.out;
  const std::string prefix = "mpirun -np 2 day0 ";
  ASSERT_EQ(line.rfind(prefix, 0), 0u) << line;
  std::vector<std::string> args;
  std::istringstream words(line.substr(prefix.size()));
  for (std::string w; words >> w;) args.push_back(w);
  args.insert(args.end(),
              {"--port", "0", "--threads", "1", "--kv-blocks", "256", "--served-model-name", "mini"});
  const auto expected = reference_tokens(model);
  const std::string tag = tag_for("serve-launch");
  MpiJob job(2, args, tag);
  ASSERT_TRUE(job.wait_for_output("listening on", 90)) << job.out() << job.err();
  EXPECT_EQ(complete(port_of(job.out()), kPrompts[0]), expected[0]);
  const MpiRunResult r = stop_gracefully(job, tag);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("TP 2 x PP 1 x EP 1"), std::string::npos) << r.err;
  EXPECT_TRUE(processes_tagged(tag).empty());
  std::filesystem::remove_all(dir);
}

// The Llama miniature served by TP 2 on an ephemeral port, each rank waiting `comm_timeout` seconds at
// most in one collective (or a follower for rank 0's next step).
std::vector<std::string> tp2_server(const char* comm_timeout) {
  return {"serve",
          golden("llama3"),
          "--port",
          "0",
          "--threads",
          "1",
          "--kv-blocks",
          "256",
          "--served-model-name",
          "mini",
          "--tp",
          "2",
          "--comm-timeout",
          comm_timeout};
}

TEST(DistributedServe, HungFollowerEndsTheJobNamingItWithoutOrphans) {
  D0_REQUIRE_MPIRUN();
  const std::string tag = tag_for("serve-hang");
  MpiJob job(2, tp2_server("2"), tag);
  ASSERT_TRUE(job.wait_for_output("listening on", 90)) << job.out() << job.err();
  const int port = port_of(job.out());
  const int follower = rank_process(tag, 1);
  ASSERT_GT(follower, 0);
  ASSERT_EQ(kill(follower, SIGSTOP), 0);
  const auto start = std::chrono::steady_clock::now();
  std::thread client([&] {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(20, 0);
    const nlohmann::json body = {{"model", "mini"}, {"prompt", kPrompts[0]}, {"max_tokens", 4}};
    c.Post("/v1/completions", body.dump(), "application/json");  // answered or cut: the job ends
  });
  const MpiRunResult r = job.finish(20);
  client.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(seconds, 10.0);
  EXPECT_NE(r.err.find("rank 1 of 2 silent"), std::string::npos) << r.err;
  EXPECT_TRUE(processes_tagged(tag).empty());
}

TEST(DistributedServe, FollowersOutliveAnIdleServerWithoutTimingOut) {
  D0_REQUIRE_MPIRUN();
  // Idle longer than the followers' receive deadline: rank 0's keep-alives hold them.
  const std::string tag = tag_for("serve-idle");
  MpiJob job(2, tp2_server("1.5"), tag);
  ASSERT_TRUE(job.wait_for_output("listening on", 90)) << job.out() << job.err();
  std::this_thread::sleep_for(std::chrono::seconds(4));
  const int port = port_of(job.out());
  EXPECT_EQ(complete(port, kPrompts[1]).size(), static_cast<size_t>(kNewTokens));
  // SIGTERM to mpirun: it passes the signal on; rank 0 stops gracefully, the followers wait for it,
  // and nothing is left behind (mpirun itself exits 1 after a signal).
  const MpiRunResult r = job.finish(30, SIGTERM);
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.err.find("serve: stopped"), std::string::npos) << r.err;
  EXPECT_TRUE(processes_tagged(tag).empty());
}

}  // namespace
}  // namespace day0::testing
