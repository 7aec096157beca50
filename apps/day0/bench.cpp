// day0 bench serve: load an OpenAI-compatible server (ours or another) with streamed completions and
// report throughput and latency percentiles (serve/bench_client.h).
#include <cstdio>

#include <fmt/format.h>

#include "command.h"
#include "day0/serve/bench_client.h"

namespace day0::cli {
namespace {

struct BenchArgs {
  serve::BenchOptions options;
  std::string prompt_len = "32";
  std::string output_len = "64";
  bool json = false;
};

int bench_serve(BenchArgs& a) {
  const char* name = "bench serve";
  auto prompt = serve::parse_length_dist(a.prompt_len);
  if (!prompt.is_ok()) return report_error(name, prompt.status().with_context("--prompt-len"));
  auto output = serve::parse_length_dist(a.output_len);
  if (!output.is_ok()) return report_error(name, output.status().with_context("--output-len"));
  a.options.prompt_len = *prompt;
  a.options.output_len = *output;
  auto r = serve::run_serve_bench(a.options);
  if (!r.is_ok()) return report_error(name, r.status());
  if (a.json) {
    nlohmann::json j = serve::to_json(*r);
    j["url"] = a.options.url;
    j["concurrency"] = a.options.concurrency;
    j["rate"] = a.options.rate;
    j["prompt_len"] = a.prompt_len;
    j["output_len"] = a.output_len;
    fmt::print("{}\n", j.dump(2));
  } else {
    auto ms = [](const serve::Percentiles& p) {
      return fmt::format("p50 {:8.2f}  p90 {:8.2f}  p99 {:8.2f}  mean {:8.2f} ms", 1e3 * p.p50, 1e3 * p.p90,
                         1e3 * p.p99, 1e3 * p.mean);
    };
    fmt::print("bench serve  {}  concurrency {}, {} requests, prompt {} tokens, output {} tokens, rate {}\n",
               a.options.url, a.options.concurrency, r->requests, a.prompt_len, a.output_len,
               a.options.rate > 0 ? fmt::format("{}/s", a.options.rate) : std::string("unbounded"));
    fmt::print("completed    {} ({} failed) in {:.2f} s\n", r->requests - r->failed, r->failed, r->seconds);
    fmt::print("throughput   {:.2f} requests/s, {:.1f} output tokens/s ({} prompt, {} output tokens)\n",
               r->request_throughput, r->output_throughput, r->prompt_tokens, r->output_tokens);
    fmt::print("TTFT         {}\nITL          {}\ne2e          {}\n", ms(r->ttft), ms(r->itl), ms(r->e2e));
    if (!r->first_error.empty()) fmt::print("first error  {}\n", r->first_error);
  }
  return r->failed > 0 ? kExitCheckFailed : kExitOk;
}

const Registrar kRegistrar(
    "bench", "Benchmarks: `bench serve` loads an OpenAI-compatible server and reports throughput and latency",
    65, [](CLI::App& app) -> CommandRunner {
      auto a = std::make_shared<BenchArgs>();
      app.require_subcommand(1);
      CLI::App* s =
          app.add_subcommand("serve", "Streamed completions against a server: throughput, TTFT/ITL/e2e");
      serve::BenchOptions& o = a->options;
      s->add_option("--url", o.url, "server base URL (default http://127.0.0.1:8000)");
      s->add_option("--model", o.model, "model name (default: the first of /v1/models)");
      s->add_option("--api-key", o.api_key, "sent as 'Authorization: Bearer KEY'");
      s->add_option("--concurrency", o.concurrency, "requests in flight at once (default 1)")
          ->check(CLI::Range(1, 4096));
      s->add_option("--requests", o.requests, "requests in all (default 16)")->check(CLI::Range(1, 1 << 20));
      s->add_option("--prompt-len", a->prompt_len, "prompt tokens: N or LO:HI uniform (default 32)");
      s->add_option("--output-len", a->output_len, "generated tokens: N or LO:HI uniform (default 64)");
      s->add_option("--rate", o.rate, "arrivals per second, Poisson (default: as fast as slots free)")
          ->check(finite_number(0.0, 1e6, "--rate"));
      s->add_option("--max-token-id", o.max_token_id, "prompt token ids are drawn below this (default 200)")
          ->check(CLI::Range(11, 1 << 30));
      s->add_option("--seed", o.seed, "seed of prompts, lengths and arrivals (default 0)");
      s->add_option("--logprobs", o.logprobs,
                    "ask for log-probabilities: the chosen token's and N alternatives (default: none)")
          ->check(CLI::Range(0, 20));
      s->add_flag("--json", a->json, "JSON output");
      return [a] { return bench_serve(*a); };
    });

}  // namespace
}  // namespace day0::cli
