#include "serve_harness.h"

#include <cmath>
#include <limits>
#include <sstream>

#include <httplib.h>

#include "day0/core/error.h"

namespace day0::testing {

std::string golden_model_dir(const std::string& name) {
  return std::string(DAY0_TEST_DATA_DIR) + "/golden/" + name;
}

void StepGate::open() {
  {
    std::lock_guard lock(mutex_);
    open_ = true;
  }
  opened_.notify_all();
}

void StepGate::step() {
  if (++steps_ <= free_steps_) return;
  std::unique_lock lock(mutex_);
  opened_.wait_for(lock, std::chrono::seconds(60), [&] { return open_; });
  lock.unlock();
  if (pace_.count() > 0) std::this_thread::sleep_for(pace_);
}

std::function<void(std::span<const int32_t>)> StepGate::hook() {
  return [this](std::span<const int32_t>) { step(); };
}

ServeHarness::ServeHarness(HarnessOptions o) {
  if (o.model_dir.empty()) o.model_dir = golden_model_dir("llama3");
  const bool mtp = o.server.scheduler.spec == DraftSource::kMtp;  // the MTP layers bound and run
  LoadOptions load;
  load.mtp_layers = mtp;
  auto model = load_model(o.model_dir, load);
  D0_CHECK_MSG(model.is_ok(), model.status().to_string());
  model_ = std::move(model).value();
  if (!o.tokenizer_dir.empty()) {
    auto tok = tokenizer::load_tokenizer(o.tokenizer_dir);
    D0_CHECK_MSG(tok.is_ok(), tok.status().to_string());
    tokenizer_ = *tok;
  }
  BackendOptions bo;
  bo.n_threads = 2;
  bo.quiet = true;
  auto backend = open_backend("cpu", bo);
  D0_CHECK_MSG(backend.is_ok(), backend.status().to_string());
  backend_ = std::move(backend).value();
  hook_ = std::make_unique<HookBackend>(*backend_);
  hook_->before_embedding = o.before_embedding;
  timing_ = std::make_unique<serve::TimingBackend>(*hook_);
  EngineOptions eo;
  eo.kv_dtype = o.kv_dtype;
  eo.mtp_layers = mtp;
  auto engine = Engine::create(model_.spec, model_.weights, *timing_, eo);
  D0_CHECK_MSG(engine.is_ok(), engine.status().to_string());
  engine_ = std::move(engine).value();
  serve::ServerOptions so = o.server;
  if (so.scheduler.spec == DraftSource::kSelfInt4) {
    auto draft = open_self_draft(model_, "", *timing_, eo);
    D0_CHECK_MSG(draft.is_ok(), draft.status().to_string());
    draft_ = std::move(draft).value();
    so.scheduler.draft = draft_->engine.get();
  }
  so.host = "127.0.0.1";
  so.port = 0;
  if (so.served_model_name.empty()) so.served_model_name = "mini";
  if (so.scheduler.kv_blocks == 0) so.scheduler.kv_blocks = 4096;
  if (so.scheduler.context == 0) so.scheduler.context = model_.spec.max_position_embeddings;
  server_ = std::make_unique<serve::OpenAiServer>(*engine_, tokenizer_.get(), so, timing_.get());
  auto port = server_->start();
  D0_CHECK_MSG(port.is_ok(), port.status().to_string());
  port_ = *port;
  thread_ = std::thread([this] { server_->serve(); });
}

void ServeHarness::stop() {
  if (server_) server_->shutdown();
  if (thread_.joinable()) thread_.join();
}

ServeHarness::~ServeHarness() {
  stop();
  server_.reset();
  engine_.reset();
}

nlohmann::json HttpReply::json() const {
  auto j = nlohmann::json::parse(body, nullptr, false);
  return j.is_discarded() ? nlohmann::json() : j;
}

namespace {
httplib::Headers to_headers(const std::vector<std::pair<std::string, std::string>>& headers) {
  httplib::Headers h;
  for (const auto& [k, v] : headers) h.emplace(k, v);
  return h;
}
}  // namespace

HttpReply http_post(int port, const std::string& path, const std::string& body,
                    const std::vector<std::pair<std::string, std::string>>& headers) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(60, 0);
  auto res = cli.Post(path.c_str(), to_headers(headers), body, "application/json");
  if (!res) return {};
  return {res->status, res->body};
}

HttpReply http_get(int port, const std::string& path) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(60, 0);
  auto res = cli.Get(path.c_str());
  if (!res) return {};
  return {res->status, res->body};
}

SseReply http_stream(int port, const std::string& path, const std::string& body, size_t stop_after_events) {
  SseReply out;
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(60, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body;
  req.set_header("Content-Type", "application/json");
  std::string pending;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    out.raw.append(data, n);
    pending.append(data, n);
    for (size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
      std::string event = pending.substr(0, end);
      pending.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0) continue;
      const std::string payload = event.substr(6);
      if (payload == "[DONE]") {
        out.done = true;
        continue;
      }
      out.events.push_back(nlohmann::json::parse(payload, nullptr, false));
      if (stop_after_events > 0 && out.events.size() >= stop_after_events) return false;  // hang up
    }
    return true;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  const bool ok = cli.send(req, res, error);
  out.status = ok || stop_after_events > 0 ? res.status : 0;
  return out;
}

double metric_value(const std::string& text, const std::string& name, const std::string& labels) {
  const std::string key = labels.empty() ? name + " " : name + "{" + labels + "} ";
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) == 0) return std::stod(line.substr(key.size()));
  }
  return std::numeric_limits<double>::quiet_NaN();
}

}  // namespace day0::testing
