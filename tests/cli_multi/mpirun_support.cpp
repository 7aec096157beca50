#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "mpirun.h"

namespace day0::testing {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::string find_mpirun() {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = dir + "/mpirun";
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

MpiRunResult run_mpi(int np, const std::vector<std::string>& day0_args, double limit_seconds,
                     const std::string& tag, const std::vector<std::string>& env) {
  const std::string dir = make_temp_dir("day0-mpirun-");
  const std::string out_path = dir + "/out", err_path = dir + "/err";
  std::vector<std::string> args = {find_mpirun(), "--oversubscribe", "-np", std::to_string(np),
                                   DAY0_CLI_PATH};
  args.insert(args.end(), day0_args.begin(), day0_args.end());
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int in = open("/dev/null", O_RDONLY);
    dup2(in, 0);
    dup2(out, 1);
    dup2(err, 2);
    setenv("DAY0_TEST_RUN_TAG", tag.c_str(), 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    setenv("OMPI_MCA_btl", "self,vader", 1);
    for (const std::string& e : env) putenv(strdup(e.c_str()));
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  MpiRunResult r;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() - start > std::chrono::duration<double>(limit_seconds)) {
      kill(pid, SIGTERM);  // mpirun forwards it to its ranks
      std::this_thread::sleep_for(std::chrono::seconds(2));
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      r.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  std::filesystem::remove_all(dir);
  return r;
}

std::vector<int> processes_tagged(const std::string& tag) {
  std::vector<int> out;
  const std::string needle = "DAY0_TEST_RUN_TAG=" + tag;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "environ", std::ios::binary);
    std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (env.empty()) continue;
    // Entries are NUL-separated: match a whole entry.
    size_t at = 0;
    for (size_t end; (end = env.find('\0', at)) != std::string::npos; at = end + 1) {
      if (env.compare(at, end - at, needle) == 0) {
        // A zombie awaiting its parent's wait is not a leftover process.
        std::ifstream stat(e.path() / "stat");
        std::string pid_s, comm, state;
        stat >> pid_s >> comm >> state;
        if (state != "Z") out.push_back(std::stoi(name));
        break;
      }
    }
  }
  return out;
}

}  // namespace day0::testing
