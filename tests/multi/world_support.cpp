#include <cstdio>

#include "world.h"

namespace day0::testing {

std::shared_ptr<dist::Communicator> shared_test_world() {
  static std::shared_ptr<dist::Communicator> world = [] {
    std::shared_ptr<dist::Communicator> w;
    if (!dist::mpi_available()) return w;
    auto opened = dist::open_mpi_world({.timeout_seconds = 20, .heartbeat_seconds = 0.05});
    if (!opened.is_ok()) {
      std::fprintf(stderr, "multi tests: %s\n", opened.status().to_string().c_str());
      return w;
    }
    return *opened;
  }();
  return world;
}

dist::Communicator* test_world() {
  return shared_test_world().get();
}

}  // namespace day0::testing
