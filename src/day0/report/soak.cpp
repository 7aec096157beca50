#include "day0/report/soak.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "day0/core/human.h"
#include "day0/report/machine_info.h"

namespace day0::report {

SoakResult run_soak(const std::function<Status(int)>& request, const SoakOptions& options,
                    const std::function<uint64_t()>& rss) {
  const auto read_rss = rss ? rss : current_rss_bytes;
  SoakResult result;
  const auto start = std::chrono::steady_clock::now();
  // The warm-up ends after its share of the requests or of the time, whichever comes first, so that
  // the time bound holds however large --soak-requests is.
  int warmup = std::max(1, static_cast<int>(options.warmup_fraction * options.max_requests));
  const double warmup_seconds = options.warmup_fraction * options.max_seconds;
  std::string first_error;
  int sample_stride = 1;
  uint64_t last_rss = 0;
  for (int i = 0; i < options.max_requests; ++i) {
    const Status st = request(i);
    if (!st.is_ok()) {
      ++result.failed_requests;
      if (first_error.empty()) first_error = fmt::format("request {}: {}", i, st.to_string());
    }
    const uint64_t now = read_rss();
    if (i % sample_stride == 0) {
      if (result.rss_samples.size() == SoakResult::kMaxRssSamples) {
        for (size_t k = 0; k < result.rss_samples.size() / 2; ++k)
          result.rss_samples[k] = result.rss_samples[2 * k];
        result.rss_samples.resize(result.rss_samples.size() / 2);
        sample_stride *= 2;
      }
      if (i % sample_stride == 0) result.rss_samples.push_back(now);
    }
    last_rss = now;
    result.rss_peak_bytes = std::max(result.rss_peak_bytes, now);
    ++result.requests;
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (result.requests < warmup && result.seconds >= warmup_seconds) warmup = result.requests;
    if (result.requests == warmup) result.rss_baseline_bytes = now;
    if (result.seconds >= options.max_seconds) break;
  }
  result.rss_final_bytes = last_rss;
  if (result.rss_baseline_bytes == 0) result.rss_baseline_bytes = result.rss_final_bytes;
  result.rss_growth_bytes =
      static_cast<int64_t>(result.rss_final_bytes) - static_cast<int64_t>(result.rss_baseline_bytes);
  if (result.failed_requests > 0) {
    result.reason = fmt::format("{} of {} requests failed; first: {}", result.failed_requests,
                                result.requests, first_error);
  } else if (result.requests <= warmup) {
    result.reason = fmt::format("only {} requests ran within {:.0f} s: not past the warm-up of {}",
                                result.requests, options.max_seconds, warmup);
  } else if (result.rss_growth_bytes > static_cast<int64_t>(options.max_growth_bytes)) {
    result.reason = fmt::format("resident memory grew by {} after warm-up (bound {})",
                                human_bytes_binary(static_cast<double>(result.rss_growth_bytes)),
                                human_bytes_binary(static_cast<double>(options.max_growth_bytes)));
  }
  result.passed = result.reason.empty();
  return result;
}

nlohmann::json to_json(const SoakResult& r) {
  return {{"requests", r.requests},
          {"failed_requests", r.failed_requests},
          {"seconds", r.seconds},
          {"rss_baseline_bytes", r.rss_baseline_bytes},
          {"rss_final_bytes", r.rss_final_bytes},
          {"rss_peak_bytes", r.rss_peak_bytes},
          {"rss_growth_bytes", r.rss_growth_bytes}};
}

}  // namespace day0::report
