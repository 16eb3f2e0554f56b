// One owner's pages in one cache group.
#pragma once

#include <cstdint>
#include <vector>

namespace dsv4::cache {

inline constexpr int32_t kNoPage = -1;

// One owner's pages in one group: logical page first_page + i is physical
// page pages[i] (kNoPage marks a hole a ring does not store).
struct BlockTable {
  int64_t first_page = 0;
  std::vector<int32_t> pages;

  int64_t end_page() const { return first_page + static_cast<int64_t>(pages.size()); }
  // kNoPage outside the table or in a hole.
  int32_t At(int64_t logical) const {
    if (logical < first_page || logical >= end_page()) return kNoPage;
    return pages[static_cast<size_t>(logical - first_page)];
  }
  int64_t num_mapped() const {
    int64_t n = 0;
    for (int32_t p : pages) n += p != kNoPage ? 1 : 0;
    return n;
  }
};

}  // namespace dsv4::cache
