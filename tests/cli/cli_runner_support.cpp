#include "cli_runner.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace day0::testing {

namespace {
std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

std::string shell_output(const std::string& command) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  pclose(p);
  return out;
}

std::string make_temp_dir(const std::string& prefix) {
  std::string templ = (std::filesystem::temp_directory_path() / (prefix + "XXXXXX")).string();
  if (mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  return templ;
}

namespace {
CliResult run_child(const std::vector<std::string>& args, const std::string& cwd,
                    const std::string& stdin_text, double seconds, double signal_after, int signal,
                    const std::vector<std::string>& env);
}  // namespace

CliResult run_cli(const std::vector<std::string>& args, const std::string& cwd,
                  const std::string& stdin_text) {
  return run_child(args, cwd, stdin_text, 0, 0, 0, {});
}

CliResult run_cli_bounded(const std::vector<std::string>& args, double seconds, double signal_after,
                          int signal, const std::vector<std::string>& env) {
  return run_child(args, "", "", seconds, signal_after, signal, env);
}

namespace {
CliResult run_child(const std::vector<std::string>& args, const std::string& cwd,
                    const std::string& stdin_text, double seconds, double signal_after, int signal,
                    const std::vector<std::string>& env) {
  const std::string dir = make_temp_dir("day0_cli_");
  const std::string out_path = dir + "/out";
  const std::string err_path = dir + "/err";
  const std::string in_path = stdin_text.empty() ? std::string("/dev/null") : dir + "/in";
  if (!stdin_text.empty()) std::ofstream(in_path, std::ios::binary) << stdin_text;
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    const int out_fd = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err_fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int null_fd = open(in_path.c_str(), O_RDONLY);
    if (out_fd < 0 || err_fd < 0 || null_fd < 0) _exit(127);
    dup2(null_fd, 0);
    dup2(out_fd, 1);
    dup2(err_fd, 2);
    if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(127);
    for (const std::string& e : env) {
      const size_t eq = e.find('=');
      if (eq != std::string::npos) setenv(e.substr(0, eq).c_str(), e.substr(eq + 1).c_str(), 1);
    }
    std::vector<char*> argv;
    // DAY0_CLI_UNDER_TEST runs the same cases against another build (e.g. an older one, to show
    // that a regression test fails where the defect is still present).
    const char* under_test = std::getenv("DAY0_CLI_UNDER_TEST");
    std::string binary = under_test != nullptr && *under_test != '\0' ? under_test : DAY0_CLI_PATH;
    argv.push_back(binary.data());
    std::vector<std::string> copies(args);
    for (auto& a : copies) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  CliResult result;
  if (seconds <= 0) {
    waitpid(pid, &status, 0);
  } else {
    const auto start = std::chrono::steady_clock::now();
    bool signalled = false;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (signal_after > 0 && !signalled && elapsed >= signal_after) {
        kill(pid, signal);
        signalled = true;
      }
      if (elapsed >= seconds) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        result.timed_out = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = slurp(out_path);
  result.err = slurp(err_path);
  std::filesystem::remove_all(dir);
  return result;
}
}  // namespace

}  // namespace day0::testing
