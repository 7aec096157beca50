#pragma once
// Runs the built `day0` binary as a user would and captures what it prints.
#include <string>
#include <vector>

namespace day0::testing {

struct CliResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs DAY0_CLI_PATH with args (no shell involved), optionally in working directory `cwd`, with
// `stdin_text` as its standard input (empty: /dev/null).
CliResult run_cli(const std::vector<std::string>& args, const std::string& cwd = "",
                  const std::string& stdin_text = "");

// A fresh empty directory under the system temp dir, removed by the caller when done.
std::string make_temp_dir(const std::string& prefix);

}  // namespace day0::testing
