#include <gtest/gtest.h>

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

TEST(MachineInfo, ReadsRealFigures) {
  MachineInfo info = read_machine_info();
  EXPECT_GT(info.logical_cores, 0);
  EXPECT_GT(info.memory_total_bytes, 100u << 20);
  EXPECT_GT(current_rss_bytes(), 0u);
}

}  // namespace
}  // namespace day0::report
