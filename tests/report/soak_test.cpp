#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "day0/report/machine_info.h"
#include "day0/report/soak.h"

namespace day0::report {
namespace {

TEST(Soak, SteadyMemoryPassesAndLeakFails) {
  SoakOptions options;
  options.max_requests = 50;
  options.max_growth_bytes = 1000;
  uint64_t fake_rss = 100000;
  auto steady = run_soak([](int) { return Status::ok(); }, options, [&] { return fake_rss; });
  EXPECT_TRUE(steady.passed) << steady.reason;
  EXPECT_EQ(steady.requests, 50);
  auto leaking = run_soak(
      [&](int) {
        fake_rss += 100;
        return Status::ok();
      },
      options, [&] { return fake_rss; });
  EXPECT_FALSE(leaking.passed);
  EXPECT_EQ(leaking.rss_growth_bytes, 100 * 40);  // grows after the 10-request warm-up
  EXPECT_NE(leaking.reason.find("grew"), std::string::npos);
  auto failing = run_soak([](int i) { return i == 7 ? internal_error("boom") : Status::ok(); }, options,
                          [&] { return fake_rss; });
  EXPECT_FALSE(failing.passed);
  EXPECT_NE(failing.reason.find("request 7"), std::string::npos);
}

// Regression: the time bound waited for a warm-up of 20% of the requests, so 100M requests with a
// 0.2 s bound ran for hours. Now it stops near the bound, past a time-based warm-up, and holds a
// bounded number of samples.
TEST(Soak, TimeBoundHoldsWithHugeRequestCounts) {
  SoakOptions options;
  options.max_requests = 100'000'000;
  options.max_seconds = 0.2;
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  auto result = run_soak(
      [&](int) {
        if (elapsed() > 3.0) return internal_error("the soak ignored its time bound");
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        return Status::ok();
      },
      options, [] { return uint64_t{100000}; });
  EXPECT_TRUE(result.passed) << result.reason;
  EXPECT_LT(result.seconds, 1.0);
  EXPECT_GT(result.requests, 2);
  EXPECT_LE(result.rss_samples.size(), SoakResult::kMaxRssSamples);
}

TEST(Soak, SamplesStayBounded) {
  SoakOptions options;
  options.max_requests = 20000;
  options.max_seconds = 60;
  auto result = run_soak([](int) { return Status::ok(); }, options, [] { return uint64_t{1}; });
  EXPECT_EQ(result.requests, 20000);
  EXPECT_LE(result.rss_samples.size(), SoakResult::kMaxRssSamples);
  EXPECT_GE(result.rss_samples.size(), SoakResult::kMaxRssSamples / 2);
}

TEST(MachineInfo, ReadsRealFigures) {
  MachineInfo info = read_machine_info();
  EXPECT_GT(info.logical_cores, 0);
  EXPECT_GT(info.memory_total_bytes, 100u << 20);
  EXPECT_GT(current_rss_bytes(), 0u);
}

}  // namespace
}  // namespace day0::report
