#include "day0/serve/openai_server.h"

#include <atomic>
#include <csignal>
#include <ctime>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "day0/serve/http_server.h"
#include "day0/serve/openai_protocol.h"
#include "day0/serve/timing_backend.h"

namespace day0::serve {

namespace {

constexpr int kHandlerThreads = 4;  // parse, tokenize and submit; the engine has its own thread

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// The OpenAI error code of an error the HTTP layer answers itself.
std::string code_of(int status) {
  switch (status) {
    case 404:
      return "not_found";
    case 405:
      return "method_not_allowed";
    case 408:
      return "request_timeout";
    case 413:
      return "request_too_large";
    case 431:
      return "headers_too_large";
    case 503:
      return "too_many_connections";
    default:
      return "";
  }
}

HttpServerOptions http_options(const ServerOptions& o) {
  HttpServerOptions h;
  h.host = o.host;
  h.port = o.port;
  h.handler_threads = kHandlerThreads;
  h.max_connections = o.max_connections;
  h.max_connections_per_client = o.max_connections_per_client;
  h.head_timeout = o.request_timeout;
  h.body_timeout = 6 * o.request_timeout;
  h.idle_timeout = o.keep_alive_timeout;
  h.limits.max_body_bytes = kMaxRequestBytes;
  return h;
}

}  // namespace

struct OpenAiServer::Impl {
  Impl(Engine& e, const tokenizer::Tokenizer* t, const ServerOptions& o, ServeMetrics& m,
       TimingBackend* timing)
      : tokenizer(t),
        options(o),
        metrics(m),
        http(http_options(o)),
        scheduler(e, t, o.scheduler, m,
                  [&m, timing] {
                    if (timing != nullptr) m.add_op_seconds(timing->take());
                  }),
        limits{e.spec().vocab_size,
               o.scheduler.context > 0 ? o.scheduler.context : e.spec().max_position_embeddings,
               o.max_tokens_default} {}

  const tokenizer::Tokenizer* tokenizer;
  const ServerOptions& options;
  ServeMetrics& metrics;
  // Declared before the scheduler: the engine thread may wake a connection until the scheduler is gone.
  HttpServer http;
  Scheduler scheduler;
  ModelLimits limits;
  std::atomic<uint64_t> next_id{0};
  std::atomic<bool> stopped{false};
  std::mutex shutdown_mutex;

  HttpResponse error_response(const ApiError& e) {
    metrics.count_http_error(e.status);
    HttpResponse r;
    r.status = e.status;
    r.body = e.to_json();
    return r;
  }

  HttpResponse json_response(std::string body) {
    HttpResponse r;
    r.body = std::move(body);
    return r;
  }

  // The 401 response when an API key is set and the request does not carry it.
  std::optional<HttpResponse> refuse_unauthorized(const HttpRequest& req) {
    if (options.api_key.empty()) return std::nullopt;
    const std::string_view header = req.field("authorization");
    const std::string_view prefix = "Bearer ";
    if (header.size() > prefix.size() && header.substr(0, prefix.size()) == prefix &&
        constant_time_equal(header.substr(prefix.size()), options.api_key)) {
      return std::nullopt;
    }
    return error_response(ApiError{401, "missing or wrong API key: send 'Authorization: Bearer KEY'",
                                   "invalid_request_error", "", "invalid_api_key"});
  }

  // A submitted request's response, produced from its stream's events as the engine pushes them.
  class CompletionResponse final : public LateResponse {
   public:
    CompletionResponse(Impl& server, std::shared_ptr<ApiRequest> request,
                       std::shared_ptr<RequestStream> stream, std::unique_ptr<ResponseBuilder> builder)
        : server_(server),
          request_(std::move(request)),
          stream_(std::move(stream)),
          builder_(std::move(builder)) {}

    bool poll(std::string& out, HttpResponse& whole) override {
      std::vector<StreamEvent> events;
      stream_->take(events);
      bool finished = false;
      if (request_->stream) {
        if (!opened_) {
          opened_ = true;
          out += builder_->sse_open();
        }
        for (const StreamEvent& e : events) {
          out += builder_->sse_event(e);
          finished = finished || e.finished;
        }
        if (finished) out += builder_->sse_close();
        return finished;
      }
      for (const StreamEvent& e : events) {
        if (e.error) {
          whole = server_.error_response(*e.error);
          return true;
        }
        builder_->add(e);
        finished = finished || e.finished;
      }
      if (finished) whole = server_.json_response(builder_->body());
      return finished;
    }

    // The client is gone: the engine drops the sequence at its next step and frees its blocks.
    void abandon() override { stream_->cancel(); }

   private:
    Impl& server_;
    std::shared_ptr<ApiRequest> request_;  // the builder reads it
    std::shared_ptr<RequestStream> stream_;
    std::unique_ptr<ResponseBuilder> builder_;
    bool opened_ = false;
  };

  // On a handler thread: parse, tokenize, submit; the response then follows the engine's events.
  HttpReply completion(const HttpRequest& req, const HttpWake& wake, Endpoint endpoint) {
    HttpReply reply;
    if (auto refused = refuse_unauthorized(req)) {
      reply.response = std::move(*refused);
      return reply;
    }
    auto parsed = parse_api_request(req.body, endpoint);
    if (auto* e = std::get_if<ApiError>(&parsed)) {
      reply.response = error_response(*e);
      return reply;
    }
    auto request = std::make_shared<ApiRequest>(std::move(std::get<ApiRequest>(parsed)));
    if (request->model != options.served_model_name) {
      reply.response =
          error_response(ApiError{404,
                                  fmt::format("the model '{}' does not exist; this server serves '{}'",
                                              request->model, options.served_model_name),
                                  "invalid_request_error", "model", "model_not_found"});
      return reply;
    }
    const uint64_t id = next_id++;
    auto sequence = to_sequence_request(*request, tokenizer, limits, std::random_device{}() ^ (id << 32));
    if (auto* e = std::get_if<ApiError>(&sequence)) {
      reply.response = error_response(*e);
      return reply;
    }
    auto submitted = scheduler.submit(std::move(std::get<SequenceRequest>(sequence)));
    if (auto* e = std::get_if<ApiError>(&submitted)) {
      reply.response = error_response(*e);
      return reply;
    }
    auto stream = std::get<std::shared_ptr<RequestStream>>(submitted);
    stream->set_listener(wake);
    auto builder = std::make_unique<ResponseBuilder>(
        *request, tokenizer, options.served_model_name,
        fmt::format("{}-{:016x}", endpoint == Endpoint::kChat ? "chatcmpl" : "cmpl", id),
        static_cast<int64_t>(std::time(nullptr)));
    reply.streamed = request->stream;
    if (reply.streamed) {
      reply.response.content_type = "text/event-stream";
      reply.response.fields.emplace_back("Cache-Control", "no-cache");
    }
    reply.late = std::make_shared<CompletionResponse>(*this, request, std::move(stream), std::move(builder));
    return reply;
  }

  void routes() {
    http.route("POST", "/v1/chat/completions",
               [this](const HttpRequest& q, const HttpWake& w) { return completion(q, w, Endpoint::kChat); });
    http.route("POST", "/v1/completions", [this](const HttpRequest& q, const HttpWake& w) {
      return completion(q, w, Endpoint::kCompletion);
    });
    const bool quick = true;  // these only read state: answered on the event thread
    http.route(
        "GET", "/v1/models",
        [this](const HttpRequest& q, const HttpWake&) {
          HttpReply reply;
          if (auto refused = refuse_unauthorized(q)) {
            reply.response = std::move(*refused);
            return reply;
          }
          nlohmann::json m = {{"id", options.served_model_name},
                              {"object", "model"},
                              {"created", static_cast<int64_t>(std::time(nullptr))},
                              {"owned_by", "day0"},
                              {"max_model_len", limits.context},
                              {"max_tokens_default", limits.max_tokens_default}};
          reply.response = json_response(nlohmann::json({{"object", "list"}, {"data", {m}}}).dump());
          return reply;
        },
        quick);
    http.route(
        "GET", "/health",
        [this](const HttpRequest&, const HttpWake&) {
          HttpReply reply;
          if (scheduler.shutting_down()) {
            reply.response.status = 503;
            reply.response.body = R"({"status":"shutting down"})";
          } else {
            reply.response.body = R"({"status":"ok"})";
          }
          return reply;
        },
        quick);
    http.route(
        "GET", "/metrics",
        [this](const HttpRequest&, const HttpWake&) {
          metrics.set_http_counters(http.counters());
          HttpReply reply;
          reply.response.content_type = "text/plain; version=0.0.4; charset=utf-8";
          reply.response.body = metrics.render(options.served_model_name);
          return reply;
        },
        quick);
    // What the HTTP layer answers itself (bad framing, limits, timeouts, unknown routes, connection
    // caps) gets the OpenAI error object too.
    http.set_error_body([this](int status, const std::string& message) {
      return error_response(ApiError{
          status, message, status >= 500 ? "server_error" : "invalid_request_error", "", code_of(status)});
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
  impl_->routes();
}

OpenAiServer::~OpenAiServer() {
  shutdown();
}

Result<int> OpenAiServer::start() {
  return impl_->http.bind();
}

bool OpenAiServer::serve() {
  return impl_->http.run();
}

void OpenAiServer::end_grace() {
  if (impl_) impl_->scheduler.end_grace();
}

void OpenAiServer::shutdown() {
  if (!impl_) return;
  std::lock_guard lock(impl_->shutdown_mutex);
  if (impl_->stopped) return;
  impl_->scheduler.shutdown(options_.shutdown_grace);
  // Every stream has its last event now; give the event thread a bounded time to queue the answers
  // (stop() then lets the queued bytes go out).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (impl_->http.busy() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  impl_->http.stop();
  impl_->stopped = true;
}

}  // namespace day0::serve
