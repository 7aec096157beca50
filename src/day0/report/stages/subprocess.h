#pragma once
// Child processes of the adapt stages (transformers' reference dump, the distributed smoke test under
// mpirun): run with a time limit, output to a log, found on PATH.
#include <filesystem>
#include <string>
#include <vector>

namespace day0::report {

struct Finished {
  bool timed_out = false;
  int exit_code = -1;  // 128 + signal when killed by one
};

// Runs argv (no shell) with stdin from /dev/null, stdout to `out` and stderr to `err` (appended; the
// same file for both is fine), `env` ("NAME=value") added to the child's environment; past `seconds`
// it gets SIGTERM, then SIGKILL. The child gets SIGTERM when this process dies.
Finished run_bounded(const std::vector<std::string>& argv, const std::filesystem::path& out,
                     const std::filesystem::path& err, double seconds,
                     const std::vector<std::string>& env = {});

// The executable `name` on PATH, or "".
std::string which(const std::string& name);
std::string read_text(const std::filesystem::path& path);
// The last non-empty line of `text` (at most 300 characters), for a one-line reason.
std::string last_line(const std::string& text);

}  // namespace day0::report
