#include "cache/cache_manager.h"

#include <algorithm>
#include <string>

#include "base/logging.h"

namespace dsv4::cache {

Result<CacheManager> CacheManager::Create(std::vector<CacheGroupSpec> groups,
                                          int32_t num_partitions,
                                          std::vector<int64_t> pages_per_group) {
  if (groups.empty()) return InvalidArgument("cache manager: no cache groups");
  if (num_partitions <= 0) {
    return InvalidArgument("cache manager: --dp must be positive, got {}", num_partitions);
  }
  if (pages_per_group.size() != groups.size()) {
    return InvalidArgument("cache manager: {} pool sizes for {} groups", pages_per_group.size(),
                           groups.size());
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    DSV4_RETURN_IF_ERROR(ValidateGroupSpec(groups[g]));
    if (pages_per_group[g] < 0 || pages_per_group[g] > INT32_MAX) {
      return InvalidArgument("cache group '{}': pool of {} pages is out of range", groups[g].name,
                             pages_per_group[g]);
    }
  }
  return CacheManager(std::move(groups), num_partitions, pages_per_group);
}

CacheManager::CacheManager(std::vector<CacheGroupSpec> groups, int32_t num_partitions,
                           const std::vector<int64_t>& pages_per_group)
    : groups_(std::move(groups)), num_partitions_(num_partitions) {
  pools_.reserve(static_cast<size_t>(num_partitions) * groups_.size());
  for (int32_t p = 0; p < num_partitions; ++p) {
    for (size_t g = 0; g < groups_.size(); ++g) pools_.emplace_back(pages_per_group[g]);
  }
}

int64_t CacheManager::num_pages(int g) const { return pool(0, g).num_pages(); }

int64_t CacheManager::num_free_pages(int32_t partition, int g) const {
  return pool(partition, g).num_free();
}

int64_t CacheManager::NumMissingPages(OwnerId owner, int g, const StepSpan& span) const {
  auto it = owners_.find(owner);
  const BlockTable* table = it == owners_.end() ? nullptr : &it->second.tables[size_t(g)];
  int64_t missing = 0;
  for (const PageRange& r : group(g).RequiredPages(span)) {
    for (int64_t lp = r.begin; lp < r.end; ++lp) {
      if (table == nullptr || table->At(lp) == kNoPage) ++missing;
    }
  }
  return missing;
}

bool CacheManager::CanAllocate(int32_t partition, OwnerId owner, const StepSpan& span) const {
  auto it = owners_.find(owner);
  DSV4_CHECK(it == owners_.end() || it->second.partition == partition);
  for (int g = 0; g < num_groups(); ++g) {
    if (NumMissingPages(owner, g, span) > pool(partition, g).num_free()) return false;
  }
  return true;
}

void CacheManager::Allocate(int32_t partition, OwnerId owner, const StepSpan& span,
                            FreshPages* fresh) {
  auto [it, inserted] = owners_.try_emplace(owner);
  OwnerState& state = it->second;
  if (inserted) {
    state.partition = partition;
    state.tables.resize(groups_.size());
  }
  DSV4_CHECK(state.partition == partition);
  if (fresh != nullptr) fresh->resize(groups_.size());
  for (int g = 0; g < num_groups(); ++g) {
    const std::vector<PageRange> required = group(g).RequiredPages(span);
    if (required.empty()) continue;
    BlockTable& table = state.tables[size_t(g)];
    // Widen the table to cover both what it maps and what is required.
    int64_t begin = required.front().begin;
    int64_t end = required.back().end;
    if (!table.pages.empty()) {
      begin = std::min(begin, table.first_page);
      end = std::max(end, table.end_page());
    }
    BlockTable widened;
    widened.first_page = begin;
    widened.pages.assign(static_cast<size_t>(end - begin), kNoPage);
    for (int64_t lp = table.first_page; lp < table.end_page(); ++lp) {
      widened.pages[size_t(lp - begin)] = table.At(lp);
    }
    PagePool& pages = pool(partition, g);
    for (const PageRange& r : required) {
      for (int64_t lp = r.begin; lp < r.end; ++lp) {
        int32_t& slot = widened.pages[size_t(lp - begin)];
        if (slot != kNoPage) continue;
        slot = pages.Take();  // CHECKs on exhaustion: the query said it fits
        if (fresh != nullptr) (*fresh)[size_t(g)].push_back(slot);
      }
    }
    table = std::move(widened);
  }
}

void CacheManager::Commit(OwnerId owner, int64_t num_computed) {
  auto it = owners_.find(owner);
  DSV4_CHECK(it != owners_.end());
  OwnerState& state = it->second;
  for (int g = 0; g < num_groups(); ++g) {
    BlockTable& table = state.tables[size_t(g)];
    const PageRange live = group(g).LivePages(num_computed);
    PagePool& pages = pool(state.partition, g);
    for (int64_t lp = table.first_page; lp < table.end_page(); ++lp) {
      const int32_t page = table.At(lp);
      if (page != kNoPage && (lp < live.begin || lp >= live.end)) pages.Release(page);
    }
    BlockTable trimmed;
    trimmed.first_page = live.begin;
    for (int64_t lp = live.begin; lp < live.end; ++lp) {
      const int32_t page = table.At(lp);
      DSV4_CHECK_MSG(page != kNoPage, "group {}: live page {} of owner {} is not mapped",
                     group(g).name, lp, owner);
      trimmed.pages.push_back(page);
    }
    table = std::move(trimmed);
  }
}

void CacheManager::Free(OwnerId owner) {
  auto it = owners_.find(owner);
  if (it == owners_.end()) return;
  for (int g = 0; g < num_groups(); ++g) {
    for (int32_t page : it->second.tables[size_t(g)].pages) {
      if (page != kNoPage) pool(it->second.partition, g).Release(page);
    }
  }
  owners_.erase(it);
}

int32_t CacheManager::PartitionOf(OwnerId owner) const {
  auto it = owners_.find(owner);
  DSV4_CHECK(it != owners_.end());
  return it->second.partition;
}

const std::vector<BlockTable>& CacheManager::Tables(OwnerId owner) const {
  auto it = owners_.find(owner);
  DSV4_CHECK(it != owners_.end());
  return it->second.tables;
}

int64_t CacheManager::NumPagesHeld(OwnerId owner, int g) const {
  auto it = owners_.find(owner);
  return it == owners_.end() ? 0 : it->second.tables[size_t(g)].num_mapped();
}

Status CacheManager::CheckInvariants() const {
  for (int32_t p = 0; p < num_partitions_; ++p) {
    for (int g = 0; g < num_groups(); ++g) {
      const PagePool& pages = pool(p, g);
      // Owner of each page, -1 for none.
      std::vector<int64_t> seen(static_cast<size_t>(pages.num_pages()), -1);
      int64_t num_mapped = 0;
      for (const auto& [owner, state] : owners_) {
        if (state.partition != p) continue;
        for (int32_t page : state.tables[size_t(g)].pages) {
          if (page == kNoPage) continue;
          if (page < 0 || page >= pages.num_pages()) {
            return Internal("partition {} group {}: owner {} maps page {} out of range", p,
                            group(g).name, owner, page);
          }
          if (seen[size_t(page)] != -1) {
            return Internal("partition {} group {}: page {} owned by {} and {}", p, group(g).name,
                            page, seen[size_t(page)], owner);
          }
          if (!pages.in_use(page)) {
            return Internal("partition {} group {}: page {} of owner {} is on the free list", p,
                            group(g).name, page, owner);
          }
          seen[size_t(page)] = owner;
          ++num_mapped;
        }
      }
      if (num_mapped + pages.num_free() != pages.num_pages()) {
        return Internal("partition {} group {}: {} mapped + {} free != {} pages (leak)", p,
                        group(g).name, num_mapped, pages.num_free(), pages.num_pages());
      }
    }
  }
  return Status::Ok();
}

bool CacheManager::AllFree() const {
  return std::all_of(pools_.begin(), pools_.end(),
                     [](const PagePool& p) { return p.num_free() == p.num_pages(); });
}

}  // namespace dsv4::cache
