#pragma once
// A long soak of a running server (`day0 bench serve --soak DURATION`): rounds of `bench serve` load
// until the duration is over, and between rounds a sample of the server's resident memory, threads and
// open files (/proc/PID of a server on this host, --server-pid), of its KV blocks in use (/metrics) and
// of the round's latency. Over the second half of the run (after warm-up) each series' least-squares
// slope per minute is reported, and the verdict fails on any failed request, on resident memory growing
// faster than max_rss_slope_mb_per_min, or on threads or open files growing at all.
// Thread safety: run_soak is self-contained (run_serve_bench starts and joins its own threads).
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "day0/core/status.h"
#include "day0/serve/bench_client.h"

namespace day0::serve {

struct SoakOptions {
  BenchOptions load;           // one round: load.requests at load.concurrency
  double duration_s = 3600;    // the soak ends with the first round that finishes past it
  double sample_every_s = 10;  // at least this long between samples (rounds in between are not sampled)
  int server_pid = 0;          // > 0: sample /proc/PID (a server on this host); 0: latency and KV only
  double max_rss_slope_mb_per_min = 0.5;
};

struct SoakSample {
  double t_s = 0;                       // since the start
  double rss_mb = -1;                   // VmRSS, MB; -1 when not sampled
  double threads = -1;                  // /proc/PID/status Threads
  double open_files = -1;               // entries of /proc/PID/fd
  double kv_used_blocks = -1;           // day0:kv_cache_used_blocks; -1 when the server does not export it
  double e2e_p50_s = 0, e2e_p99_s = 0;  // of the round before the sample
  int64_t requests = 0, failed = 0;     // since the previous sample
};

struct SoakSlopes {  // per minute, over the second half of the samples; 0 where a series is not sampled
  double rss_mb = 0, threads = 0, open_files = 0, kv_used_blocks = 0, e2e_p50_s = 0;
};

struct SoakResult {
  std::vector<SoakSample> samples;
  SoakSlopes slopes;
  int64_t requests = 0, failed = 0;
  std::string first_error;
  int64_t short_streams = 0;  // BenchResult::short_streams over the rounds (not failures)
  std::string first_short_stream;
  // The server process's resident memory, threads or open files growing (judge_soak; only with a
  // server_pid), also among the verdict's reasons.
  std::vector<std::string> process_growth;
  bool pass = false;
  std::string verdict;  // "pass" or the reasons it failed
};

// Least-squares slope of y against t (seconds), per minute; 0 with fewer than two points.
double slope_per_minute(std::span<const double> t_s, std::span<const double> y);
// The slopes over the second half of `samples` and the verdict (fills slopes, pass, verdict).
void judge_soak(SoakResult& result, const SoakOptions& options);

// A text plot of y against t (points with y < 0 are not sampled and left out): `height` rows of
// `width` columns, y's range on the left, t's below. Empty with fewer than two points.
std::string text_plot(std::span<const double> t_s, std::span<const double> y, int width = 64,
                      int height = 12);

Result<SoakResult> run_soak(const SoakOptions& options);

// The process on this host listening on TCP `port` (any local address, IPv4 or IPv6), found through
// /proc/net/tcp{,6} and the socket links of /proc/PID/fd; 0 when none is found or readable (another
// user's process, another host's port).
int listening_pid(int port);
// The port of an http(s)://host:port URL whose host is this machine (127.0.0.1, localhost, [::1]);
// 0 for another host or a URL without a port.
int loopback_port(const std::string& url);
nlohmann::json to_json(const SoakResult& result);

}  // namespace day0::serve
