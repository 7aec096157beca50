// Stage 8: a bounded soak of the real server. `day0 serve`'s server (serve/openai_server.h) is started
// in-process on the run target's engine, on a free loopback port, and driven over HTTP: each soak
// round sends kConcurrency streamed completions at once (prompt lengths vary, half greedy, half
// sampled). Resident memory after warm-up must stay within a bound, no request may fail, and at the
// end the KV pool must be back to empty (every block returned; prefix caching is off so that nothing
// is kept on purpose).
#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <random>
#include <thread>

#include "day0/core/human.h"
#include "day0/report/adapt_context.h"
#include "day0/report/soak.h"
#include "day0/report/stages/run_target.h"
#include "day0/runtime/model_loader.h"
#include "day0/serve/openai_server.h"

namespace day0::report {
namespace {

constexpr int kConcurrency = 4;
constexpr int kNewTokens = 4;

// One streamed completion; OK when it ends with [DONE] after kNewTokens tokens inside the vocabulary.
Status soak_request(int port, const std::vector<int32_t>& prompt, bool greedy, uint64_t seed, int64_t vocab) {
  nlohmann::json body = {{"model", "soak"},
                         {"prompt", prompt},
                         {"max_tokens", kNewTokens},
                         {"temperature", greedy ? 0.0 : 0.8},
                         {"top_p", 0.95},
                         {"seed", seed},
                         {"logprobs", 0},
                         {"stream", true}};
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(120, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  std::string raw;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    raw.append(data, n);
    return raw.size() < (size_t{1} << 20);
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  if (!cli.send(req, res, error)) return io_error(fmt::format("no response ({})", httplib::to_string(error)));
  if (res.status != 200)
    return internal_error(fmt::format("HTTP {}: {}", res.status, res.body.substr(0, 200)));
  if (raw.find("data: [DONE]") == std::string::npos)
    return internal_error("the stream did not end with [DONE]");
  int64_t tokens = 0;
  for (size_t at = 0; (at = raw.find("\"token_id:", at)) != std::string::npos; ++tokens) {
    at += 10;
    const int64_t id = std::strtoll(raw.c_str() + at, nullptr, 10);
    if (id < 0 || id >= vocab) return internal_error(fmt::format("token {} outside the vocabulary", id));
  }
  if (tokens != kNewTokens)
    return internal_error(fmt::format("generated {} tokens, wanted {}", tokens, kNewTokens));
  return Status::ok();
}

}  // namespace

void run_stability_stage(AdaptContext& ctx, StageResult& out) {
  auto run = open_run_engine(ctx);
  if (!run.is_ok()) {
    if (run.status().code() == StatusCode::kFailedPrecondition)
      return stage_skip(out, run.status().message());
    return stage_fail(out, run.status().to_string());
  }
  const RunTarget* target = &(*run)->target;
  const LoadedModel* loaded = &(*run)->model;
  Engine& engine = *(*run)->handle.engine;

  serve::ServerOptions so;
  so.port = 0;
  so.served_model_name = "soak";
  so.scheduler.max_seqs = kConcurrency;
  so.scheduler.max_waiting = kConcurrency;
  so.scheduler.prefix_caching = false;
  const int64_t bt = engine.options().kv_block_tokens;
  // Every sequence at its longest (16 prompt + 4 new tokens), twice over.
  so.scheduler.kv_blocks = 2 * kConcurrency * loaded->spec.n_layers * ((16 + kNewTokens + bt - 1) / bt + 1);
  so.shutdown_grace = std::chrono::milliseconds(5000);
  serve::OpenAiServer server(engine, nullptr, so);
  auto port = server.start();
  if (!port.is_ok()) return stage_fail(out, port.status().to_string());
  std::thread http([&] { server.serve(); });

  const int64_t vocab = loaded->spec.vocab_size;
  int64_t http_requests = 0;
  auto round = [&](int i) -> Status {
    std::vector<Status> results(kConcurrency);
    std::vector<std::thread> clients;
    for (int k = 0; k < kConcurrency; ++k) {
      const int n = i * kConcurrency + k;
      std::mt19937_64 rng(ctx.options.seed * 1000003ull + static_cast<uint64_t>(n));
      std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab) - 1);
      std::vector<int32_t> prompt(static_cast<size_t>(4 + n % 13));  // lengths vary, as real traffic does
      for (auto& t : prompt) t = token(rng);
      clients.emplace_back([&, k, n, prompt = std::move(prompt)] {
        results[static_cast<size_t>(k)] =
            soak_request(*port, prompt, n % 2 == 0, static_cast<uint64_t>(n), vocab);
      });
    }
    for (auto& c : clients) c.join();
    http_requests += kConcurrency;
    for (const Status& s : results) D0_RETURN_IF_ERROR(s);
    return Status::ok();
  };
  SoakOptions options;
  options.max_requests =
      std::max(1, (ctx.options.soak_requests + kConcurrency - 1) / kConcurrency);  // rounds
  options.max_seconds = ctx.options.soak_seconds;
  options.max_growth_bytes = ctx.options.soak_max_growth_bytes;
  SoakResult result = run_soak(round, options);
  // The last step's gauges: wait (bounded) for the engine thread to publish them after the last request.
  serve::SchedulerGauges gauges = server.metrics().gauges();
  for (int i = 0; i < 100 && (gauges.kv_blocks_used != 0 || gauges.running != 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    gauges = server.metrics().gauges();
  }
  server.shutdown();
  http.join();

  out.evidence = to_json(result);
  out.evidence["target"] = target->label;
  out.evidence["kv_dtype"] = kv_dtype_name(engine.options().kv_dtype);
  out.evidence["max_growth_bytes"] = options.max_growth_bytes;
  out.evidence["over_http"] = true;
  out.evidence["concurrency"] = kConcurrency;
  out.evidence["http_requests"] = http_requests;
  out.evidence["kv_blocks_used_after"] = gauges.kv_blocks_used;
  out.evidence["kv_blocks_capacity"] = gauges.kv_blocks_total;
  if (!result.passed) return stage_fail(out, result.reason);
  if (gauges.kv_blocks_used != 0) {
    return stage_fail(out,
                      fmt::format("the KV pool did not return to empty: {} of {} blocks still held after "
                                  "every request finished",
                                  gauges.kv_blocks_used, gauges.kv_blocks_total));
  }
  stage_pass(out,
             fmt::format("{} HTTP requests ({} at once) to day0 serve on {} in {}: resident memory {} after "
                         "warm-up ({:+.1f} MiB, bound {}), KV pool back to empty",
                         http_requests, kConcurrency, target->label, human_seconds(result.seconds),
                         human_bytes_binary(static_cast<double>(result.rss_final_bytes)),
                         static_cast<double>(result.rss_growth_bytes) / (1 << 20),
                         human_bytes_binary(static_cast<double>(options.max_growth_bytes))));
}

}  // namespace day0::report
