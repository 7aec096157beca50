// `day0 serve`'s HTTP layer over real sockets: slow clients hold nothing the others need, requests
// sent back to back are answered in order, ambiguous framing is refused and the connection closed,
// deadlines and connection caps hold, and a non-streamed request whose client leaves is cancelled.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "serve_harness.h"

namespace day0::testing {
namespace {

using namespace std::chrono_literals;

// A raw TCP client: bytes out exactly as written, bytes in as they come.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  }
  ~RawClient() { close(); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;
  bool connected() const { return connected_; }
  void send(const std::string& bytes) {
    for (size_t at = 0; at < bytes.size();) {
      const ssize_t n = ::send(fd_, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
      if (n <= 0) return;
      at += static_cast<size_t>(n);
    }
  }
  // Reads until `until` appears `count` times, the peer closes, or `timeout` passes.
  std::string read(std::chrono::milliseconds timeout, const std::string& until = "", int count = 1) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (!until.empty() && occurrences(got_, until) >= count) break;
      pollfd p{fd_, POLLIN, 0};
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(1, left.count()))) <= 0) continue;
      char buf[65536];
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) {
        closed_by_peer_ = true;
        break;
      }
      got_.append(buf, static_cast<size_t>(n));
    }
    return got_;
  }
  bool closed_by_peer() const { return closed_by_peer_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  static int occurrences(const std::string& s, const std::string& what) {
    int n = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + what.size())) ++n;
    return n;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool closed_by_peer_ = false;
  std::string got_;
};

std::string health_request() {
  return "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n";
}

double metric(ServeHarness& h, const std::string& name) {
  return metric_value(http_get(h.port(), "/metrics").body, name, "model_name=\"mini\"");
}

TEST(HttpServer, SlowHeadersDoNotHoldBackHealth) {
  HarnessOptions o;
  ServeHarness h(o);
  // More slow clients than the old thread-per-connection pool had threads (max_seqs + max_waiting + 8),
  // each sending half a head and then a field line now and then.
  const int slow = o.server.scheduler.max_seqs + o.server.scheduler.max_waiting + 40;
  std::vector<std::unique_ptr<RawClient>> clients;
  for (int i = 0; i < slow; ++i) {
    clients.push_back(std::make_unique<RawClient>(h.port()));
    ASSERT_TRUE(clients.back()->connected());
    clients.back()->send("GET /health HTTP/1.1\r\nHost: localhost\r\n");
  }
  for (int round = 0; round < 3; ++round) {
    for (auto& c : clients) c->send("X-Slow: 1\r\n");
    const auto start = std::chrono::steady_clock::now();
    const HttpReply r = http_get(h.port(), "/health");
    const auto took = std::chrono::steady_clock::now() - start;
    EXPECT_EQ(r.status, 200);
    EXPECT_LT(took, 1s) << "round " << round;
  }
  // Every slow client is still waited for, none answered.
  EXPECT_EQ(metric(h, "day0:http_connections_open"), slow + 1.0);
}

TEST(HttpServer, PipelinedRequestsAreAnsweredInOrder) {
  ServeHarness h(HarnessOptions{});
  RawClient c(h.port());
  c.send(health_request() + "GET /nope HTTP/1.1\r\nHost: localhost\r\n\r\n" + health_request());
  const std::string got = c.read(10s, "HTTP/1.1 ", 3);
  ASSERT_EQ(RawClient::occurrences(got, "HTTP/1.1 "), 3) << got;
  const size_t first = got.find("HTTP/1.1 200");
  const size_t second = got.find("HTTP/1.1 404");
  const size_t third = got.find("HTTP/1.1 200", first + 1);
  EXPECT_LT(first, second);
  EXPECT_LT(second, third);
  EXPECT_NE(third, std::string::npos);
  // The connection stays open for more.
  c.send(health_request());
  EXPECT_EQ(RawClient::occurrences(c.read(10s, "HTTP/1.1 ", 4), "HTTP/1.1 "), 4);
  EXPECT_FALSE(c.closed_by_peer());
}

TEST(HttpServer, AmbiguousFramingIsRefusedAndTheConnectionClosed) {
  ServeHarness h(HarnessOptions{});
  const std::string body = R"({"model":"mini","prompt":[1,2,3],"max_tokens":1})";
  const std::string head =
      "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n";
  const std::vector<std::pair<const char*, std::string>> cases = {
      {"conflicting Content-Length",
       head + "Content-Length: " + std::to_string(body.size()) + "\r\nContent-Length: 3\r\n\r\n" + body},
      {"Transfer-Encoding with Content-Length", head + "Transfer-Encoding: chunked\r\nContent-Length: " +
                                                    std::to_string(body.size()) + "\r\n\r\n" + body},
      {"a bad chunk size", head + "Transfer-Encoding: chunked\r\n\r\nxyz\r\n" + body + "\r\n0\r\n\r\n"},
      {"a space before the colon", "GET /health HTTP/1.1\r\nHost : localhost\r\n\r\n"},
  };
  for (const auto& [what, bytes] : cases) {
    RawClient c(h.port());
    c.send(bytes + health_request());  // a smuggled second request must not be answered
    const std::string got = c.read(10s);
    EXPECT_TRUE(got.starts_with("HTTP/1.1 400 ")) << what << ": " << got;
    EXPECT_EQ(RawClient::occurrences(got, "HTTP/1.1 "), 1) << what << ": " << got;
    EXPECT_NE(got.find("Connection: close"), std::string::npos) << what;
    EXPECT_TRUE(c.closed_by_peer()) << what;
  }
  // A chunked request framed right is served.
  RawClient c(h.port());
  c.send(head + "Transfer-Encoding: chunked\r\n\r\n" +
         fmt::format("{:x}\r\n{}\r\n0\r\n\r\n", body.size(), body));
  EXPECT_TRUE(c.read(30s, "\r\n\r\n{").starts_with("HTTP/1.1 200 ")) << c.read(0ms);
}

TEST(HttpServer, AHeadThatDoesNotArriveInTimeGets408AndTheConnectionCloses) {
  HarnessOptions o;
  o.server.request_timeout = 300ms;
  ServeHarness h(o);
  RawClient c(h.port());
  c.send("GET /health HTTP/1.1\r\nHost: localhost\r\n");
  const std::string got = c.read(10s);
  EXPECT_TRUE(got.starts_with("HTTP/1.1 408 ")) << got;
  EXPECT_TRUE(c.closed_by_peer());
  EXPECT_EQ(metric(h, "day0:http_timeouts_total"), 1.0);
}

TEST(HttpServer, ConnectionsOverTheClientCapGet503) {
  HarnessOptions o;
  o.server.max_connections_per_client = 3;
  ServeHarness h(o);
  std::vector<std::unique_ptr<RawClient>> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(std::make_unique<RawClient>(h.port()));
    held.back()->send(health_request());
    EXPECT_TRUE(held.back()->read(10s, "\r\n\r\n{").starts_with("HTTP/1.1 200 "));
  }
  RawClient over(h.port());
  over.send(health_request());
  EXPECT_TRUE(over.read(10s).starts_with("HTTP/1.1 503 ")) << over.read(0ms);
  EXPECT_TRUE(over.closed_by_peer());
  held.pop_back();  // one leaves: room again
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(http_get(h.port(), "/health").status, 200);
  EXPECT_EQ(metric(h, "day0:http_connections_refused_total"), 1.0);
}

TEST(HttpServer, ANonStreamedRequestWhoseClientLeavesIsCancelledAtTheNextStep) {
  // Two steps run free; then each step waits for the gate, which opens once the client is gone.
  StepGate gate(2, 10ms);
  HarnessOptions o;
  o.server.scheduler.prefix_caching = false;
  o.before_embedding = gate.hook();
  ServeHarness h(o);
  const std::string body = R"({"model":"mini","prompt":[5,6,7,8],"max_tokens":200,"temperature":0})";
  {
    RawClient c(h.port());
    c.send(
        "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
        "application/json\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body);
    for (const auto deadline = std::chrono::steady_clock::now() + 30s;
         gate.steps() < 3 && std::chrono::steady_clock::now() < deadline;) {
      std::this_thread::sleep_for(5ms);
    }
    ASSERT_GE(gate.steps(), 3);
  }                                    // the client hangs up while the third step waits at the gate
  std::this_thread::sleep_for(100ms);  // the event thread sees the hang-up and cancels
  const int steps_at_hangup = gate.steps();
  gate.open();
  bool freed = false;
  for (const auto deadline = std::chrono::steady_clock::now() + 30s;
       !freed && std::chrono::steady_clock::now() < deadline;) {
    const std::string m = http_get(h.port(), "/metrics").body;
    freed = metric_value(m, "day0:num_requests_running", "model_name=\"mini\"") == 0.0 &&
            metric_value(m, "day0:kv_cache_used_blocks", "model_name=\"mini\"") == 0.0;
    if (!freed) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(freed) << http_get(h.port(), "/metrics").body;
  // The step that was waiting finishes; the sequence is dropped before the one after it.
  EXPECT_LE(gate.steps(), steps_at_hangup + 1);
  EXPECT_EQ(metric(h, "day0:http_client_disconnects_total"), 1.0);
  EXPECT_LT(metric(h, "day0:generation_tokens_total"), 10.0);
  EXPECT_EQ(
      http_post(h.port(), "/v1/completions", R"({"model":"mini","prompt":[1,2],"max_tokens":2})").status,
      200);
}

}  // namespace
}  // namespace day0::testing
