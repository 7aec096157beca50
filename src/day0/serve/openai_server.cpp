#include "day0/serve/openai_server.h"

#include <sys/socket.h>

#include <atomic>
#include <csignal>
#include <ctime>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "day0/serve/openai_protocol.h"
#include "day0/serve/timing_backend.h"

namespace day0::serve {

// cpp-httplib listens with a backlog of 5 (a compile-time constant of the packaged library): a burst
// of hundreds of connections would see SYNs dropped and retried a second later. The socket is ours
// once bound, so listen() again with a real backlog.
class BackloggedServer : public httplib::Server {
 public:
  void widen_backlog(int backlog) {
    const int fd = svr_sock_;
    if (fd >= 0) ::listen(fd, backlog);
  }
};

namespace {

constexpr int kListenBacklog = 1024;
constexpr std::chrono::milliseconds kEventPoll{100};

bool constant_time_equal(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

struct OpenAiServer::Impl {
  Impl(Engine& e, const tokenizer::Tokenizer* t, const ServerOptions& o, ServeMetrics& m,
       TimingBackend* timing)
      : engine(e),
        tokenizer(t),
        options(o),
        metrics(m),
        scheduler(e, t, o.scheduler, m,
                  [&m, timing] {
                    if (timing != nullptr) m.add_op_seconds(timing->take());
                  }),
        limits{e.spec().vocab_size,
               o.scheduler.context > 0 ? o.scheduler.context : e.spec().max_position_embeddings,
               o.max_tokens_default} {}

  Engine& engine;
  const tokenizer::Tokenizer* tokenizer;
  const ServerOptions& options;
  ServeMetrics& metrics;
  Scheduler scheduler;
  ModelLimits limits;
  BackloggedServer http;
  std::atomic<uint64_t> next_id{0};
  std::atomic<bool> stopped{false};
  std::mutex shutdown_mutex;
  // Completion requests whose response is not fully written yet (shutdown waits for them: stopping
  // httplib cuts streams that are still being written).
  std::atomic<int64_t> in_flight{0};
  struct InFlight {
    explicit InFlight(std::atomic<int64_t>& n) : count(n) { ++count; }
    ~InFlight() { --count; }
    std::atomic<int64_t>& count;
  };

  void send_error(httplib::Response& res, const ApiError& e) {
    metrics.count_http_error(e.status);
    res.status = e.status;
    res.set_content(e.to_json(), "application/json");
  }

  bool authorized(const httplib::Request& req, httplib::Response& res) {
    if (options.api_key.empty()) return true;
    const std::string header = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    if (header.size() > prefix.size() && header.compare(0, prefix.size(), prefix) == 0 &&
        constant_time_equal(header.substr(prefix.size()), options.api_key)) {
      return true;
    }
    ApiError e{401, "missing or wrong API key: send 'Authorization: Bearer KEY'", "invalid_request_error", "",
               "invalid_api_key"};
    send_error(res, e);
    return false;
  }

  void completion(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
    auto guard = std::make_shared<InFlight>(in_flight);
    if (!authorized(req, res)) return;
    auto parsed = parse_api_request(req.body, endpoint);
    if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
    auto request = std::make_shared<ApiRequest>(std::move(std::get<ApiRequest>(parsed)));
    if (request->model != options.served_model_name) {
      ApiError e{404,
                 fmt::format("the model '{}' does not exist; this server serves '{}'", request->model,
                             options.served_model_name),
                 "invalid_request_error", "model", "model_not_found"};
      return send_error(res, e);
    }
    const uint64_t id = next_id++;
    auto sequence = to_sequence_request(*request, tokenizer, limits, std::random_device{}() ^ (id << 32));
    if (auto* e = std::get_if<ApiError>(&sequence)) return send_error(res, *e);
    auto submitted = scheduler.submit(std::move(std::get<SequenceRequest>(sequence)));
    if (auto* e = std::get_if<ApiError>(&submitted)) return send_error(res, *e);
    std::shared_ptr<RequestStream> stream = std::get<std::shared_ptr<RequestStream>>(submitted);
    auto builder = std::make_shared<ResponseBuilder>(
        *request, tokenizer, options.served_model_name,
        fmt::format("{}-{:016x}", endpoint == Endpoint::kChat ? "chatcmpl" : "cmpl", id),
        static_cast<int64_t>(std::time(nullptr)));

    if (!request->stream) {
      std::vector<StreamEvent> events;
      for (bool done = false; !done;) {
        events.clear();
        stream->wait(events, kEventPoll);
        for (const StreamEvent& e : events) {
          if (e.error) return send_error(res, *e.error);
          builder->add(e);
          done = done || e.finished;
        }
      }
      res.set_content(builder->body(), "application/json");
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [stream, builder, request, guard, opened = false, closed = false](size_t,
                                                                          httplib::DataSink& sink) mutable {
          if (closed) return false;
          if (!opened) {
            opened = true;
            const std::string first = builder->sse_open();
            if (!first.empty() && !sink.write(first.data(), first.size())) {
              stream->cancel();
              return false;
            }
          }
          std::vector<StreamEvent> events;
          stream->wait(events, kEventPoll);
          std::string out;
          bool finished = false;
          for (const StreamEvent& e : events) {
            out += builder->sse_event(e);
            finished = finished || e.finished;
          }
          if (finished) out += builder->sse_close();
          // A failed write is a client that went away: its sequence is dropped at the next step.
          if (!out.empty() && !sink.write(out.data(), out.size())) {
            stream->cancel();
            return false;
          }
          if (finished) {
            closed = true;
            sink.done();
          }
          return true;
        },
        [stream](bool success) {
          if (!success) stream->cancel();
        });
  }

  void routes() {
    http.Post("/v1/chat/completions",
              [this](const httplib::Request& q, httplib::Response& r) { completion(q, r, Endpoint::kChat); });
    http.Post("/v1/completions", [this](const httplib::Request& q, httplib::Response& r) {
      completion(q, r, Endpoint::kCompletion);
    });
    http.Get("/v1/models", [this](const httplib::Request& q, httplib::Response& r) {
      if (!authorized(q, r)) return;
      nlohmann::json m = {{"id", options.served_model_name},
                          {"object", "model"},
                          {"created", static_cast<int64_t>(std::time(nullptr))},
                          {"owned_by", "day0"},
                          {"max_model_len", limits.context},
                          {"max_tokens_default", limits.max_tokens_default}};
      r.set_content(nlohmann::json({{"object", "list"}, {"data", {m}}}).dump(), "application/json");
    });
    http.Get("/health", [this](const httplib::Request&, httplib::Response& r) {
      if (scheduler.shutting_down()) {
        r.status = 503;
        r.set_content(R"({"status":"shutting down"})", "application/json");
        return;
      }
      r.set_content(R"({"status":"ok"})", "application/json");
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& r) {
      r.set_content(metrics.render(options.served_model_name), "text/plain; version=0.0.4; charset=utf-8");
    });
    // What httplib answers itself (unknown path 404, body over the limit 413, bad HTTP 400) gets the
    // OpenAI error object too.
    http.set_error_handler([this](const httplib::Request& q, httplib::Response& r) {
      if (!r.body.empty()) return;  // one of ours, already an error object
      ApiError e;
      e.status = r.status;
      e.type = r.status >= 500 ? "server_error" : "invalid_request_error";
      if (r.status == 404) {
        e.message = fmt::format("no route {} {}", q.method, q.path);
        e.code = "not_found";
      } else if (r.status == 413) {
        e.message = fmt::format("the request body is larger than the limit of {} bytes", kMaxRequestBytes);
        e.code = "request_too_large";
      } else {
        e.message = fmt::format("HTTP error {}", r.status);
      }
      metrics.count_http_error(e.status);
      r.set_content(e.to_json(), "application/json");
    });
    http.set_exception_handler([this](const httplib::Request&, httplib::Response& r, std::exception_ptr ep) {
      std::string what = "unknown exception";
      try {
        if (ep) std::rethrow_exception(ep);
      } catch (const std::exception& ex) {
        what = ex.what();
      } catch (...) {
      }
      send_error(
          r, ApiError{500, fmt::format("internal error: {}", what), "server_error", "", "internal_error"});
    });
  }
};

OpenAiServer::OpenAiServer(Engine& engine, const tokenizer::Tokenizer* tokenizer, ServerOptions options,
                           TimingBackend* timing)
    : options_(std::move(options)) {
  // A client that closes its socket must not kill the process: writes then fail with EPIPE instead.
  std::signal(SIGPIPE, SIG_IGN);
  if (options_.served_model_name.empty()) options_.served_model_name = "day0";
  impl_ = std::make_unique<Impl>(engine, tokenizer, options_, metrics_, timing);
  const auto threads = static_cast<size_t>(options_.scheduler.max_seqs + options_.scheduler.max_waiting + 8);
  impl_->http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  impl_->http.set_payload_max_length(kMaxRequestBytes);
  impl_->http.set_keep_alive_timeout(2);
  impl_->http.set_tcp_nodelay(true);
  impl_->routes();
}

OpenAiServer::~OpenAiServer() {
  shutdown();
}

Result<int> OpenAiServer::start() {
  int port = options_.port;
  if (port == 0) {
    port = impl_->http.bind_to_any_port(options_.host);
    if (port <= 0) return io_error(fmt::format("serve: cannot bind {} (any port)", options_.host));
  } else if (!impl_->http.bind_to_port(options_.host, port)) {
    return io_error(fmt::format("serve: cannot bind {}:{} (in use, or not an address of this machine)",
                                options_.host, port));
  }
  impl_->http.widen_backlog(kListenBacklog);
  return port;
}

bool OpenAiServer::serve() {
  return impl_->http.listen_after_bind();
}

void OpenAiServer::end_grace() {
  if (impl_) impl_->scheduler.end_grace();
}

void OpenAiServer::shutdown() {
  if (!impl_) return;
  std::lock_guard lock(impl_->shutdown_mutex);
  if (impl_->stopped) return;
  impl_->scheduler.shutdown(options_.shutdown_grace);
  // Every stream has its last event now; give the HTTP threads a bounded time to write it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (impl_->in_flight > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  impl_->http.stop();
  impl_->stopped = true;
}

}  // namespace day0::serve
