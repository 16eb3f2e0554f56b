#include "cache/page_pool.h"

#include <climits>

#include "base/logging.h"

namespace dsv4::cache {

PagePool::PagePool(int64_t num_pages) : in_use_(static_cast<size_t>(num_pages), 0) {
  DSV4_CHECK(num_pages >= 0 && num_pages <= INT32_MAX);
  free_.reserve(static_cast<size_t>(num_pages));
  // Stack order: page 0 is taken first.
  for (int64_t p = num_pages - 1; p >= 0; --p) free_.push_back(static_cast<int32_t>(p));
}

int32_t PagePool::Take() {
  DSV4_CHECK(!free_.empty());
  const int32_t page = free_.back();
  free_.pop_back();
  in_use_[static_cast<size_t>(page)] = 1;
  return page;
}

void PagePool::Release(int32_t page) {
  DSV4_CHECK_MSG(page >= 0 && page < num_pages(), "page {} out of range", page);
  DSV4_CHECK_MSG(in_use_[static_cast<size_t>(page)] != 0, "page {} released twice", page);
  in_use_[static_cast<size_t>(page)] = 0;
  free_.push_back(page);
}

}  // namespace dsv4::cache
