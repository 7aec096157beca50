#include "day0/serve/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include <fmt/format.h>

namespace day0::serve {
namespace {

// Prometheus floats: +Inf spelled as the format wants, integers without a fraction.
std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  return fmt::format("{}", v);
}

// A label value with \, " and newline escaped.
std::string label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out;
}

void header(std::string& out, const std::string& name, const char* type, const std::string& help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

const std::vector<double> kLatencyBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,  0.25,
                                            0.5,   1.0,    2.5,   5.0,  10.0,  20.0, 40.0, 80.0};
// Speculative decoding's counters: render() writes them, spec_stats_from_metrics() reads them.
constexpr const char* kSpecVerifySteps = "day0:spec_decode_verify_steps_total";
constexpr const char* kSpecDraftTokens = "day0:spec_decode_num_draft_tokens_total";
constexpr const char* kSpecAcceptedTokens = "day0:spec_decode_num_accepted_tokens_total";
constexpr const char* kSpecDraftTokensPerPos = "day0:spec_decode_num_draft_tokens_per_pos_total";
constexpr const char* kSpecAcceptedTokensPerPos = "day0:spec_decode_num_accepted_tokens_per_pos_total";

const std::vector<double> kItlBounds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                        0.075,  0.1,   0.25,   0.5,   1.0,  2.5,   5.0};

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  const auto at = std::lower_bound(bounds_.begin(), bounds_.end(), value);
  ++counts_[static_cast<size_t>(at - bounds_.begin())];
  sum_ += value;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  header(out, name, "histogram", help);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, number(bounds_[i]), cumulative);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n", name, count_);
  out += fmt::format("{}_sum {}\n{}_count {}\n", name, number(sum_), name, count_);
}

ServeMetrics::ServeMetrics() : ttft_(kLatencyBounds), itl_(kItlBounds), e2e_(kLatencyBounds) {
  for (const char* reason : {"stop", "length", "abort"}) finished_[reason] = 0;
}

void ServeMetrics::observe_ttft(double s) {
  std::lock_guard lock(mutex_);
  ttft_.observe(s);
}
void ServeMetrics::observe_itl(double s) {
  std::lock_guard lock(mutex_);
  itl_.observe(s);
}
void ServeMetrics::observe_e2e(double s) {
  std::lock_guard lock(mutex_);
  e2e_.observe(s);
}
void ServeMetrics::add_prompt_tokens(int64_t n) {
  std::lock_guard lock(mutex_);
  prompt_tokens_ += n;
}
void ServeMetrics::add_generation_tokens(int64_t n) {
  std::lock_guard lock(mutex_);
  generation_tokens_ += n;
}
void ServeMetrics::count_finished(const std::string& reason) {
  std::lock_guard lock(mutex_);
  ++finished_[reason];
}
void ServeMetrics::count_preemption() {
  std::lock_guard lock(mutex_);
  ++preemptions_;
}
void ServeMetrics::add_prefix_cache(int64_t queried, int64_t hits) {
  std::lock_guard lock(mutex_);
  prefix_queries_ += queried;
  prefix_hits_ += hits;
}
void ServeMetrics::count_http_error(int status) {
  std::lock_guard lock(mutex_);
  ++http_errors_[status];
}
void ServeMetrics::set_gauges(const SchedulerGauges& g) {
  std::lock_guard lock(mutex_);
  gauges_ = g;
}
void ServeMetrics::set_http_counters(const HttpCounters& c) {
  std::lock_guard lock(mutex_);
  http_ = c;
}
void ServeMetrics::add_op_seconds(const std::map<std::string, double>& seconds) {
  std::lock_guard lock(mutex_);
  for (const auto& [op, s] : seconds) op_seconds_[op] += s;
}
void ServeMetrics::enable_spec(int64_t k, int64_t max_rows) {
  std::lock_guard lock(mutex_);
  spec_enabled_ = true;
  spec_max_rows_ = max_rows;
  spec_.position_drafted.resize(static_cast<size_t>(std::max<int64_t>(k, 0)), 0);
  spec_.position_accepted.resize(spec_.position_drafted.size(), 0);
}
void ServeMetrics::count_verification(int64_t drafted, int64_t accepted) {
  std::lock_guard lock(mutex_);
  ++spec_.verify_steps;
  spec_.drafted += drafted;
  spec_.accepted += accepted;
  if (spec_.position_drafted.size() < static_cast<size_t>(drafted)) {
    spec_.position_drafted.resize(static_cast<size_t>(drafted), 0);
    spec_.position_accepted.resize(static_cast<size_t>(drafted), 0);
  }
  for (int64_t i = 0; i < drafted; ++i) {
    ++spec_.position_drafted[static_cast<size_t>(i)];
    if (i < accepted) ++spec_.position_accepted[static_cast<size_t>(i)];
  }
}
void ServeMetrics::count_draft_cap(int64_t withheld) {
  if (withheld <= 0) return;
  std::lock_guard lock(mutex_);
  ++spec_capped_steps_;
  spec_withheld_ += withheld;
}
void ServeMetrics::count_draft_pool_full(int64_t sequences) {
  if (sequences <= 0) return;
  std::lock_guard lock(mutex_);
  spec_pool_full_ += sequences;
}
int64_t ServeMetrics::spec_draft_pool_full() const {
  std::lock_guard lock(mutex_);
  return spec_pool_full_;
}
int64_t ServeMetrics::spec_withheld_drafts() const {
  std::lock_guard lock(mutex_);
  return spec_withheld_;
}
SpecStats ServeMetrics::spec() const {
  std::lock_guard lock(mutex_);
  return spec_;
}
SchedulerGauges ServeMetrics::gauges() const {
  std::lock_guard lock(mutex_);
  return gauges_;
}
int64_t ServeMetrics::preemptions() const {
  std::lock_guard lock(mutex_);
  return preemptions_;
}
int64_t ServeMetrics::prefix_cache_hit_tokens() const {
  std::lock_guard lock(mutex_);
  return prefix_hits_;
}

std::string ServeMetrics::render(const std::string& model_name) const {
  std::lock_guard lock(mutex_);
  std::string out;
  const std::string m = fmt::format("model_name=\"{}\"", label(model_name));
  auto gauge = [&](const std::string& name, const std::string& help, double v) {
    header(out, name, "gauge", help);
    out += fmt::format("{}{{{}}} {}\n", name, m, number(v));
  };
  auto counter = [&](const std::string& name, const std::string& help, double v) {
    header(out, name, "counter", help);
    out += fmt::format("{}{{{}}} {}\n", name, m, number(v));
  };
  gauge("day0:num_requests_running", "Requests whose sequence is in the running batch.",
        static_cast<double>(gauges_.running));
  gauge("day0:num_requests_waiting", "Requests waiting to be scheduled (new or preempted).",
        static_cast<double>(gauges_.waiting));
  counter("day0:num_preemptions_total", "Sequences preempted (blocks freed, recomputed later).",
          static_cast<double>(preemptions_));
  gauge("day0:kv_cache_capacity_blocks", "KV blocks of the pool (one block: block_tokens rows of one layer).",
        static_cast<double>(gauges_.kv_blocks_total));
  gauge("day0:kv_cache_used_blocks", "KV blocks held by sequences or the prefix cache.",
        static_cast<double>(gauges_.kv_blocks_used));
  gauge("day0:kv_cache_usage_perc", "KV blocks used / total (0 to 1).",
        gauges_.kv_blocks_total > 0
            ? static_cast<double>(gauges_.kv_blocks_used) / static_cast<double>(gauges_.kv_blocks_total)
            : 0.0);
  gauge("day0:kv_cache_fragmentation_ratio", "Allocated but unused KV token slots / allocated slots.",
        gauges_.kv_fragmentation);
  gauge("day0:recurrent_state_bytes",
        "Bytes of recurrent state (Gated DeltaNet / Mamba-2 layers' conv windows and state matrices) held "
        "by sequences and the prefix cache: each running sequence's live state and its snapshot at its "
        "last whole block, and the entries' snapshots (0 for a model without such layers).",
        static_cast<double>(gauges_.recurrent_state_bytes));
  gauge("day0:prefix_cache_state_bytes",
        "Bytes of the recurrent-state snapshots the prefix cache's entries hold (each once; part of "
        "day0:recurrent_state_bytes): a hit restores the state at the entry's end.",
        static_cast<double>(gauges_.prefix_cache_state_bytes));
  gauge("day0:prefix_caching_enabled",
        "1 when prefix caching runs (hybrid models too: an entry restores the recurrent state saved at "
        "its end); 0 when turned off.",
        gauges_.prefix_caching ? 1.0 : 0.0);
  gauge("day0:prefix_cache_blocks",
        "KV blocks the prefix cache references, each once (some shared with sequences).",
        static_cast<double>(gauges_.prefix_cache_blocks));
  gauge("day0:prefix_cache_exclusive_blocks",
        "KV blocks only the prefix cache references (freed if it is cleared): kv_cache_used_blocks = the "
        "sequences' blocks + these.",
        static_cast<double>(gauges_.prefix_cache_exclusive_blocks));
  counter("day0:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
          static_cast<double>(prefix_queries_));
  counter("day0:prefix_cache_hits_total", "Prompt tokens found in the prefix cache (not pre-filled again).",
          static_cast<double>(prefix_hits_));
  gauge("day0:prefix_cache_hit_rate", "Prefix-cache hit tokens / queried tokens since start.",
        prefix_queries_ > 0 ? static_cast<double>(prefix_hits_) / static_cast<double>(prefix_queries_) : 0.0);
  counter("day0:prompt_tokens_total", "Prompt tokens of finished and running requests.",
          static_cast<double>(prompt_tokens_));
  counter("day0:generation_tokens_total", "Generated tokens.", static_cast<double>(generation_tokens_));
  header(out, "day0:request_success_total", "counter", "Finished requests by finish reason.");
  for (const auto& [reason, n] : finished_)
    out += fmt::format("day0:request_success_total{{{},finished_reason=\"{}\"}} {}\n", m, label(reason), n);
  header(out, "day0:http_errors_total", "counter", "Requests answered with an HTTP error, by status.");
  for (const auto& [status, n] : http_errors_)
    out += fmt::format("day0:http_errors_total{{{},status=\"{}\"}} {}\n", m, status, n);
  gauge("day0:http_connections_open", "HTTP connections open now.", static_cast<double>(http_.open));
  counter("day0:http_connections_total", "HTTP connections accepted.", static_cast<double>(http_.accepted));
  counter("day0:http_connections_refused_total", "Connections refused (503) over a connection cap.",
          static_cast<double>(http_.refused));
  counter("day0:http_timeouts_total",
          "Connections closed by a deadline (request head or body, a stalled reader).",
          static_cast<double>(http_.timed_out));
  counter("day0:http_client_disconnects_total",
          "Requests whose client disconnected before the response was complete (their work is cancelled).",
          static_cast<double>(http_.client_gone));
  header(out, "day0:operator_seconds_total", "counter",
         "Seconds the engine spent in each operator kind (a share per op follows).");
  for (const auto& [op, s] : op_seconds_)
    out += fmt::format("day0:operator_seconds_total{{{},op=\"{}\"}} {}\n", m, label(op), number(s));
  gauge("day0:communication_idle_ratio",
        "Share of rank 0's forward time spent waiting on communication (0: one process).",
        gauges_.communication_idle_ratio);
  if (spec_enabled_) {
    counter(kSpecVerifySteps,
            "Decoding steps of sequences under speculative decoding (each verifies 0 to k drafts).",
            static_cast<double>(spec_.verify_steps));
    counter(kSpecDraftTokens, "Draft tokens proposed and verified.", static_cast<double>(spec_.drafted));
    counter(kSpecAcceptedTokens, "Draft tokens accepted (each one a token the step gained).",
            static_cast<double>(spec_.accepted));
    gauge("day0:spec_decode_acceptance_rate", "Accepted / proposed draft tokens since start.",
          spec_.acceptance_rate());
    gauge("day0:spec_decode_mean_accepted_tokens",
          "Draft tokens accepted per verification step since start (a step gives this plus one token).",
          spec_.mean_accepted_per_step());
    header(out, kSpecDraftTokensPerPos, "counter", "Draft tokens verified at each draft position (1 to k).");
    for (size_t i = 0; i < spec_.position_drafted.size(); ++i)
      out += fmt::format("{}{{{},position=\"{}\"}} {}\n", kSpecDraftTokensPerPos, m, i + 1,
                         spec_.position_drafted[i]);
    header(
        out, kSpecAcceptedTokensPerPos, "counter",
        "Draft tokens accepted at each draft position (a draft is accepted only after every earlier one).");
    for (size_t i = 0; i < spec_.position_accepted.size(); ++i)
      out += fmt::format("{}{{{},position=\"{}\"}} {}\n", kSpecAcceptedTokensPerPos, m, i + 1,
                         spec_.position_accepted[i]);
    gauge("day0:spec_decode_max_rows",
          "The draft-row cap: rows (decoding rows and drafts) a step may verify (0: no cap).",
          static_cast<double>(spec_max_rows_));
    counter("day0:spec_decode_cap_steps_total", "Steps in which the draft-row cap withheld drafts.",
            static_cast<double>(spec_capped_steps_));
    counter("day0:spec_decode_cap_withheld_draft_tokens_total",
            "Drafts the draft-row cap kept out of verification (found by n-gram lookup and dropped, or "
            "positions the draft model was not run for).",
            static_cast<double>(spec_withheld_));
    if (gauges_.draft_kv_blocks_total > 0) {
      gauge("day0:spec_decode_draft_kv_capacity_blocks",
            "KV blocks of the draft model's pool (--spec self-int4; fixed at start).",
            static_cast<double>(gauges_.draft_kv_blocks_total));
      gauge("day0:spec_decode_draft_kv_used_blocks", "KV blocks of the draft model's pool held by sequences.",
            static_cast<double>(gauges_.draft_kv_blocks_used));
      counter("day0:spec_decode_draft_pool_full_total",
              "Times a sequence got no drafts because the draft model's pool had no room for them.",
              static_cast<double>(spec_pool_full_));
    }
  }
  ttft_.render(out, "day0:time_to_first_token_seconds", "Time from arrival to the first generated token.");
  itl_.render(out, "day0:inter_token_latency_seconds", "Time between two generated tokens of a request.");
  e2e_.render(out, "day0:e2e_request_latency_seconds", "Time from arrival to the last token.");
  return out;
}

std::optional<SpecStats> spec_stats_from_metrics(std::string_view text) {
  SpecStats st;
  bool found = false;
  // Samples are "name{labels} value" lines; the per-position ones carry position="i".
  auto add_position = [](std::vector<int64_t>& list, size_t position, int64_t v) {
    if (position == 0) return;
    if (list.size() < position) list.resize(position, 0);
    list[position - 1] += v;
  };
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(begin, end - begin);
    begin = end + 1;
    if (line.empty() || line.front() == '#') continue;
    const size_t name_end = line.find_first_of("{ ");
    const size_t value_at = line.rfind(' ');
    if (name_end == std::string_view::npos || value_at == std::string_view::npos) continue;
    const std::string_view name = line.substr(0, name_end);
    int64_t value = 0;
    try {
      value = static_cast<int64_t>(std::stod(std::string(line.substr(value_at + 1))));
    } catch (const std::exception&) {
      continue;
    }
    size_t position = 0;
    if (const size_t at = line.find("position=\""); at != std::string_view::npos && at < value_at)
      position = static_cast<size_t>(std::strtoull(line.data() + at + 10, nullptr, 10));
    if (name == kSpecVerifySteps) {
      st.verify_steps += value;
      found = true;
    } else if (name == kSpecDraftTokens) {
      st.drafted += value;
    } else if (name == kSpecAcceptedTokens) {
      st.accepted += value;
    } else if (name == kSpecDraftTokensPerPos) {
      add_position(st.position_drafted, position, value);
    } else if (name == kSpecAcceptedTokensPerPos) {
      add_position(st.position_accepted, position, value);
    }
  }
  if (!found) return std::nullopt;
  st.position_accepted.resize(std::max(st.position_accepted.size(), st.position_drafted.size()), 0);
  st.position_drafted.resize(st.position_accepted.size(), 0);
  return st;
}

SpecStats spec_stats_between(const SpecStats& before, const SpecStats& after) {
  SpecStats d;
  d.verify_steps = after.verify_steps - before.verify_steps;
  d.drafted = after.drafted - before.drafted;
  d.accepted = after.accepted - before.accepted;
  d.draft_seconds = after.draft_seconds - before.draft_seconds;
  const size_t n = std::max(before.position_drafted.size(), after.position_drafted.size());
  auto at = [](const std::vector<int64_t>& v, size_t i) { return i < v.size() ? v[i] : 0; };
  for (size_t i = 0; i < n; ++i) {
    d.position_drafted.push_back(at(after.position_drafted, i) - at(before.position_drafted, i));
    d.position_accepted.push_back(at(after.position_accepted, i) - at(before.position_accepted, i));
  }
  return d;
}

}  // namespace day0::serve
