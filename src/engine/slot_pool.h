// Per-partition runner slots with generation counters.
//
// A running request owns one (partition, slot) for the runner's per-request
// state (MTP tail and draft, sampler state).  Every acquisition of a slot
// bumps its generation, so state or a queued step tagged with an older
// generation is recognisably stale however many steps are in flight
// (the reference's correctness argument held only for two).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dsv4::engine {

struct SlotHandle {
  int32_t slot = -1;
  uint32_t generation = 0;
};

class SlotPool {
 public:
  explicit SlotPool(int32_t num_slots);

  int32_t num_slots() const { return static_cast<int32_t>(generation_.size()); }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }
  uint32_t generation(int32_t slot) const { return generation_[static_cast<size_t>(slot)]; }
  bool in_use(int32_t slot) const { return in_use_[static_cast<size_t>(slot)] != 0; }

  // REQUIRES: num_free() > 0.  Lowest free slot first (dense runner tables);
  // generations start at 1 and wrap from 2^31 - 1 back to 1 (0 is never live).
  SlotHandle Acquire();
  // REQUIRES: `slot` is in use.
  void Release(int32_t slot);

  // The generation after `g`: g + 1, wrapping from 2^31 - 1 to 1.
  static uint32_t NextGeneration(uint32_t g) { return g >= 0x7fffffffu ? 1u : g + 1u; }

 private:
  std::vector<int32_t> free_;  // descending, so back() is the lowest
  std::vector<uint32_t> generation_;
  std::vector<uint8_t> in_use_;
};

}  // namespace dsv4::engine
