#include "engine/slot_pool.h"

#include <algorithm>
#include <functional>

#include "base/logging.h"

namespace dsv4::engine {

SlotPool::SlotPool(int32_t num_slots)
    : generation_(static_cast<size_t>(num_slots), 0), in_use_(static_cast<size_t>(num_slots), 0) {
  DSV4_CHECK(num_slots >= 0);
  for (int32_t s = num_slots - 1; s >= 0; --s) free_.push_back(s);
}

SlotHandle SlotPool::Acquire() {
  DSV4_CHECK(!free_.empty());
  const int32_t slot = free_.back();
  free_.pop_back();
  uint32_t& gen = generation_[static_cast<size_t>(slot)];
  gen = NextGeneration(gen);
  in_use_[static_cast<size_t>(slot)] = 1;
  return {slot, gen};
}

void SlotPool::Release(int32_t slot) {
  DSV4_CHECK_MSG(slot >= 0 && slot < num_slots() && in_use(slot), "slot {} released twice", slot);
  in_use_[static_cast<size_t>(slot)] = 0;
  // Keep free_ descending so the lowest slot is reused first.
  free_.insert(std::upper_bound(free_.begin(), free_.end(), slot, std::greater<int32_t>()), slot);
}

}  // namespace dsv4::engine
