#include "day0/serve/bench_client.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <httplib.h>

#include "day0/serve/metrics.h"

namespace day0::serve {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    const double pos = q * static_cast<double>(v.size() - 1);
    const auto lo = static_cast<size_t>(pos);
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
  };
  p.p50 = at(0.50);
  p.p90 = at(0.90);
  p.p99 = at(0.99);
  double sum = 0;
  for (double x : v) sum += x;
  p.mean = sum / static_cast<double>(v.size());
  return p;
}

struct Sample {
  bool ok = false;
  std::string error;
  int64_t prompt_tokens = 0, output_tokens = 0;
  int64_t usage_tokens = -1;  // completion_tokens of the usage chunk; -1: none came
  // Fewer chunks (or logprob entries) than the usage counts: llama-server holds back a token that ends
  // inside a UTF-8 character and sends its bytes with the next token, as one chunk with one entry.
  // The text arrives whole, so this is not a failure; the tokens are counted by the usage.
  bool short_of_usage = false;
  std::string error_if_short;  // what short_of_usage saw
  double ttft = 0, e2e = 0;
  std::vector<double> itl;
};

// Tokens a streamed chunk carries: as many as its log-probabilities list (OpenAI's completions
// `tokens`, or a `content` array as chat and llama-server write them), else one: both day0 and
// llama-server send a chunk for every generated token.
int64_t tokens_in(const nlohmann::json& choice) {
  const auto lp = choice.find("logprobs");
  if (lp != choice.end() && lp->is_object()) {
    for (const char* key : {"tokens", "content"}) {
      const auto list = lp->find(key);
      if (list != lp->end() && list->is_array()) return static_cast<int64_t>(list->size());
    }
  }
  return 1;
}

httplib::Headers auth_headers(const BenchOptions& o) {
  httplib::Headers h;
  if (!o.api_key.empty()) h.emplace("Authorization", "Bearer " + o.api_key);
  return h;
}

// One streamed completion: a token per chunk (or as many as its logprobs list), checked against the
// usage the last chunk reports (more chunks than the usage is an error, fewer a short stream).
Sample one_request(const BenchOptions& o, const std::string& model, const std::vector<int32_t>& prompt,
                   int64_t max_tokens) {
  Sample s;
  s.prompt_tokens = static_cast<int64_t>(prompt.size());
  httplib::Client cli(o.url);
  cli.set_read_timeout(600, 0);
  cli.set_connection_timeout(30, 0);
  // No log-probabilities unless asked (they cost a server time that plain generation does not
  // spend); the usage of the last chunk checks the token count.
  nlohmann::json body = {{"model", model},
                         {"prompt", prompt},
                         {"max_tokens", max_tokens},
                         {"temperature", 0},
                         {"ignore_eos", true},
                         {"stream", true},
                         {"stream_options", {{"include_usage", true}}}};
  if (o.logprobs >= 0) body["logprobs"] = o.logprobs;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = auth_headers(o);
  req.set_header("Content-Type", "application/json");
  req.body = body.dump();
  const auto t0 = Clock::now();
  auto last = t0;
  std::string pending;
  bool done = false;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    pending.append(data, n);
    for (size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
      const std::string event = pending.substr(0, end);
      pending.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0) continue;
      const std::string payload = event.substr(6);
      if (payload == "[DONE]") {
        done = true;
        continue;
      }
      auto j = nlohmann::json::parse(payload, nullptr, false);
      if (j.is_discarded()) continue;
      if (j.contains("error")) {
        s.error = j["error"].value("message", "error event");
        continue;
      }
      if (const auto usage = j.find("usage"); usage != j.end() && usage->is_object())
        s.usage_tokens = usage->value("completion_tokens", int64_t{-1});
      if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) continue;
      const auto& choice = j["choices"][0];
      // The chunk that carries finish_reason closes the stream; it adds no token.
      if (!choice.is_object() || !choice.value("finish_reason", nlohmann::json()).is_null()) continue;
      const int64_t n_tokens = tokens_in(choice);
      const auto now = Clock::now();
      if (s.output_tokens == 0) {
        s.ttft = seconds_between(t0, now);
      } else {
        // A chunk of k tokens after a gap: k gaps of gap / k (what the client saw per token).
        const double gap = seconds_between(last, now) / static_cast<double>(n_tokens);
        for (int64_t k = 0; k < n_tokens; ++k) s.itl.push_back(gap);
      }
      last = now;
      s.output_tokens += n_tokens;
    }
    return true;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  const bool sent = cli.send(req, res, error);
  s.e2e = seconds_between(t0, Clock::now());
  if (!sent) {
    s.error = fmt::format("no response ({})", httplib::to_string(error));
  } else if (res.status != 200) {
    s.error = fmt::format("HTTP {}: {}", res.status, res.body.substr(0, 200));
  } else if (!done && s.error.empty()) {
    s.error = "the stream ended without [DONE]";
  } else if (s.error.empty() && s.usage_tokens >= 0 && s.usage_tokens < s.output_tokens) {
    s.error = fmt::format("the server reported {} completion tokens and streamed {} chunks of tokens",
                          s.usage_tokens, s.output_tokens);
  } else if (s.error.empty() && s.usage_tokens > s.output_tokens) {
    s.short_of_usage = true;
    s.error_if_short =
        fmt::format("the server reported {} completion tokens and streamed {} chunks of tokens",
                    s.usage_tokens, s.output_tokens);
    s.output_tokens = s.usage_tokens;
  }
  s.ok = s.error.empty();
  return s;
}

}  // namespace

Result<LengthDist> parse_length_dist(const std::string& text) {
  LengthDist d;
  const size_t colon = text.find(':');
  try {
    size_t used = 0;
    d.lo = std::stoll(text.substr(0, colon), &used);
    if (used != (colon == std::string::npos ? text.size() : colon)) throw std::invalid_argument("trailing");
    d.hi = d.lo;
    if (colon != std::string::npos) {
      const std::string hi = text.substr(colon + 1);
      d.hi = std::stoll(hi, &used);
      if (used != hi.size()) throw std::invalid_argument("trailing");
    }
  } catch (const std::exception&) {
    return invalid_argument(fmt::format("length {:?}: expected N or LO:HI (tokens)", text));
  }
  if (d.lo < 1 || d.hi < d.lo || d.hi > (int64_t{1} << 20))
    return invalid_argument(fmt::format("length {:?}: expected 1 <= LO <= HI <= 2^20", text));
  return d;
}

Result<BenchResult> run_serve_bench(const BenchOptions& o) {
  if (o.concurrency < 1 || o.requests < 1)
    return invalid_argument("bench serve: concurrency and requests must be >= 1");
  std::string model = o.model;
  {
    httplib::Client cli(o.url);
    cli.set_connection_timeout(10, 0);
    auto res = cli.Get("/v1/models", auth_headers(o));
    if (!res) return io_error(fmt::format("bench serve: no answer from {}/v1/models", o.url));
    if (res->status != 200)
      return io_error(
          fmt::format("bench serve: {}/v1/models answered {}: {}", o.url, res->status, res->body));
    if (model.empty()) {
      auto j = nlohmann::json::parse(res->body, nullptr, false);
      if (j.is_discarded() || !j.contains("data") || j["data"].empty() || !j["data"][0].contains("id"))
        return io_error("bench serve: /v1/models lists no model");
      model = j["data"][0]["id"].get<std::string>();
    }
  }
  // The server's speculative-decoding counters now and after the load (day0 with --spec only).
  auto spec_now = [&]() -> std::optional<SpecStats> {
    httplib::Client cli(o.url);
    cli.set_connection_timeout(10, 0);
    auto res = cli.Get("/metrics", auth_headers(o));
    if (!res || res->status != 200) return std::nullopt;
    return spec_stats_from_metrics(res->body);
  };
  const std::optional<SpecStats> spec_before = spec_now();
  // Every request's prompt, length and arrival time drawn up front from the seed.
  std::mt19937_64 rng(o.seed);
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(o.requests));
  std::vector<int64_t> outputs(prompts.size());
  std::vector<double> arrival(prompts.size(), 0.0);
  std::uniform_int_distribution<int32_t> token(10, std::max<int32_t>(11, o.max_token_id) - 1);
  double t = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto len = std::uniform_int_distribution<int64_t>(o.prompt_len.lo, o.prompt_len.hi)(rng);
    for (int64_t k = 0; k < len; ++k) prompts[i].push_back(token(rng));
    outputs[i] = std::uniform_int_distribution<int64_t>(o.output_len.lo, o.output_len.hi)(rng);
    if (o.rate > 0) t += std::exponential_distribution<double>(o.rate)(rng);
    arrival[i] = t;
  }
  std::vector<Sample> samples(prompts.size());
  std::atomic<size_t> next{0};
  const auto start = Clock::now();
  std::vector<std::thread> workers;
  for (int w = 0; w < std::min(o.concurrency, o.requests); ++w) {
    workers.emplace_back([&] {
      for (size_t i; (i = next++) < prompts.size();) {
        std::this_thread::sleep_until(start + std::chrono::duration<double>(arrival[i]));
        samples[i] = one_request(o, model, prompts[i], outputs[i]);
      }
    });
  }
  for (auto& w : workers) w.join();
  BenchResult r;
  r.seconds = seconds_between(start, Clock::now());
  if (spec_before) {
    if (const std::optional<SpecStats> spec_after = spec_now())
      r.spec = spec_stats_between(*spec_before, *spec_after);
  }
  std::vector<double> ttft, itl, e2e;
  for (const Sample& s : samples) {
    ++r.requests;
    if (!s.ok) {
      ++r.failed;
      if (r.first_error.empty()) r.first_error = s.error;
      continue;
    }
    if (s.short_of_usage) {
      ++r.short_streams;
      if (r.first_short_stream.empty()) r.first_short_stream = s.error_if_short;
    }
    r.prompt_tokens += s.prompt_tokens;
    r.output_tokens += s.output_tokens;
    ttft.push_back(s.ttft);
    e2e.push_back(s.e2e);
    itl.insert(itl.end(), s.itl.begin(), s.itl.end());
  }
  r.request_throughput = r.seconds > 0 ? (r.requests - r.failed) / r.seconds : 0;
  r.output_throughput = r.seconds > 0 ? static_cast<double>(r.output_tokens) / r.seconds : 0;
  r.ttft = percentiles(ttft);
  r.itl = percentiles(itl);
  r.e2e = percentiles(e2e);
  return r;
}

nlohmann::json to_json(const BenchResult& r) {
  auto p = [](const Percentiles& x) {
    return nlohmann::json{{"p50", x.p50}, {"p90", x.p90}, {"p99", x.p99}, {"mean", x.mean}};
  };
  nlohmann::json j = {{"requests", r.requests},
                      {"failed", r.failed},
                      {"seconds", r.seconds},
                      {"prompt_tokens", r.prompt_tokens},
                      {"output_tokens", r.output_tokens},
                      {"request_throughput", r.request_throughput},
                      {"output_throughput", r.output_throughput},
                      {"ttft_s", p(r.ttft)},
                      {"itl_s", p(r.itl)},
                      {"e2e_s", p(r.e2e)}};
  if (!r.first_error.empty()) j["first_error"] = r.first_error;
  j["short_streams"] = r.short_streams;
  if (!r.first_short_stream.empty()) j["first_short_stream"] = r.first_short_stream;
  if (r.spec) j["speculative"] = spec_stats_json(*r.spec);
  return j;
}

nlohmann::json spec_stats_json(const SpecStats& st) {
  nlohmann::json positions = nlohmann::json::array();
  for (size_t i = 0; i < st.position_drafted.size(); ++i) {
    const auto drafted = static_cast<double>(st.position_drafted[i]);
    positions.push_back(
        {{"position", i + 1},
         {"drafted", st.position_drafted[i]},
         {"accepted", st.position_accepted[i]},
         {"acceptance_rate", drafted > 0 ? static_cast<double>(st.position_accepted[i]) / drafted : 0.0}});
  }
  return {{"verify_steps", st.verify_steps},
          {"drafted", st.drafted},
          {"accepted", st.accepted},
          {"acceptance_rate", st.acceptance_rate()},
          {"mean_accepted_per_step", st.mean_accepted_per_step()},
          {"per_position", positions}};
}

}  // namespace day0::serve
