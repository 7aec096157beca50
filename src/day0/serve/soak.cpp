#include "day0/serve/soak.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <httplib.h>

namespace day0::serve {
namespace {

using Clock = std::chrono::steady_clock;

// "VmRSS:" (kB) and "Threads:" of /proc/PID/status; false when the process is gone.
bool read_status(int pid, double& rss_mb, double& threads) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  if (!in) return false;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string key;
    double value = 0;
    fields >> key >> value;
    if (key == "VmRSS:") rss_mb = value * 1024.0 / 1e6;
    if (key == "Threads:") threads = value;
  }
  return rss_mb >= 0 && threads >= 0;
}

double open_files(int pid) {
  std::error_code ec;
  double n = 0;
  for (std::filesystem::directory_iterator it(fmt::format("/proc/{}/fd", pid), ec), end; !ec && it != end;
       it.increment(ec))
    ++n;
  return ec ? -1 : n;
}

// day0:kv_cache_used_blocks from /metrics, or -1 (another engine, or no answer).
double kv_used_blocks(const std::string& url) {
  httplib::Client cli(url);
  cli.set_connection_timeout(5, 0);
  cli.set_read_timeout(10, 0);
  auto res = cli.Get("/metrics");
  if (!res || res->status != 200) return -1;
  std::istringstream in(res->body);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("day0:kv_cache_used_blocks{", 0) != 0) continue;
    try {
      return std::stod(line.substr(line.rfind(' ') + 1));
    } catch (const std::exception&) {
      return -1;
    }
  }
  return -1;
}

// Socket inodes of TCP listeners on `port` in one /proc/net/tcp table ("sl local rem st ... inode").
void listening_inodes(const char* table, int port, std::vector<std::string>& inodes) {
  std::ifstream in(table);
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
    fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
    const size_t colon = local.rfind(':');
    if (state != "0A" || colon == std::string::npos || inode.empty() || inode == "0") continue;  // 0A: LISTEN
    try {
      if (std::stoi(local.substr(colon + 1), nullptr, 16) == port) inodes.push_back(inode);
    } catch (const std::exception&) {
    }
  }
}

}  // namespace

double slope_per_minute(std::span<const double> t_s, std::span<const double> y) {
  const size_t n = std::min(t_s.size(), y.size());
  if (n < 2) return 0;
  double mt = 0, my = 0;
  for (size_t i = 0; i < n; ++i) {
    mt += t_s[i];
    my += y[i];
  }
  mt /= static_cast<double>(n);
  my /= static_cast<double>(n);
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (t_s[i] - mt) * (y[i] - my);
    den += (t_s[i] - mt) * (t_s[i] - mt);
  }
  return den > 0 ? 60.0 * num / den : 0;
}

void judge_soak(SoakResult& r, const SoakOptions& o) {
  // The second half of the samples: warm-up (allocator arenas, the prefix cache filling) is over.
  const size_t from = r.samples.size() / 2;
  auto slope = [&](double SoakSample::*field) {
    std::vector<double> t, y;
    for (size_t i = from; i < r.samples.size(); ++i) {
      if (r.samples[i].*field < 0) continue;
      t.push_back(r.samples[i].t_s);
      y.push_back(r.samples[i].*field);
    }
    return slope_per_minute(t, y);
  };
  r.slopes = {slope(&SoakSample::rss_mb), slope(&SoakSample::threads), slope(&SoakSample::open_files),
              slope(&SoakSample::kv_used_blocks), slope(&SoakSample::e2e_p50_s)};
  std::vector<std::string> why;
  if (r.samples.size() < 4)
    why.push_back(fmt::format("{} samples (at least 4 are needed)", r.samples.size()));
  if (r.failed > 0)
    why.push_back(fmt::format("{} of {} requests failed: {}", r.failed, r.requests, r.first_error));
  r.process_growth.clear();
  if (r.slopes.rss_mb > o.max_rss_slope_mb_per_min) {
    r.process_growth.push_back(
        fmt::format("resident memory grows {:.2f} MB/min over the second half (bound {:.2f})",
                    r.slopes.rss_mb, o.max_rss_slope_mb_per_min));
  }
  // Threads and open files: counts jitter with the connections in flight at a sample, so growth is the
  // smallest of the last third of the second half above the largest of its first third.
  auto grew = [&](double SoakSample::*field, const char* what) {
    const size_t n = r.samples.size() - from;
    if (n < 2 || r.samples[from].*field < 0) return;
    const size_t k = std::max<size_t>(1, n / 3);
    double early = r.samples[from].*field, late = r.samples.back().*field;
    for (size_t i = 0; i < k; ++i) {
      early = std::max(early, r.samples[from + i].*field);
      late = std::min(late, r.samples[r.samples.size() - 1 - i].*field);
    }
    if (late > early) {
      r.process_growth.push_back(
          fmt::format("{} grew from {:.0f} to {:.0f} over the second half", what, early, late));
    }
  };
  grew(&SoakSample::threads, "threads");
  grew(&SoakSample::open_files, "open files");
  why.insert(why.end(), r.process_growth.begin(), r.process_growth.end());
  r.pass = why.empty();
  r.verdict = "pass";
  if (!why.empty()) {
    r.verdict.clear();
    for (const std::string& w : why) r.verdict += (r.verdict.empty() ? "" : "; ") + w;
  }
}

std::string text_plot(std::span<const double> t_s, std::span<const double> y, int width, int height) {
  std::vector<std::pair<double, double>> points;
  for (size_t i = 0; i < std::min(t_s.size(), y.size()); ++i)
    if (y[i] >= 0 && std::isfinite(y[i]) && std::isfinite(t_s[i])) points.emplace_back(t_s[i], y[i]);
  if (points.size() < 2 || width < 2 || height < 2) return "";
  double t_lo = points.front().first, t_hi = t_lo, y_lo = points.front().second, y_hi = y_lo;
  for (const auto& [t, v] : points) {
    t_lo = std::min(t_lo, t), t_hi = std::max(t_hi, t), y_lo = std::min(y_lo, v), y_hi = std::max(y_hi, v);
  }
  const double t_span = t_hi > t_lo ? t_hi - t_lo : 1, y_span = y_hi > y_lo ? y_hi - y_lo : 1;
  std::vector<std::string> rows(static_cast<size_t>(height), std::string(static_cast<size_t>(width), ' '));
  for (const auto& [t, v] : points) {
    const auto col = static_cast<size_t>(std::lround((t - t_lo) / t_span * (width - 1)));
    const auto row = static_cast<size_t>(std::lround((v - y_lo) / y_span * (height - 1)));
    rows[static_cast<size_t>(height - 1) - row][col] = '*';
  }
  std::string out;
  for (size_t r = 0; r < rows.size(); ++r) {
    const std::string label = r == 0                 ? fmt::format("{:.2f}", y_hi)
                              : r + 1 == rows.size() ? fmt::format("{:.2f}", y_lo)
                                                     : "";
    const size_t end = rows[r].find_last_not_of(' ');
    out += fmt::format("{:>10} |{}\n", label, end == std::string::npos ? "" : rows[r].substr(0, end + 1));
  }
  out += fmt::format("{:>10} +{}\n", "", std::string(static_cast<size_t>(width), '-'));
  const std::string left = fmt::format("{:.0f} s", t_lo), right = fmt::format("{:.0f} s", t_hi);
  out += fmt::format("{:>10}  {}{:>{}}\n", "", left, right,
                     std::max<size_t>(1, static_cast<size_t>(width) - left.size()));
  return out;
}

Result<SoakResult> run_soak(const SoakOptions& o) {
  if (!(o.duration_s > 0) || !(o.sample_every_s >= 0))
    return invalid_argument("bench serve --soak: the duration must be positive");
  SoakResult r;
  const auto start = Clock::now();
  auto now_s = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  double last_sample = -1e300;
  int64_t since_requests = 0, since_failed = 0;
  for (uint64_t round = 0; now_s() < o.duration_s; ++round) {
    BenchOptions load = o.load;
    load.seed = o.load.seed + round;  // other prompts each round
    auto b = run_serve_bench(load);
    if (!b.is_ok()) return b.status().with_context(fmt::format("soak round {}", round));
    r.requests += b->requests;
    r.failed += b->failed;
    since_requests += b->requests;
    since_failed += b->failed;
    if (r.first_error.empty()) r.first_error = b->first_error;
    r.short_streams += b->short_streams;
    if (r.first_short_stream.empty()) r.first_short_stream = b->first_short_stream;
    const double t = now_s();
    if (t - last_sample < o.sample_every_s && t < o.duration_s) continue;
    SoakSample s;
    s.t_s = t;
    if (o.server_pid > 0) {
      if (!read_status(o.server_pid, s.rss_mb, s.threads))
        return not_found(fmt::format("bench serve --soak: process {} is gone (/proc/{}/status)", o.server_pid,
                                     o.server_pid));
      s.open_files = open_files(o.server_pid);
    }
    s.kv_used_blocks = kv_used_blocks(o.load.url);
    s.e2e_p50_s = b->e2e.p50;
    s.e2e_p99_s = b->e2e.p99;
    s.requests = since_requests;
    s.failed = since_failed;
    since_requests = since_failed = 0;
    r.samples.push_back(s);
    last_sample = t;
  }
  judge_soak(r, o);
  return r;
}

nlohmann::json to_json(const SoakResult& r) {
  nlohmann::json samples = nlohmann::json::array();
  for (const SoakSample& s : r.samples) {
    samples.push_back({{"t_s", s.t_s},
                       {"rss_mb", s.rss_mb},
                       {"threads", s.threads},
                       {"open_files", s.open_files},
                       {"kv_used_blocks", s.kv_used_blocks},
                       {"e2e_p50_s", s.e2e_p50_s},
                       {"e2e_p99_s", s.e2e_p99_s},
                       {"requests", s.requests},
                       {"failed", s.failed}});
  }
  nlohmann::json j = {{"requests", r.requests},
                      {"failed", r.failed},
                      {"samples", samples},
                      {"slopes_per_min",
                       {{"rss_mb", r.slopes.rss_mb},
                        {"threads", r.slopes.threads},
                        {"open_files", r.slopes.open_files},
                        {"kv_used_blocks", r.slopes.kv_used_blocks},
                        {"e2e_p50_s", r.slopes.e2e_p50_s}}},
                      {"pass", r.pass},
                      {"verdict", r.verdict}};
  if (!r.first_error.empty()) j["first_error"] = r.first_error;
  j["short_streams"] = r.short_streams;
  if (!r.first_short_stream.empty()) j["first_short_stream"] = r.first_short_stream;
  return j;
}

int listening_pid(int port) {
  if (port <= 0 || port > 65535) return 0;
  std::vector<std::string> inodes;
  listening_inodes("/proc/net/tcp", port, inodes);
  listening_inodes("/proc/net/tcp6", port, inodes);
  if (inodes.empty()) return 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator proc("/proc", ec), end; !ec && proc != end; proc.increment(ec)) {
    const std::string name = proc->path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::error_code fd_ec;
    for (std::filesystem::directory_iterator fd(proc->path() / "fd", fd_ec), fd_end; !fd_ec && fd != fd_end;
         fd.increment(fd_ec)) {
      std::error_code link_ec;
      const std::string target = std::filesystem::read_symlink(fd->path(), link_ec).string();
      if (link_ec || target.rfind("socket:[", 0) != 0) continue;
      for (const std::string& inode : inodes)
        if (target == "socket:[" + inode + "]") return std::stoi(name);
    }
  }
  return 0;
}

int loopback_port(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) return 0;
  std::string authority = url.substr(scheme + 3);
  authority = authority.substr(0, authority.find('/'));
  const size_t colon = authority.rfind(':');
  if (colon == std::string::npos) return 0;
  const std::string host = authority.substr(0, colon);
  if (host != "127.0.0.1" && host != "localhost" && host != "[::1]") return 0;
  try {
    size_t used = 0;
    const int port = std::stoi(authority.substr(colon + 1), &used);
    return used == authority.size() - colon - 1 && port > 0 && port <= 65535 ? port : 0;
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace day0::serve
