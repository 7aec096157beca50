#pragma once
// The HTTP/1.1 layer of `day0 serve`: one event thread waits on every socket (epoll), so an open
// connection costs a buffer, not a thread, and a slow or silent client cannot hold anything the
// others need. Each connection has deadlines (the head, the body, keep-alive idleness, a reader that
// takes nothing), the number of connections is capped in all and per client address, requests sent
// back to back on one connection (pipelining) are answered in order, and framing is strict
// (serve/http_message.h). Handlers that take time (parsing and tokenizing a prompt, submitting it) run
// on a few handler threads; their responses, whole or streamed, are written by the event thread as the
// engine produces them (LateResponse). A client that disconnects before its response is complete has
// its LateResponse abandoned at once, which cancels the work behind it.
// Thread safety: route() and set_error_body() before run(); run() on one thread; stop(), counters()
// and busy() from any thread; a HttpWake from any thread, at any time (also after the connection or
// the server is gone: it then does nothing).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "day0/core/status.h"
#include "day0/serve/http_message.h"

namespace day0::serve {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port
  int handler_threads = 4;
  int64_t max_connections = 4096;                  // open at once (lowered to the process's file limit)
  int64_t max_connections_per_client = 1024;       // per peer address; over either cap: 503 and close
  std::chrono::milliseconds head_timeout{10000};   // from a request's first byte to the end of its head
  std::chrono::milliseconds body_timeout{60000};   // from the end of the head to the end of the body
  std::chrono::milliseconds idle_timeout{5000};    // keep-alive: waiting for the next request
  std::chrono::milliseconds write_timeout{30000};  // response bytes pending and none taken this long
  HttpLimits limits;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> fields;  // beyond Content-Type and framing
};

// A response the engine produces over time. Its methods run on the event thread, poll() after each
// wake-up of the connection (and once when the handler returns).
class LateResponse {
 public:
  virtual ~LateResponse() = default;
  // Streamed: appends the body bytes ready now to `out` (framed as chunks by the server). Whole: sets
  // `whole` when the response is complete. Returns true at the end.
  virtual bool poll(std::string& out, HttpResponse& whole) = 0;
  // The client went away (or the server is stopping) before the end: stop the work.
  virtual void abandon() = 0;
};

struct HttpReply {
  HttpResponse response;               // the response, or a streamed one's status and fields
  std::shared_ptr<LateResponse> late;  // non-null: the body (streamed) or the response (whole) comes later
  bool streamed = false;
};

// Wakes the connection's LateResponse (from any thread).
using HttpWake = std::function<void()>;
using HttpHandler = std::function<HttpReply(const HttpRequest&, const HttpWake&)>;
// The body of an error the server answers itself (framing, limits, timeouts, unknown routes).
using HttpErrorBody = std::function<HttpResponse(int status, const std::string& message)>;

struct HttpCounters {
  int64_t open = 0;         // connections open now
  int64_t accepted = 0;     // since start
  int64_t refused = 0;      // over a connection cap
  int64_t timed_out = 0;    // closed by a deadline (head, body, idle reader)
  int64_t client_gone = 0;  // responses abandoned because the client disconnected first
};

class HttpServer {
 public:
  explicit HttpServer(HttpServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // `quick`: the handler only reads state (health, metrics) and runs on the event thread; the others
  // run on the handler threads.
  void route(std::string method, std::string path, HttpHandler handler, bool quick = false);
  void set_error_body(HttpErrorBody error_body);

  // Binds and listens; returns the port.
  Result<int> bind();
  // Serves until stop(); false when bind() had not succeeded.
  bool run();
  // Stops accepting, lets pending response bytes go out (up to 2 s), closes everything; run() returns.
  void stop();

  HttpCounters counters() const;
  // Connections with a request being handled (a handler running, or a LateResponse not finished).
  int64_t busy() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace day0::serve
