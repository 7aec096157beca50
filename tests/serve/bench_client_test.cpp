// The load generator's counting of streamed tokens against the usage the server reports, over a
// scripted server whose streams are written by hand.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "day0/serve/bench_client.h"
#include "day0/serve/soak.h"

namespace day0::serve {
namespace {

// A server that answers every completion with `chunks` one-token chunks, a finish chunk, then a usage
// chunk reporting `usage` completion tokens.
class ScriptedServer {
 public:
  ScriptedServer(int chunks, int usage) {
    server_.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"object":"list","data":[{"id":"scripted"}]})", "application/json");
    });
    server_.Post("/v1/completions", [chunks, usage](const httplib::Request&, httplib::Response& res) {
      std::string body;
      auto event = [&](const nlohmann::json& j) { body += "data: " + j.dump() + "\n\n"; };
      for (int i = 0; i < chunks; ++i)
        event({{"choices", {{{"index", 0}, {"text", "x"}, {"finish_reason", nullptr}}}}});
      event({{"choices", {{{"index", 0}, {"text", ""}, {"finish_reason", "length"}}}}});
      event({{"choices", nlohmann::json::array()}, {"usage", {{"completion_tokens", usage}}}});
      body += "data: [DONE]\n\n";
      res.set_content(body, "text/event-stream");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~ScriptedServer() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
};

BenchResult bench(const ScriptedServer& server) {
  BenchOptions o;
  o.url = server.url();
  o.concurrency = 2;
  o.requests = 3;
  o.prompt_len = {4, 4};
  o.output_len = {6, 6};
  auto r = run_serve_bench(o);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.is_ok() ? *r : BenchResult{};
}

TEST(BenchClient, StreamMatchingItsUsageCountsEveryToken) {
  ScriptedServer server(6, 6);
  const BenchResult r = bench(server);
  EXPECT_EQ(r.failed, 0);
  EXPECT_EQ(r.short_streams, 0);
  EXPECT_EQ(r.output_tokens, 3 * 6);
}

// llama-server sends a token that ends inside a UTF-8 character with the next one: fewer chunks than
// tokens, the text whole. Counted by the usage and reported apart, not failed.
TEST(BenchClient, FewerChunksThanTheUsageIsAShortStreamNotAFailure) {
  ScriptedServer server(4, 6);
  const BenchResult r = bench(server);
  EXPECT_EQ(r.failed, 0);
  EXPECT_EQ(r.short_streams, 3);
  EXPECT_EQ(r.output_tokens, 3 * 6);
  EXPECT_NE(r.first_short_stream.find("reported 6 completion tokens and streamed 4"), std::string::npos)
      << r.first_short_stream;
  EXPECT_EQ(to_json(r)["short_streams"], 3);
}

// More chunks than the server says it generated cannot be explained by held-back bytes: a failure.
TEST(BenchClient, MoreChunksThanTheUsageFails) {
  ScriptedServer server(7, 6);
  const BenchResult r = bench(server);
  EXPECT_EQ(r.failed, 3);
  EXPECT_EQ(r.short_streams, 0);
  EXPECT_NE(r.first_error.find("reported 6 completion tokens and streamed 7"), std::string::npos)
      << r.first_error;
}

// The soak samples a local target's process: the one listening on the URL's port.
TEST(BenchClient, ListeningPidIsTheProcessServingThePort) {
  ScriptedServer server(1, 1);
  const int port = loopback_port(server.url());
  ASSERT_GT(port, 0);
  EXPECT_EQ(listening_pid(port), ::getpid());
  EXPECT_EQ(loopback_port("http://localhost:8000/v1"), 8000);
  EXPECT_EQ(loopback_port("http://[::1]:8000"), 8000);
  EXPECT_EQ(loopback_port("http://10.0.0.2:8000"), 0);  // another host: not sampled
  EXPECT_EQ(loopback_port("http://127.0.0.1"), 0);
  EXPECT_EQ(loopback_port("http://127.0.0.1:99999"), 0);
  EXPECT_EQ(loopback_port("http://127.0.0.1:80x"), 0);
}

}  // namespace
}  // namespace day0::serve
