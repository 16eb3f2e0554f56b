#include "cache/shared_page_pool.h"

#include <climits>

#include "base/logging.h"

namespace dsv4::cache {

SharedPagePool::SharedPagePool(int64_t num_pages)
    : refs_(static_cast<size_t>(num_pages), 0),
      cached_(static_cast<size_t>(num_pages), 0),
      prev_(static_cast<size_t>(num_pages), kNone),
      next_(static_cast<size_t>(num_pages), kNone),
      on_lru_(static_cast<size_t>(num_pages), 0) {
  DSV4_CHECK(num_pages >= 0 && num_pages <= INT32_MAX);
  free_.reserve(static_cast<size_t>(num_pages));
  for (int64_t p = num_pages - 1; p >= 0; --p) free_.push_back(static_cast<int32_t>(p));
}

size_t SharedPagePool::Index(int32_t page) const {
  DSV4_CHECK_MSG(page >= 0 && page < num_pages(), "page {} out of range", page);
  return static_cast<size_t>(page);
}

void SharedPagePool::LruRemove(int32_t page) {
  const size_t i = Index(page);
  DSV4_CHECK(on_lru_[i] != 0);
  const int32_t p = prev_[i];
  const int32_t n = next_[i];
  if (p != kNone)
    next_[static_cast<size_t>(p)] = n;
  else
    lru_head_ = n;
  if (n != kNone)
    prev_[static_cast<size_t>(n)] = p;
  else
    lru_tail_ = p;
  prev_[i] = next_[i] = kNone;
  on_lru_[i] = 0;
  --num_lru_;
}

void SharedPagePool::LruPushBack(int32_t page) {
  const size_t i = Index(page);
  DSV4_CHECK(on_lru_[i] == 0);
  prev_[i] = lru_tail_;
  next_[i] = kNone;
  if (lru_tail_ != kNone)
    next_[static_cast<size_t>(lru_tail_)] = page;
  else
    lru_head_ = page;
  lru_tail_ = page;
  on_lru_[i] = 1;
  ++num_lru_;
}

int32_t SharedPagePool::Take(bool* evicted) {
  *evicted = false;
  int32_t page = kNone;
  if (!free_.empty()) {
    page = free_.back();
    free_.pop_back();
  } else {
    DSV4_CHECK_MSG(lru_head_ != kNone, "no page available");
    page = lru_head_;
    LruRemove(page);
    cached_[Index(page)] = 0;
    *evicted = true;
  }
  refs_[Index(page)] = 1;
  return page;
}

void SharedPagePool::Ref(int32_t page) {
  const size_t i = Index(page);
  DSV4_CHECK_MSG(refs_[i] > 0 || cached_[i] != 0, "page {} is free", page);
  if (refs_[i] == 0) LruRemove(page);
  ++refs_[i];
}

void SharedPagePool::Unref(int32_t page) {
  const size_t i = Index(page);
  DSV4_CHECK_MSG(refs_[i] > 0, "page {} released more often than taken", page);
  if (--refs_[i] > 0) return;
  if (cached_[i] != 0) {
    LruPushBack(page);
  } else {
    free_.push_back(page);
  }
}

void SharedPagePool::SetCached(int32_t page, bool cached) {
  const size_t i = Index(page);
  if ((cached_[i] != 0) == cached) return;
  if (cached) {
    DSV4_CHECK_MSG(refs_[i] > 0, "only a referenced page can become cached (page {})", page);
    cached_[i] = 1;
    return;
  }
  cached_[i] = 0;
  if (refs_[i] == 0) {  // was waiting on the LRU: now plain free memory
    LruRemove(page);
    free_.push_back(page);
  }
}

Status SharedPagePool::CheckInvariants() const {
  const auto n = static_cast<size_t>(num_pages());
  std::vector<uint8_t> on_free(n, 0);
  for (int32_t p : free_) {
    if (p < 0 || static_cast<size_t>(p) >= n || on_free[static_cast<size_t>(p)] != 0) {
      return Internal("page {} on the free list twice or out of range", p);
    }
    on_free[static_cast<size_t>(p)] = 1;
  }
  int64_t walked = 0;
  int32_t prev = kNone;
  for (int32_t p = lru_head_; p != kNone; p = next_[static_cast<size_t>(p)]) {
    if (++walked > num_pages()) return Internal("the LRU list has a cycle");
    if (prev_[static_cast<size_t>(p)] != prev) return Internal("LRU back link of page {}", p);
    prev = p;
  }
  if (prev != lru_tail_ || walked != num_lru_) return Internal("LRU tail or count");
  for (size_t i = 0; i < n; ++i) {
    const bool free = on_free[i] != 0;
    const bool lru = on_lru_[i] != 0;
    const bool referenced = refs_[i] > 0;
    if (refs_[i] < 0) return Internal("page {} has refcount {}", i, refs_[i]);
    if (int(free) + int(lru) + int(referenced) != 1) {
      return Internal("page {}: free {} lru {} refcount {}", i, free, lru, refs_[i]);
    }
    if (free && cached_[i] != 0) return Internal("page {} is free but cached", i);
    if (lru && cached_[i] == 0) return Internal("page {} is on the LRU but not cached", i);
  }
  return Status::Ok();
}

}  // namespace dsv4::cache
