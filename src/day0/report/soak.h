#pragma once
// A bounded soak: run the same kind of request again and again, for at most N requests or S seconds,
// and watch resident memory. After a warm-up share of the requests the RSS may not grow by more than
// a bound: a leak in the KV cache, the scheduler or the kernels shows up as steady growth.
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "day0/core/status.h"

namespace day0::report {

struct SoakOptions {
  int max_requests = 200;
  double max_seconds = 20.0;
  double warmup_fraction = 0.2;          // RSS after this share of the requests is the baseline
  uint64_t max_growth_bytes = 32 << 20;  // allowed RSS growth after warm-up
};

struct SoakResult {
  int requests = 0;
  int failed_requests = 0;
  double seconds = 0.0;
  uint64_t rss_baseline_bytes = 0;
  uint64_t rss_final_bytes = 0;
  uint64_t rss_peak_bytes = 0;
  int64_t rss_growth_bytes = 0;
  // RSS after the requests, at most kMaxRssSamples of them: when full, every other one is dropped and
  // the sampling stride doubles (a 100M-request soak must not hold 100M samples).
  std::vector<uint64_t> rss_samples;
  static constexpr size_t kMaxRssSamples = 4096;
  bool passed = false;
  std::string reason;  // why it failed
};

// request(i) runs request number i; a non-OK Status counts as a failed request (the soak fails).
SoakResult run_soak(const std::function<Status(int)>& request, const SoakOptions& options,
                    const std::function<uint64_t()>& rss = nullptr);

nlohmann::json to_json(const SoakResult& result);

}  // namespace day0::report
