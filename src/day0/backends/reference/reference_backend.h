#pragma once
// The `reference` backend: ref:: kernels behind the Backend interface. Supports every op and weight
// format, single-threaded, host memory.
#include <memory>

#include "day0/backends/backend.h"

namespace day0 {

std::unique_ptr<Backend> make_reference_backend();

}  // namespace day0
