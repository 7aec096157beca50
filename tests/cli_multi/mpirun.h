#pragma once
// Runs `mpirun -np N day0 ARGS...` as a user would (oversubscribed, allowed as root) with a time limit,
// and finds processes a run left behind.
#include <sys/types.h>

#include <string>
#include <vector>

#include "cli_runner.h"

namespace day0::testing {

// The mpirun on PATH, or empty.
std::string find_mpirun();

struct MpiRunResult : CliResult {
  double seconds = 0;  // wall time until mpirun exited
};

// Every child gets DAY0_TEST_RUN_TAG=<tag> (and `env`) so that leftovers can be found by it.
MpiRunResult run_mpi(int np, const std::vector<std::string>& day0_args, double limit_seconds,
                     const std::string& tag, const std::vector<std::string>& env = {});

// `mpirun -np N day0 ARGS...` in the background (run_mpi's settings), for a test that talks to it while
// it runs (a server). The destructor kills what is still running.
class MpiJob {
 public:
  MpiJob(int np, const std::vector<std::string>& day0_args, const std::string& tag,
         const std::vector<std::string>& env = {});
  ~MpiJob();
  MpiJob(const MpiJob&) = delete;
  MpiJob& operator=(const MpiJob&) = delete;

  pid_t pid() const { return pid_; }
  std::string out() const;  // what the job printed so far
  std::string err() const;
  // Waits up to `seconds` until stdout holds `text`; false when it did not (or the job ended).
  bool wait_for_output(const std::string& text, double seconds);
  // Sends `signal` to mpirun (0: none), then waits up to `limit_seconds` for it to end; past that it
  // is killed and timed_out set.
  MpiRunResult finish(double limit_seconds, int signal = 0);

 private:
  std::string dir_;
  pid_t pid_ = -1;
  bool done_ = false;
  double started_ = 0;
};

// Pid of the job's rank `rank` (by OMPI_COMM_WORLD_RANK among the processes tagged `tag`), or -1.
int rank_process(const std::string& tag, int rank);

// Pids of live processes whose environment holds DAY0_TEST_RUN_TAG=<tag>.
std::vector<int> processes_tagged(const std::string& tag);

}  // namespace day0::testing
