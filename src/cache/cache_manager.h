// Page bookkeeping of all cache groups in all data-parallel partitions
// (architecture decision 2: query, then commit).
//
// Every page of every (partition, group) pool is at any time either on that
// pool's free list or mapped in exactly one owner's block table.  An owner (a
// running request) lives in one partition; its page ids are local to that
// partition's pools (each DP rank has its own namespace starting at 0).
//
// Lifecycle of one step for one owner:
//   CanAllocate(p, owner, span)  -> true   (pure query)
//   Allocate(p, owner, span, &fresh)        (cannot fail after the query)
//   ... the step runs ...
//   Commit(owner, num_computed)             (releases what is no longer live)
// and Free(owner) at finish, abort or preemption.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "cache/block_table.h"
#include "cache/cache_spec.h"
#include "cache/page_pool.h"

namespace dsv4::cache {

// Newly taken pages per group ([num_groups] lists).  Their contents belong to a
// previous owner (or are uninitialised) and must be cleared before this step
// writes them.
using FreshPages = std::vector<std::vector<int32_t>>;

class CacheManager {
 public:
  using OwnerId = int64_t;

  // `pages_per_group[g]` pages in group g of every partition.
  static Result<CacheManager> Create(std::vector<CacheGroupSpec> groups, int32_t num_partitions,
                                     std::vector<int64_t> pages_per_group);

  CacheManager(CacheManager&&) = default;
  CacheManager& operator=(CacheManager&&) = default;
  CacheManager(const CacheManager&) = delete;
  CacheManager& operator=(const CacheManager&) = delete;

  int num_groups() const { return static_cast<int>(groups_.size()); }
  int32_t num_partitions() const { return num_partitions_; }
  const CacheGroupSpec& group(int g) const { return groups_[static_cast<size_t>(g)]; }
  const std::vector<CacheGroupSpec>& groups() const { return groups_; }
  int64_t num_pages(int g) const;
  int64_t num_free_pages(int32_t partition, int g) const;

  // Whether every group of `partition` has the pages `owner` still lacks to run
  // `span`.  REQUIRES: owner is new or already lives in `partition`;
  // span.start equals the num_computed of its last Commit (0 when new).
  bool CanAllocate(int32_t partition, OwnerId owner, const StepSpan& span) const;
  // Pages `owner` lacks in group g for `span`.
  int64_t NumMissingPages(OwnerId owner, int g, const StepSpan& span) const;
  // Maps every page `span` requires.  Page ids taken from the free lists are
  // appended to (*fresh)[g] when `fresh` is non-null.
  // REQUIRES: CanAllocate(partition, owner, span) with no pool change since.
  void Allocate(int32_t partition, OwnerId owner, const StepSpan& span, FreshPages* fresh);
  // After a step: `num_computed` positions of the owner are now valid.  Keeps
  // exactly the live pages (LivePages) and releases the rest (ring pages that
  // fell behind, pages reserved for rejected drafts).
  // REQUIRES: every live page is mapped (it is, when num_computed lies in
  // [span.end - span.num_spec, span.end] of the last Allocate).
  void Commit(OwnerId owner, int64_t num_computed);
  // Releases every page of `owner`.  No-op for an owner holding nothing, so
  // calling it twice releases nothing twice.
  void Free(OwnerId owner);

  bool Holds(OwnerId owner) const { return owners_.count(owner) != 0; }
  int64_t num_owners() const { return static_cast<int64_t>(owners_.size()); }
  // REQUIRES: Holds(owner).
  int32_t PartitionOf(OwnerId owner) const;
  // [num_groups] block tables.  REQUIRES: Holds(owner).
  const std::vector<BlockTable>& Tables(OwnerId owner) const;
  int64_t NumPagesHeld(OwnerId owner, int g) const;

  // Every page is free xor mapped exactly once, by an owner of its partition.
  // Linear in the pool sizes: for tests and debug checks.
  Status CheckInvariants() const;
  // True when every pool is completely free.
  bool AllFree() const;

 private:
  struct OwnerState {
    int32_t partition = 0;
    std::vector<BlockTable> tables;  // [num_groups]
  };
  CacheManager(std::vector<CacheGroupSpec> groups, int32_t num_partitions,
               const std::vector<int64_t>& pages_per_group);
  PagePool& pool(int32_t partition, int g) {
    return pools_[static_cast<size_t>(partition) * groups_.size() + static_cast<size_t>(g)];
  }
  const PagePool& pool(int32_t partition, int g) const {
    return pools_[static_cast<size_t>(partition) * groups_.size() + static_cast<size_t>(g)];
  }

  std::vector<CacheGroupSpec> groups_;
  int32_t num_partitions_ = 0;
  std::vector<PagePool> pools_;  // [num_partitions * num_groups]
  std::unordered_map<OwnerId, OwnerState> owners_;
};

}  // namespace dsv4::cache
