#include "engine/slot_pool.h"

#include <gtest/gtest.h>

namespace dsv4 {
namespace {

TEST(SlotPoolTest, LowestSlotFirstAndGenerationsGrow) {
  engine::SlotPool pool(3);
  const engine::SlotHandle a = pool.Acquire();
  const engine::SlotHandle b = pool.Acquire();
  EXPECT_EQ(a.slot, 0);
  EXPECT_EQ(b.slot, 1);
  EXPECT_EQ(a.generation, 1u);
  pool.Release(a.slot);
  const engine::SlotHandle c = pool.Acquire();
  EXPECT_EQ(c.slot, 0);         // reused ...
  EXPECT_EQ(c.generation, 2u);  // ... under a new generation
  EXPECT_EQ(pool.generation(0), 2u);
  EXPECT_EQ(pool.num_free(), 1);
}

TEST(SlotPoolTest, GenerationWrapsToOneNeverZero) {
  EXPECT_EQ(engine::SlotPool::NextGeneration(0), 1u);
  EXPECT_EQ(engine::SlotPool::NextGeneration(41), 42u);
  EXPECT_EQ(engine::SlotPool::NextGeneration(0x7ffffffeu), 0x7fffffffu);
  EXPECT_EQ(engine::SlotPool::NextGeneration(0x7fffffffu), 1u);
}

TEST(SlotPoolDeathTest, DoubleReleaseIsAnInvariantViolation) {
  engine::SlotPool pool(1);
  const engine::SlotHandle h = pool.Acquire();
  pool.Release(h.slot);
  EXPECT_DEATH(pool.Release(h.slot), "released twice");
}

}  // namespace
}  // namespace dsv4
