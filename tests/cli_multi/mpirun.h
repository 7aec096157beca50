#pragma once
// Runs `mpirun -np N day0 ARGS...` as a user would (oversubscribed, allowed as root) with a time limit,
// and finds processes a run left behind.
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

// Pids of live processes whose environment holds DAY0_TEST_RUN_TAG=<tag>.
std::vector<int> processes_tagged(const std::string& tag);

}  // namespace day0::testing
