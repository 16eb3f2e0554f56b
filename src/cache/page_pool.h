// Free list of one group's pages in one partition.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dsv4::cache {

class PagePool {
 public:
  explicit PagePool(int64_t num_pages);

  int64_t num_pages() const { return static_cast<int64_t>(in_use_.size()); }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  bool in_use(int32_t page) const { return in_use_[static_cast<size_t>(page)] != 0; }

  // REQUIRES: num_free() > 0.  Reuses the most recently released page first
  // (its memory is the most likely to still be in cache).
  int32_t Take();
  // REQUIRES: `page` was taken and not yet released.
  void Release(int32_t page);

 private:
  std::vector<int32_t> free_;    // stack of free page ids
  std::vector<uint8_t> in_use_;  // [num_pages] 1 while owned; catches double release
};

}  // namespace dsv4::cache
