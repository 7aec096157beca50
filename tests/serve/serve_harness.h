#pragma once
// An in-process `day0 serve` on an ephemeral port for the server tests: a model folder (a golden
// miniature, or a synthesized one with a real tokenizer), an engine over the cpu backend behind an
// optional hook (to slow steps down or make one request's step throw), and HTTP helpers built on
// cpp-httplib's client (the server has its own HTTP layer, serve/http_server.h).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "day0/backends/backend.h"
#include "day0/backends/kernel_list.h"
#include "day0/runtime/draft_model.h"
#include "day0/runtime/model_loader.h"
#include "day0/serve/openai_server.h"
#include "day0/serve/timing_backend.h"

namespace day0::testing {

// Forwards every kernel; `before_embedding` sees the token ids of each step first (it may sleep or
// throw).
class HookBackend final : public Backend {
 public:
  explicit HookBackend(Backend& inner) : inner_(inner) {}
  std::function<void(std::span<const int32_t> ids)> before_embedding;

  std::string_view name() const override { return inner_.name(); }
  ThreadPool* thread_pool() override { return inner_.thread_pool(); }
  bool supports(const OpKey& key) const override { return inner_.supports(key); }
  void synchronize() override { inner_.synchronize(); }
#define D0_HOOK_FORWARD(method, Args, op_name) \
  void method(const Args& a) override {        \
    hook(a);                                   \
    inner_.method(a);                          \
  }
  D0_FOR_EACH_KERNEL(D0_HOOK_FORWARD)
#undef D0_HOOK_FORWARD

 private:
  template <class Args>
  void hook(const Args&) {}
  void hook(const EmbeddingArgs& a) {
    if (before_embedding) before_embedding(a.ids);
  }
  Backend& inner_;
};

// Holds the engine's steps at a gate the test opens, so a test waits on conditions instead of racing
// sleeps against the machine's load: the first `free_steps` steps pass, the next ones wait until
// open() (or 60 s, so a broken test fails instead of hanging); once open, each step sleeps `pace` (a
// long request then cannot finish before its client's hang-up is seen).
// Thread safety: the hook runs on the engine thread, open() and steps() on any.
class StepGate {
 public:
  explicit StepGate(int free_steps, std::chrono::milliseconds pace = std::chrono::milliseconds(0))
      : free_steps_(free_steps), pace_(pace) {}
  void open();
  int steps() const { return steps_; }
  // As HarnessOptions::before_embedding (the gate must outlive the harness).
  std::function<void(std::span<const int32_t>)> hook();

 private:
  void step();
  const int free_steps_;
  const std::chrono::milliseconds pace_;
  std::atomic<int> steps_ = 0;
  std::mutex mutex_;
  std::condition_variable opened_;
  bool open_ = false;
};

struct HarnessOptions {
  std::string model_dir;      // default: tests/golden/llama3
  std::string tokenizer_dir;  // "": none
  serve::ServerOptions server;
  KvDtype kv_dtype = KvDtype::kBF16;
  std::function<void(std::span<const int32_t>)> before_embedding;
  // With server.scheduler.spec kSelfInt4: the model's INT4 copy, quantized at start, drafts.
};

class ServeHarness {
 public:
  explicit ServeHarness(HarnessOptions options);
  ~ServeHarness();
  int port() const { return port_; }
  serve::OpenAiServer& server() { return *server_; }
  Engine& engine() { return *engine_; }
  const LoadedModel& model() const { return model_; }
  // Stops the server (graceful) and waits for serve() to return.
  void stop();

 private:
  LoadedModel model_;
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<HookBackend> hook_;
  std::unique_ptr<serve::TimingBackend> timing_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<SelfDraft> draft_;  // --spec self-int4's draft
  std::unique_ptr<serve::OpenAiServer> server_;
  std::thread thread_;
  int port_ = 0;
};

struct HttpReply {
  int status = 0;  // 0: no response (connection failed)
  std::string body;
  nlohmann::json json() const;  // null when the body is not JSON
};

HttpReply http_post(int port, const std::string& path, const std::string& body,
                    const std::vector<std::pair<std::string, std::string>>& headers = {});
HttpReply http_get(int port, const std::string& path);

// A streamed response: the JSON of each `data:` event before [DONE], and whether [DONE] came.
struct SseReply {
  int status = 0;
  std::vector<nlohmann::json> events;
  bool done = false;
  std::string raw;
};
// `stop_after_events` > 0: the client hangs up after that many events (a disconnect mid-stream).
SseReply http_stream(int port, const std::string& path, const std::string& body,
                     size_t stop_after_events = 0);

// Reads one sample of a Prometheus text exposition ("name{labels} value"); NaN when absent. `labels`
// must match the label text exactly (e.g. model_name="m",finished_reason="stop").
double metric_value(const std::string& text, const std::string& name, const std::string& labels);

std::string golden_model_dir(const std::string& name);

}  // namespace day0::testing
