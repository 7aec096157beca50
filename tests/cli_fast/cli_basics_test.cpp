#include <gtest/gtest.h>

#include "cli_runner.h"

namespace day0::testing {
namespace {

TEST(Cli, HelpListsSubcommandsAndExitsZero) {
  CliResult r = run_cli({"--help"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Usage"), std::string::npos);
}

TEST(Cli, UnknownSubcommandIsBadUsage) {
  CliResult r = run_cli({"frobnicate"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_FALSE(r.err.empty());
}

TEST(Cli, VersionPrintsVersion) {
  CliResult r = run_cli({"--version"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("day0 "), std::string::npos);
}

}  // namespace
}  // namespace day0::testing
