#include "day0/report/stages/hf_reference.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include <fmt/format.h>

namespace day0::report {

namespace {

namespace fs = std::filesystem;

struct Finished {
  bool timed_out = false;
  int exit_code = -1;  // 128 + signal when killed by one
};

// Runs argv with stdin from /dev/null and stdout + stderr appended to `log`, killed after `seconds`.
Finished run_bounded(const std::vector<std::string>& argv, const fs::path& log, double seconds) {
  Finished f;
  const pid_t pid = fork();
  if (pid < 0) return f;
  if (pid == 0) {
    const int in = open("/dev/null", O_RDONLY);
    const int out = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (in >= 0) dup2(in, 0);
    if (out >= 0) {
      dup2(out, 1);
      dup2(out, 2);
    }
    setenv("HF_HUB_OFFLINE", "1", 1);
    std::vector<char*> args;
    args.reserve(argv.size() + 1);
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  const auto start = std::chrono::steady_clock::now();
  int status = 0;
  for (;;) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0) return f;
    if (std::chrono::steady_clock::now() - start > std::chrono::duration<double>(seconds)) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      f.timed_out = true;
      return f;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  f.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return f;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The last line of a log, for a one-line reason.
std::string last_line(const std::string& text) {
  size_t end = text.find_last_not_of("\n\r ");
  if (end == std::string::npos) return "";
  size_t begin = text.rfind('\n', end);
  begin = begin == std::string::npos ? 0 : begin + 1;
  return text.substr(begin, std::min<size_t>(end + 1 - begin, 300));
}

std::string which(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = dir + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

fs::path find_script() {
  if (const char* env = std::getenv("DAY0_REFERENCE_TOOLS")) {
    const fs::path p = fs::path(env) / "dump_reference.py";
    if (fs::is_regular_file(p)) return p;
  }
#ifdef DAY0_SOURCE_DIR
  const fs::path p = fs::path(DAY0_SOURCE_DIR) / "tools/reference/dump_reference.py";
  if (fs::is_regular_file(p)) return p;
#endif
  return {};
}

// Whether `python` imports torch and transformers; their versions in `versions` when it does.
bool probe(const std::string& python, const fs::path& work_dir, std::string& versions, std::string& why) {
  if (access(python.c_str(), X_OK) != 0) {
    why = python + " is not an executable file";
    return false;
  }
  const fs::path log = work_dir / "hf-probe.log";
  std::error_code ec;
  fs::remove(log, ec);
  const Finished f =
      run_bounded({python, "-c",
                   "import torch, transformers; print('torch', torch.__version__ + ', transformers', "
                   "transformers.__version__)"},
                  log, 120.0);
  const std::string text = read_text(log);
  if (f.timed_out || f.exit_code != 0) {
    why = fmt::format("{} cannot import torch + transformers ({})", python,
                      f.timed_out ? std::string("timed out after 120 s") : last_line(text));
    return false;
  }
  versions = last_line(text);
  return true;
}

}  // namespace

HfReferenceRun dump_with_transformers(const std::string& requested, const fs::path& model_dir,
                                      const fs::path& work_dir, uint64_t seed, double timeout_seconds) {
  HfReferenceRun r;
  if (requested == "none") {
    r.reason = "turned off (--reference-python none)";
    return r;
  }
  const fs::path script = find_script();
  if (script.empty()) {
    r.reason = "tools/reference/dump_reference.py not found (set DAY0_REFERENCE_TOOLS to its folder)";
    r.failed = !requested.empty();
    return r;
  }
  std::vector<std::string> candidates;
  if (!requested.empty()) {
    candidates.push_back(requested);
  } else {
    if (const char* env = std::getenv("DAY0_REFERENCE_PYTHON"); env != nullptr && *env != '\0')
      candidates.emplace_back(env);
    if (access("/opt/refvenv/bin/python", X_OK) == 0) candidates.emplace_back("/opt/refvenv/bin/python");
    if (const std::string p = which("python3"); !p.empty()) candidates.push_back(p);
  }
  std::vector<std::string> whys;
  for (const std::string& python : candidates) {
    std::string why;
    if (probe(python, work_dir, r.versions, why)) {
      r.python = python;
      break;
    }
    whys.push_back(why);
  }
  if (r.python.empty()) {
    r.reason = candidates.empty() ? std::string("no Python found (python3 is not on PATH)")
                                  : fmt::format("no usable Python: {}", fmt::join(whys, "; "));
    r.failed = !requested.empty();  // asked for by path: its failure is the stage's
    return r;
  }
  r.attempted = true;
  const fs::path dump = work_dir / "miniature-transformers.safetensors";
  const fs::path log = work_dir / "hf-reference.log";
  const Finished f = run_bounded(
      {
          r.python,
          script.string(),
          "dump",
          model_dir.string(),
          "--out",
          dump.string(),
          "--random-lengths",
          "7",
          "23",
          "--seed",
          std::to_string(seed),
          "--greedy",
          "4",
      },
      log, timeout_seconds);
  if (f.timed_out || f.exit_code != 0 || !fs::is_regular_file(dump)) {
    r.failed = true;
    r.reason = fmt::format("{} {} dump failed ({}): {}", r.python, script.string(),
                           f.timed_out ? fmt::format("timed out after {:.0f} s", timeout_seconds)
                                       : fmt::format("exit {}", f.exit_code),
                           last_line(read_text(log)));
    return r;
  }
  r.dump_path = dump.string();
  return r;
}

}  // namespace day0::report
