#pragma once
// A load generator for an OpenAI-compatible server (`day0 bench serve`): streamed completions with
// token-id prompts, at most `concurrency` in flight, arrivals open-loop at `rate` requests a second
// (Poisson) or as fast as slots free up, and the figures vLLM's serving benchmark reports: request and
// output-token throughput, time to first token, inter-token latency and end-to-end latency at p50 /
// p90 / p99; and when the server is day0 speculating, the drafts it proposed and accepted meanwhile
// (its /metrics before and after).
// Thread safety: run_serve_bench is self-contained (it starts and joins its own client threads).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "day0/core/status.h"
#include "day0/runtime/speculative.h"

namespace day0::serve {

// A length distribution: "N" (fixed) or "LO:HI" (uniform, inclusive).
struct LengthDist {
  int64_t lo = 0, hi = 0;
};
Result<LengthDist> parse_length_dist(const std::string& text);

struct BenchOptions {
  std::string url = "http://127.0.0.1:8000";
  std::string model;  // "": the first of /v1/models
  std::string api_key;
  int concurrency = 1;
  int requests = 16;
  LengthDist prompt_len{32, 32};
  LengthDist output_len{64, 64};
  double rate = 0;             // requests per second; 0: as fast as slots free
  int32_t max_token_id = 200;  // prompt ids are drawn from [10, max_token_id)
  int logprobs = -1;           // >= 0: ask for the chosen token's log-probability and this many others
  uint64_t seed = 0;
};

struct Percentiles {
  double p50 = 0, p90 = 0, p99 = 0, mean = 0;
};

struct BenchResult {
  int requests = 0;
  int failed = 0;
  std::string first_error;
  // Streams that carried fewer chunks than their usage's completion tokens (counted by the usage, not
  // failed): a server that sends a token ending inside a UTF-8 character with the next one.
  int short_streams = 0;
  std::string first_short_stream;
  double seconds = 0;
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
  double request_throughput = 0;  // completed requests / s
  double output_throughput = 0;   // generated tokens / s
  Percentiles ttft, itl, e2e;     // seconds
  // The server's speculative decoding over the run (its /metrics counters' growth): empty when it does
  // not report them. Other clients' requests at the same time count too.
  std::optional<SpecStats> spec;
};

Result<BenchResult> run_serve_bench(const BenchOptions& options);
nlohmann::json to_json(const BenchResult& result);
// Drafts proposed and accepted, rates, per position (the keys of `run --json`'s "speculative").
nlohmann::json spec_stats_json(const SpecStats& stats);

}  // namespace day0::serve
