#pragma once
// `day0 serve`: an OpenAI-compatible HTTP server over one engine (vLLM's and llama-server's
// conventions). Endpoints: POST /v1/chat/completions, POST /v1/completions (both with `stream` as
// server-sent events ending in `data: [DONE]`), GET /v1/models, GET /health, GET /metrics
// (Prometheus text). With an API key every /v1 request needs `Authorization: Bearer KEY` (401).
// Bad requests are answered before anything reaches the engine, each with its 4xx status and an
// OpenAI error object; a request that fails inside the engine gets 500 and the server goes on.
//
// HTTP comes from cpp-httplib (Debian's libcpp-httplib-dev): a thread-pool server where each
// connection holds one pool thread while it is served, a streaming response included. That is
// simple and enough at the concurrency we serve from one CPU process (hundreds of streams): the pool
// is sized from max_seqs + max_waiting, so a request over the limit gets its 429 instead of queueing
// behind the others. The engine itself runs on the scheduler's one thread (serve/scheduler.h); HTTP
// threads only parse, tokenize, wait for events and write.
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
