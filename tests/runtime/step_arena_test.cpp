// The step arena: zeroed buffers, a layer's temporaries given back at its end, and the block sized by
// the most floats live at once (not the sum of every take of the step).
#include <gtest/gtest.h>

#include "day0/runtime/blocks.h"

namespace day0 {
namespace {

TEST(StepArena, ReleasedMemoryIsReusedAndZeroedAgain) {
  blocks::StepArena arena;
  arena.begin_step();
  float* keep = arena.take(100);  // [100] lives through the step
  keep[0] = 7.0f;
  const auto layer = arena.mark();
  float* tmp = arena.take(1000);  // [1000] one layer's temporary
  tmp[5] = 3.0f;
  arena.release(layer);
  float* again = arena.take(1000);
  EXPECT_EQ(keep[0], 7.0f);   // what was taken before the mark is untouched
  EXPECT_EQ(again[5], 0.0f);  // handed out zeroed
  arena.begin_step();         // merges the first step's chunks into one block
  float* a = arena.take(100);
  const auto m = arena.mark();
  float* b = arena.take(1000);
  arena.release(m);
  float* c = arena.take(1000);
  EXPECT_EQ(b, c);        // the same memory, from the one block
  EXPECT_EQ(a + 112, b);  // 100 floats rounded up to whole 64-byte units
}

TEST(StepArena, BlockHoldsThePeakNotTheSumOfLayers) {
  blocks::StepArena arena;
  for (int step = 0; step < 3; ++step) {
    arena.begin_step();
    float* first = nullptr;
    for (int layer = 0; layer < 10; ++layer) {
      const auto m = arena.mark();
      float* p = arena.take(4096);  // [4096] per layer
      if (step > 0) {
        // After the first step every layer gets the same block: 10 layers did not need 10 blocks.
        if (layer == 0) first = p;
        EXPECT_EQ(p, first) << "step " << step << " layer " << layer;
      }
      arena.release(m);
    }
  }
}

TEST(StepArena, ReleaseOfAMarkFromTheFutureIsABrokenInvariant) {
  blocks::StepArena arena;
  arena.begin_step();
  arena.take(64);
  const auto later = arena.mark();
  arena.begin_step();
  EXPECT_ANY_THROW(arena.release(later));
}

}  // namespace
}  // namespace day0
