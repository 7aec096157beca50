#include "day0/report/stages/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace day0::report {

namespace fs = std::filesystem;

Finished run_bounded(const std::vector<std::string>& argv, const fs::path& out, const fs::path& err,
                     double seconds, const std::vector<std::string>& env) {
  Finished f;
  const pid_t pid = fork();
  if (pid < 0) return f;
  if (pid == 0) {
    // When adapt dies (a signal after its clean-up), the child goes too: mpirun then ends its ranks.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    const int in = open("/dev/null", O_RDONLY);
    const int o = open(out.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    const int e = err == out ? o : open(err.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (in >= 0) dup2(in, 0);
    if (o >= 0) dup2(o, 1);
    if (e >= 0) dup2(e, 2);
    for (const std::string& kv : env) putenv(strdup(kv.c_str()));
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
      // SIGTERM first: mpirun passes it on to its ranks before it exits.
      kill(pid, SIGTERM);
      bool reaped = false;
      for (int i = 0; i < 150 && !reaped; ++i) {
        reaped = waitpid(pid, &status, WNOHANG) == pid;
        if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (!reaped) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
      }
      f.timed_out = true;
      return f;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  f.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return f;
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

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string last_line(const std::string& text) {
  size_t end = text.find_last_not_of("\n\r ");
  if (end == std::string::npos) return "";
  size_t begin = text.rfind('\n', end);
  begin = begin == std::string::npos ? 0 : begin + 1;
  return text.substr(begin, std::min<size_t>(end + 1 - begin, 300));
}

}  // namespace day0::report
