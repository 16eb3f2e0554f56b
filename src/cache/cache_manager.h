// Page bookkeeping of all cache groups in all data-parallel partitions
// (architecture decision 2: query, then commit).
//
// Every page of every (partition, group) pool is at any time free, mapped by
// as many owners as its reference count, or (prefix caching) cached: named by
// the prefix index with no owner, reusable at any time (SharedPagePool).
// Without prefix caching a page is mapped by at most one owner.  An owner (a
// running request) lives in one partition; its page ids are local to that
// partition's pools (each DP rank has its own namespace starting at 0).
//
// Lifecycle of one step for one owner:
//   CanAllocate(p, owner, span)  -> true   (pure query)
//   Allocate(p, owner, span, &fresh)        (cannot fail after the query)
//   ... the step runs ...
//   Commit(owner, num_computed)             (releases what is no longer live)
// and Free(owner) at finish, abort or preemption.
//
// Prefix caching (docs/engine.md §7): PublishPrefix names an owner's full
// pages of full-history groups in the index; MatchPrefix finds the longest
// verified published prefix of a token sequence; AdoptPrefix starts a new
// owner on those pages (shared by reference count).  Shared pages lie
// strictly before the owner's first write: Allocate CHECKs it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "cache/block_table.h"
#include "cache/cache_spec.h"
#include "cache/prefix_index.h"
#include "cache/shared_page_pool.h"

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
  // Pages an Allocate can take: free plus cached-but-unreferenced ones.
  int64_t num_free_pages(int32_t partition, int g) const;
  // Of those, the cached ones (0 without prefix caching).
  int64_t num_cached_pages(int32_t partition, int g) const;

  // ---- Prefix caching. ----
  // Turns it on: every full-history group must have the same tokens_per_page
  // (one page hash covers a page of each).  `salt` stands for what else
  // changes a page (model fingerprint, cache options): RootPageHash(salt).
  // `snapshots` per partition: ids of rolling-state snapshots (docs/engine.md
  // §7.2) the runner keeps; with snapshots > 0 a hit must end where a
  // snapshot was published, with 0 pages alone make a hit (a backend whose
  // rings are paged too; tests).  REQUIRES: no owner yet.
  Status EnablePrefixCaching(uint64_t salt, int64_t snapshots = 0);
  bool prefix_caching() const { return index_ != nullptr; }
  // Tokens of one page (prefix caching on).
  int32_t prefix_page_tokens() const;
  struct PrefixMatch {
    int64_t num_tokens = 0;                   // a multiple of prefix_page_tokens()
    std::vector<const PrefixEntry*> entries;  // page order
    int32_t snapshot = -1;  // the snapshot at num_tokens to restore (-1: none needed)
  };
  // The longest verified published prefix of `tokens` in `partition`, of at
  // most max_tokens tokens (whole pages), ending where a snapshot is
  // published when snapshots are in use.  Empty without prefix caching.
  PrefixMatch MatchPrefix(int32_t partition, std::span<const int32_t> tokens,
                          int64_t max_tokens) const;
  // A new owner starts with the match's pages in every full-history group
  // (one more reference each) and match.num_tokens computed positions; ring
  // groups start empty (their state comes from a snapshot, which the owner
  // holds until its first Commit: the step that restores it).  REQUIRES:
  // !Holds(owner); `match` from MatchPrefix(partition, ...) with no pool
  // change since.
  void AdoptPrefix(int32_t partition, OwnerId owner, const PrefixMatch& match);
  // Names the owner's first num_pages full pages of every full-history group
  // in the index (tokens: at least num_pages pages of the owner's sequence).
  // Pages whose hash is indexed already stay unshared.  REQUIRES: the
  // owner's committed positions cover them (they are complete and never
  // written again).
  // With `snapshot_at_end`, the owner's working snapshot (TakeSnapshot at
  // num_pages pages) is published with page num_pages - 1 (or released when
  // that page has one already: it holds the same state).
  void PublishPrefix(OwnerId owner, std::span<const int32_t> tokens, int64_t num_pages,
                     bool snapshot_at_end = false);
  // Snapshot ids (snapshots > 0).  An owner's working snapshot: the id the
  // runner saves the owner's rolling state into after the step that ends at
  // `at_tokens` (a page boundary); taken from the free ids or by evicting the
  // least recently used published one (its hit goes).  An owner has at most
  // one: a second call re-targets it.
  bool CanTakeSnapshot(int32_t partition) const;
  int32_t TakeSnapshot(OwnerId owner, int64_t at_tokens);
  // Whether snapshot ids are in use (EnablePrefixCaching with snapshots > 0).
  bool uses_snapshots() const { return !snapshots_.empty(); }
  // Whether the owner holds a working snapshot (TakeSnapshot, not yet
  // published or released).
  bool HasWorkingSnapshot(OwnerId owner) const;
  int64_t num_free_snapshots(int32_t partition) const;
  // Positions below which the owner's pages may be shared (adopted or
  // published); its steps start at or after it.
  int64_t SharedTokens(OwnerId owner) const;

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

  // Every page is free, cached or mapped by exactly refcount owners of its
  // partition (at most one without prefix caching); cached pages are exactly
  // those the index names, each by the entry that lists it.  Linear in the
  // pool sizes: for tests and debug checks.
  Status CheckInvariants() const;
  // True when every pool is completely free.
  bool AllFree() const;

 private:
  struct OwnerState {
    int32_t partition = 0;
    std::vector<BlockTable> tables;  // [num_groups]
    int64_t committed = 0;           // num_computed of the last Commit / AdoptPrefix
    int64_t shared_tokens = 0;       // see SharedTokens
    int32_t working_snapshot = -1;   // TakeSnapshot
    int64_t working_tokens = 0;
    int32_t restore_snapshot = -1;  // AdoptPrefix, until the first Commit
  };
  void ReleaseSnapshots(OwnerState& state, bool working, bool restore);
  // A page of (partition, group) came off the LRU: its entry goes, and the
  // entry's pages in the other groups stop being cached.
  void Evicted(int32_t partition, int g, int32_t page);
  std::vector<PageHash>& names(int32_t partition, int g) {
    return names_[static_cast<size_t>(partition) * groups_.size() + static_cast<size_t>(g)];
  }
  CacheManager(std::vector<CacheGroupSpec> groups, int32_t num_partitions,
               const std::vector<int64_t>& pages_per_group);
  SharedPagePool& pool(int32_t partition, int g) {
    return pools_[static_cast<size_t>(partition) * groups_.size() + static_cast<size_t>(g)];
  }
  const SharedPagePool& pool(int32_t partition, int g) const {
    return pools_[static_cast<size_t>(partition) * groups_.size() + static_cast<size_t>(g)];
  }

  std::vector<CacheGroupSpec> groups_;
  int32_t num_partitions_ = 0;
  std::vector<SharedPagePool> pools_;  // [num_partitions * num_groups]
  std::unordered_map<OwnerId, OwnerState> owners_;
  // Prefix caching (null when off).  history_groups_: the full-history group
  // ids, in the order of PrefixEntry::pages.  names_[p * G + g][page]: the
  // hash of the entry naming the page (valid while the page is cached).
  std::unique_ptr<PrefixIndex> index_;
  PageHash root_;
  std::vector<int> history_groups_;
  std::vector<std::vector<PageHash>> names_;
  // Snapshots: one id pool per partition, the published id of an entry, and
  // per (partition, id) the entry hash it is published with.
  std::vector<SharedPagePool> snapshots_;
  std::unordered_map<PageHash, int32_t, PageHashHasher> snapshot_at_;
  std::vector<std::vector<PageHash>> snapshot_names_;
};

}  // namespace dsv4::cache
