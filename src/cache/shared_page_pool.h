// The pages of one (partition, group) pool when pages may be shared between
// requests and kept after their last user for a later prefix hit (prefix
// caching; docs/engine.md "Prefix caching").
//
// Every page is in exactly one state:
//   free        refcount 0, not cached: on the free list;
//   cached      refcount 0, cached: holds a computed page that an index still
//               names, kept on an LRU list until its memory is needed;
//   referenced  refcount >= 1: mapped by that many owners (cached or not).
// Take() prefers the free list and otherwise evicts the least recently
// released cached page, so cached pages cost no capacity: they are free
// memory that still remembers what it held.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"

namespace dsv4::cache {

class SharedPagePool {
 public:
  explicit SharedPagePool(int64_t num_pages);

  int64_t num_pages() const { return static_cast<int64_t>(refs_.size()); }
  // Pages Take() can return: free plus cached.
  int64_t num_available() const { return static_cast<int64_t>(free_.size()) + num_lru_; }
  int64_t num_cached_unreferenced() const { return num_lru_; }
  int32_t refcount(int32_t page) const { return refs_[Index(page)]; }
  bool cached(int32_t page) const { return cached_[Index(page)] != 0; }

  // A page for a new owner (refcount 1, not cached).  When it comes off the
  // LRU, *evicted is set to true: its old content is gone and the caller must
  // drop whatever index named it.  REQUIRES: num_available() > 0.
  int32_t Take(bool* evicted);
  // One more owner maps `page` (a referenced or cached page: a prefix hit).
  // REQUIRES: refcount(page) > 0 or cached(page).
  void Ref(int32_t page);
  // One owner lets go.  At refcount 0 a cached page goes to the LRU's most
  // recent end, any other to the free list.  REQUIRES: refcount(page) > 0.
  void Unref(int32_t page);
  // Marks `page` as named by an index (true) or no longer (false).  A cached
  // page with refcount 0 that stops being cached becomes free.
  void SetCached(int32_t page, bool cached);

  // The states above are consistent (lists, counts, flags).  Linear.
  Status CheckInvariants() const;

 private:
  static constexpr int32_t kNone = -1;
  size_t Index(int32_t page) const;
  void LruRemove(int32_t page);
  void LruPushBack(int32_t page);

  std::vector<int32_t> refs_;    // [num_pages]
  std::vector<uint8_t> cached_;  // [num_pages]
  std::vector<int32_t> free_;    // stack: most recently freed on top
  std::vector<int32_t> prev_;    // LRU links ([num_pages], kNone at the ends)
  std::vector<int32_t> next_;
  std::vector<uint8_t> on_lru_;  // [num_pages]
  int32_t lru_head_ = kNone;     // least recently released
  int32_t lru_tail_ = kNone;
  int64_t num_lru_ = 0;
};

}  // namespace dsv4::cache
