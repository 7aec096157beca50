#pragma once
// `day0 serve`: an OpenAI-compatible HTTP server over one engine (vLLM's and llama-server's
// conventions). Endpoints: POST /v1/chat/completions, POST /v1/completions (both with `stream` as
// server-sent events ending in `data: [DONE]`), GET /v1/models, GET /health, GET /metrics
// (Prometheus text). With an API key every /v1 request needs `Authorization: Bearer KEY` (401).
// Bad requests are answered before anything reaches the engine, each with its 4xx status and an
// OpenAI error object; a request that fails inside the engine gets 500 and the server goes on.
//
// HTTP is serve/http_server.h: one event thread for every connection (deadlines, connection caps,
// pipelining, strict framing), a few handler threads that parse, tokenize and submit, and responses
// written as the engine's events arrive. The engine runs on the scheduler's one thread
// (serve/scheduler.h). A client that disconnects before its response is complete (streamed or not)
// has its sequence cancelled at the engine's next step.
// Thread safety: start(), serve() and shutdown() from any thread; shutdown() may be called while
// serve() runs in another (that is how it ends).
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "day0/core/status.h"
#include "day0/runtime/engine.h"
#include "day0/serve/metrics.h"
#include "day0/serve/scheduler.h"
#include "day0/tokenizer/tokenizer.h"

namespace day0::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (start() says which)
  std::string api_key;
  std::string served_model_name;  // what `model` must say in requests
  SchedulerOptions scheduler;
  std::chrono::milliseconds shutdown_grace{10000};  // running requests get this long to finish
  int64_t max_tokens_default = 4096;                // a chat request's max_tokens when it gives none
  // HTTP connections (serve/http_server.h): caps (over them: 503 and close) and deadlines.
  int64_t max_connections = 4096;
  int64_t max_connections_per_client = 1024;
  std::chrono::milliseconds request_timeout{10000};  // a request's head; its body gets 6 times this
  std::chrono::milliseconds keep_alive_timeout{5000};
};

class OpenAiServer {
 public:
  // `engine` (with its backend) and `tokenizer` (null: token-id prompts only, no text) must outlive
  // the server. `timing` (may be null) is the engine's backend wrapper whose operator times feed
  // /metrics.
  OpenAiServer(Engine& engine, const tokenizer::Tokenizer* tokenizer, ServerOptions options,
               class TimingBackend* timing = nullptr);
  ~OpenAiServer();
  OpenAiServer(const OpenAiServer&) = delete;
  OpenAiServer& operator=(const OpenAiServer&) = delete;

  // Binds the address; returns the port. Unavailable when the address cannot be bound.
  Result<int> start();
  // Serves until shutdown(); false when the server could not listen.
  bool serve();
  // Stops admitting (503), lets running requests finish within the grace period, cancels the rest,
  // then stops the HTTP server (serve() returns).
  void shutdown();
  // While shutdown() runs on another thread: cancel the running requests now instead of at the end of
  // the grace period.
  void end_grace();

  ServeMetrics& metrics() { return metrics_; }
  const ServerOptions& options() const { return options_; }

 private:
  struct Impl;
  ServerOptions options_;
  ServeMetrics metrics_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace day0::serve
