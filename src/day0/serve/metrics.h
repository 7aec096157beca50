#pragma once
// The server's Prometheus metrics (text exposition format 0.0.4), named day0:* after vLLM's vllm:*:
// latency histograms (time to first token, inter-token latency, end-to-end), token and request
// counters, scheduler, KV pool and recurrent-state gauges, prefix-cache hits, time per operator kind, KV
// fragmentation, the communication idle ratio (0 in one process; the distributed issue fills it) and,
// with speculative decoding, the drafts proposed and accepted (in all and per draft position) and the
// ones the draft-row cap withheld. Thread safety: every member is safe to call from any thread (one
// mutex).
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "day0/runtime/speculative.h"

#include "day0/serve/http_server.h"

namespace day0::serve {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  // `name`_bucket{le=...} (cumulative), `name`_sum, `name`_count.
  void render(std::string& out, const std::string& name, const std::string& help) const;
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last = +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// What the scheduler reports at each step (gauges).
struct SchedulerGauges {
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_used = 0;
  double kv_fragmentation = 0;  // allocated-but-unused token slots / allocated slots
  // --spec self-int4: the draft model's own pool (capacity 0: no draft model).
  int64_t draft_kv_blocks_total = 0;
  int64_t draft_kv_blocks_used = 0;
  int64_t prefix_cache_blocks = 0;            // distinct blocks the cache's entries reference
  int64_t prefix_cache_exclusive_blocks = 0;  // of those, the ones no sequence references
  bool prefix_caching = true;  // off by option (or under pipeline stages with unlike windowed layers)
  // Recurrent-state blocks (hybrid models: live states and snapshots) held by sequences and the prefix
  // cache, in bytes; and the part the prefix cache's entries reference (each block once).
  uint64_t recurrent_state_bytes = 0;
  uint64_t prefix_cache_state_bytes = 0;
  // Under mpirun: the share of rank 0's forward time spent waiting on communication (0 in one process).
  double communication_idle_ratio = 0;
};

class ServeMetrics {
 public:
  ServeMetrics();
  void observe_ttft(double seconds);
  void observe_itl(double seconds);
  void observe_e2e(double seconds);
  void add_prompt_tokens(int64_t n);
  void add_generation_tokens(int64_t n);
  // finish_reason: stop, length, abort (cancelled or failed).
  void count_finished(const std::string& finish_reason);
  void count_preemption();
  void add_prefix_cache(int64_t queried_tokens, int64_t hit_tokens);
  void count_http_error(int status);
  void set_gauges(const SchedulerGauges& gauges);
  void set_http_counters(const HttpCounters& counters);
  // Seconds spent in each operator kind since start (the engine thread adds them per step).
  void add_op_seconds(const std::map<std::string, double>& seconds_by_op);
  // Speculative decoding with up to `k` drafts a step and a draft-row cap of `max_rows` (0: none): its
  // metrics appear in render() from now on.
  void enable_spec(int64_t k, int64_t max_rows = 0);
  // One decoding step of a speculating sequence: `drafted` drafts verified (0..k), the first
  // `accepted` of them accepted.
  void count_verification(int64_t drafted, int64_t accepted);
  // A step in which the draft-row cap kept `withheld` drafts out of verification (0: none, not counted).
  void count_draft_cap(int64_t withheld);
  // `sequences` asked the draft model for drafts this step and got none: its pool had no room.
  void count_draft_pool_full(int64_t sequences);

  std::string render(const std::string& model_name) const;

  // For tests and the soak: current gauges and counters.
  SchedulerGauges gauges() const;
  int64_t preemptions() const;
  int64_t prefix_cache_hit_tokens() const;
  SpecStats spec() const;
  int64_t spec_withheld_drafts() const;
  int64_t spec_draft_pool_full() const;

 private:
  mutable std::mutex mutex_;
  Histogram ttft_, itl_, e2e_;
  int64_t prompt_tokens_ = 0, generation_tokens_ = 0, preemptions_ = 0;
  int64_t prefix_queries_ = 0, prefix_hits_ = 0;
  std::map<std::string, int64_t> finished_;
  std::map<int, int64_t> http_errors_;
  std::map<std::string, double> op_seconds_;
  SchedulerGauges gauges_;
  HttpCounters http_;
  bool spec_enabled_ = false;
  SpecStats spec_;  // position_* sized k by enable_spec
  int64_t spec_max_rows_ = 0, spec_capped_steps_ = 0, spec_withheld_ = 0, spec_pool_full_ = 0;
};

// The speculative-decoding counters of a render()ed exposition (`day0 bench serve` reads them before
// and after its load); nothing when the server does not speculate (or is not day0).
std::optional<SpecStats> spec_stats_from_metrics(std::string_view exposition);
// after - before, counter by counter (positions: the longer list's).
SpecStats spec_stats_between(const SpecStats& before, const SpecStats& after);

}  // namespace day0::serve
