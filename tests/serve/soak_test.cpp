// The soak: least-squares slopes, the verdict on flat and growing series, and a short real soak of a
// server in this process (its /proc entry sampled between rounds).
#include <gtest/gtest.h>
#include <unistd.h>

#include <vector>

#include "day0/serve/soak.h"
#include "serve_harness.h"

namespace day0::testing {
namespace {

TEST(Soak, SlopeIsPerMinuteAndExactOnALine) {
  const std::vector<double> t = {0, 30, 60, 90, 120};
  const std::vector<double> y = {10, 11, 12, 13, 14};  // +1 every 30 s
  EXPECT_NEAR(serve::slope_per_minute(t, y), 2.0, 1e-12);
  EXPECT_EQ(serve::slope_per_minute(std::vector<double>{5}, std::vector<double>{1}), 0.0);
}

serve::SoakResult with_rss(const std::vector<double>& rss) {
  serve::SoakResult r;
  for (size_t i = 0; i < rss.size(); ++i) {
    serve::SoakSample s;
    s.t_s = 60.0 * static_cast<double>(i);
    s.rss_mb = rss[i];
    s.threads = 12;
    s.open_files = 20;
    r.samples.push_back(s);
  }
  return r;
}

TEST(Soak, TextPlotPutsEachPointInItsRowAndColumn) {
  // A rise then a plateau; the unsampled point (-1) is left out.
  const std::vector<double> t = {0, 100, 200, 300, 400};
  const std::vector<double> y = {10, 20, -1, 30, 30};
  const std::string plot = serve::text_plot(t, y, 5, 3);
  std::vector<std::string> lines;
  for (size_t at = 0; at < plot.size();) {
    const size_t end = plot.find('\n', at);
    lines.push_back(plot.substr(at, end - at));
    at = end + 1;
  }
  ASSERT_EQ(lines.size(), 5u) << plot;       // 3 rows, the axis, the time labels
  EXPECT_EQ(lines[0], "     30.00 |   **");  // t = 300 and 400 s at the top (t = 200 s: not sampled)
  EXPECT_EQ(lines[1], "           | *");     // 20 at t = 100 s in the middle
  EXPECT_EQ(lines[2], "     10.00 |*");      // t = 0 at the bottom
  EXPECT_EQ(lines[3], "           +-----");
  EXPECT_NE(lines[4].find("0 s"), std::string::npos);
  EXPECT_NE(lines[4].find("400 s"), std::string::npos);
  EXPECT_EQ(serve::text_plot(std::vector<double>{1}, std::vector<double>{1}), "");
}

TEST(Soak, VerdictJudgesTheSecondHalfOnly) {
  serve::SoakOptions o;
  // Warm-up growth in the first half, flat after: pass.
  serve::SoakResult warm = with_rss({100, 130, 160, 170, 170.1, 170.1, 170.2, 170.2});
  serve::judge_soak(warm, o);
  EXPECT_TRUE(warm.pass) << warm.verdict;
  EXPECT_LT(warm.slopes.rss_mb, 0.5);
  // 1 MB a minute to the end: fail, naming the slope.
  serve::SoakResult leak = with_rss({100, 101, 102, 103, 104, 105, 106, 107});
  serve::judge_soak(leak, o);
  EXPECT_FALSE(leak.pass);
  EXPECT_NEAR(leak.slopes.rss_mb, 1.0, 1e-9);
  EXPECT_NE(leak.verdict.find("resident memory grows 1.00 MB/min"), std::string::npos) << leak.verdict;
  // A thread more at the end than at the half: fail; a failed request: fail.
  serve::SoakResult threads = with_rss({100, 100, 100, 100, 100, 100});
  threads.samples.back().threads = 13;
  serve::judge_soak(threads, o);
  EXPECT_FALSE(threads.pass);
  EXPECT_NE(threads.verdict.find("threads grew from 12 to 13"), std::string::npos) << threads.verdict;
  serve::SoakResult failed = with_rss({100, 100, 100, 100});
  failed.requests = 10;
  failed.failed = 1;
  failed.first_error = "HTTP 500";
  serve::judge_soak(failed, o);
  EXPECT_FALSE(failed.pass);
  EXPECT_NE(failed.verdict.find("1 of 10 requests failed"), std::string::npos) << failed.verdict;
}

TEST(Soak, AShortSoakOfARealServerSamplesItsProcess) {
  ServeHarness h({});
  serve::SoakOptions o;
  o.load.url = "http://127.0.0.1:" + std::to_string(h.port());
  o.load.requests = 4;
  o.load.concurrency = 2;
  o.load.prompt_len = {8, 8};
  o.load.output_len = {4, 4};
  o.duration_s = 1.5;
  o.sample_every_s = 0.2;
  o.server_pid = static_cast<int>(::getpid());
  o.max_rss_slope_mb_per_min = 1e9;  // a 1.5 s run says nothing about leaks; the counts are what is checked
  auto r = serve::run_soak(o);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_GE(r->samples.size(), 4u);
  EXPECT_EQ(r->failed, 0) << r->first_error;
  EXPECT_GT(r->requests, 0);
  for (const serve::SoakSample& s : r->samples) {
    EXPECT_GT(s.rss_mb, 1.0);
    EXPECT_GE(s.threads, 2.0);
    EXPECT_GT(s.open_files, 2.0);
    EXPECT_GE(s.kv_used_blocks, 0.0);  // our server exports day0:kv_cache_used_blocks
    EXPECT_GT(s.e2e_p50_s, 0.0);
  }
  EXPECT_GE(r->samples.back().t_s, 1.5);
  const auto j = serve::to_json(*r);
  EXPECT_EQ(j["samples"].size(), r->samples.size());
}

}  // namespace
}  // namespace day0::testing
