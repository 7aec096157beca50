#pragma once
// The engine's in-layer finiteness record (blocks::watch_finite): row means of a layer's projection and
// norm outputs, summed per row. NaN or Inf in any of them makes the sum non-finite, so the step fails
// even where attention's running max or a router's top-k would drop the bad value and leave the layer's
// output finite.
#include "day0/ops/tensor.h"

namespace day0::blocks {

struct FiniteWatch {
  Matrix sum;      // [T, 1] points into the engine's record of the current layer (empty: not watched)
  Matrix scratch;  // [T, 1]
};

}  // namespace day0::blocks
