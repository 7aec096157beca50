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

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Whether /proc/<pid>/environ holds the entry `needle` exactly.
bool environ_has(const std::filesystem::path& proc, const std::string& needle) {
  std::ifstream in(proc / "environ", std::ios::binary);
  std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t at = 0;
  // Entries are NUL-separated: match a whole entry.
  for (size_t end; (end = env.find('\0', at)) != std::string::npos; at = end + 1) {
    if (env.compare(at, end - at, needle) == 0) return true;
  }
  return false;
}

}  // namespace

MpiJob::MpiJob(int np, const std::vector<std::string>& day0_args, const std::string& tag,
               const std::vector<std::string>& env)
    : dir_(make_temp_dir("day0-mpirun-")), started_(now_seconds()) {
  const std::string out_path = dir_ + "/out", err_path = dir_ + "/err";
  std::vector<std::string> args = {find_mpirun(), "--oversubscribe", "-np", std::to_string(np),
                                   DAY0_CLI_PATH};
  args.insert(args.end(), day0_args.begin(), day0_args.end());
  pid_ = fork();
  if (pid_ == 0) {
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
}

MpiJob::~MpiJob() {
  if (!done_ && pid_ > 0) finish(5, SIGTERM);
  std::filesystem::remove_all(dir_);
}

std::string MpiJob::out() const {
  return slurp(dir_ + "/out");
}

std::string MpiJob::err() const {
  return slurp(dir_ + "/err");
}

bool MpiJob::wait_for_output(const std::string& text, double seconds) {
  const double until = now_seconds() + seconds;
  while (now_seconds() < until) {
    if (out().find(text) != std::string::npos) return true;
    int status = 0;
    if (!done_ && waitpid(pid_, &status, WNOHANG) == pid_) {
      done_ = true;
      return out().find(text) != std::string::npos;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

MpiRunResult MpiJob::finish(double limit_seconds, int signal) {
  MpiRunResult r;
  int status = 0;
  if (!done_) {
    if (signal != 0) kill(pid_, signal);
    const double until = now_seconds() + limit_seconds;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (now_seconds() > until) {
        kill(pid_, SIGTERM);  // mpirun forwards it to its ranks
        std::this_thread::sleep_for(std::chrono::seconds(2));
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        r.timed_out = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    done_ = true;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  r.seconds = now_seconds() - started_;
  r.out = out();
  r.err = err();
  return r;
}

MpiRunResult run_mpi(int np, const std::vector<std::string>& day0_args, double limit_seconds,
                     const std::string& tag, const std::vector<std::string>& env) {
  MpiJob job(np, day0_args, tag, env);
  return job.finish(limit_seconds);
}

int rank_process(const std::string& tag, int rank) {
  for (int pid : processes_tagged(tag)) {
    if (environ_has("/proc/" + std::to_string(pid), "OMPI_COMM_WORLD_RANK=" + std::to_string(rank)))
      return pid;
  }
  return -1;
}

std::vector<int> processes_tagged(const std::string& tag) {
  std::vector<int> out;
  const std::string needle = "DAY0_TEST_RUN_TAG=" + tag;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (!environ_has(e.path(), needle)) continue;
    // A zombie awaiting its parent's wait is not a leftover process.
    std::ifstream stat(e.path() / "stat");
    std::string pid_s, comm, state;
    stat >> pid_s >> comm >> state;
    if (state != "Z") out.push_back(std::stoi(name));
  }
  return out;
}

}  // namespace day0::testing
