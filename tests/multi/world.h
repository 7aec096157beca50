#pragma once
// The MPI world of the distributed tests (run by CTest as `mpirun -np 2 day0_multi_tests`, and as
// `mpirun -np 4 day0_multi_tests --gtest_filter=*FourRanks*`). Every test runs on every rank in the same
// order; a test skips on all of them when the world is not the size it needs.
#include <memory>

#include "day0/dist/communicator.h"

namespace day0::testing {

// Opened once (20 s deadlines: a failed peer fails the test instead of hanging it); null when this
// build has no MPI.
dist::Communicator* test_world();
// The same world, shared (to split into process groups).
std::shared_ptr<dist::Communicator> shared_test_world();

}  // namespace day0::testing

#define D0_REQUIRE_TWO_RANKS()                                                                  \
  do {                                                                                          \
    if (::day0::testing::test_world() == nullptr || ::day0::testing::test_world()->size() != 2) \
      GTEST_SKIP() << "needs 2 MPI ranks (CTest runs this binary under mpirun -np 2)";          \
  } while (false)

#define D0_REQUIRE_FOUR_RANKS()                                                                 \
  do {                                                                                          \
    if (::day0::testing::test_world() == nullptr || ::day0::testing::test_world()->size() != 4) \
      GTEST_SKIP() << "needs 4 MPI ranks (CTest runs the FourRanks tests under mpirun -np 4)";  \
  } while (false)
