#pragma once
// The MPI world of the distributed tests (run by CTest as `mpirun -np 2 day0_multi_tests`). Every test
// runs on every rank in the same order; a test skips on both when the world is not two ranks.
#include <memory>

#include "day0/dist/communicator.h"

namespace day0::testing {

// Opened once (20 s deadlines: a failed peer fails the test instead of hanging it); null when this
// build has no MPI.
dist::Communicator* test_world();

}  // namespace day0::testing

#define D0_REQUIRE_TWO_RANKS()                                                                  \
  do {                                                                                          \
    if (::day0::testing::test_world() == nullptr || ::day0::testing::test_world()->size() != 2) \
      GTEST_SKIP() << "needs 2 MPI ranks (CTest runs this binary under mpirun -np 2)";          \
  } while (false)
