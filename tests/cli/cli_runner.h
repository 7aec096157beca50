#pragma once
// Runs the built `day0` binary as a user would and captures what it prints.
#include <string>
#include <vector>

namespace day0::testing {

struct CliResult {
  int exit_code = -1;      // 128 + N when killed by signal N
  bool timed_out = false;  // killed by run_cli_bounded's time limit
  std::string out;         // stdout
  std::string err;         // stderr
};

// Runs DAY0_CLI_PATH (or $DAY0_CLI_UNDER_TEST) with args (no shell involved), optionally in working directory
// `cwd`, with `stdin_text` as its standard input (empty: /dev/null).
CliResult run_cli(const std::vector<std::string>& args, const std::string& cwd = "",
                  const std::string& stdin_text = "");

// run_cli with a wall-clock limit: past `seconds` the child is killed (SIGKILL) and timed_out set.
// `signal_after` > 0 sends `signal` (e.g. SIGINT) to the child after that many seconds instead.
// `env` entries ("NAME=value") are set in the child only.
CliResult run_cli_bounded(const std::vector<std::string>& args, double seconds, double signal_after = 0,
                          int signal = 0, const std::vector<std::string>& env = {});

// What `command` (run by /bin/sh) printed on stdout ("" when it could not start).
std::string shell_output(const std::string& command);

// A fresh empty directory under the system temp dir, removed by the caller when done.
std::string make_temp_dir(const std::string& prefix);

}  // namespace day0::testing
