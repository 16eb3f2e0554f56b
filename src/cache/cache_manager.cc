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
  return pool(partition, g).num_available();
}

int64_t CacheManager::num_cached_pages(int32_t partition, int g) const {
  return pool(partition, g).num_cached_unreferenced();
}

Status CacheManager::EnablePrefixCaching(uint64_t salt, int64_t snapshots) {
  DSV4_CHECK(owners_.empty());
  if (snapshots < 0 || snapshots > INT32_MAX) {
    return InvalidArgument("prefix caching: {} snapshots per partition", snapshots);
  }
  std::vector<int> history;
  int32_t page_tokens = 0;
  for (int g = 0; g < num_groups(); ++g) {
    if (group(g).is_ring()) continue;
    if (page_tokens != 0 && group(g).tokens_per_page != page_tokens) {
      return InvalidArgument(
          "prefix caching: full-history groups page {} and {} tokens; one page hash must cover a "
          "page of each",
          page_tokens, group(g).tokens_per_page);
    }
    page_tokens = static_cast<int32_t>(group(g).tokens_per_page);
    history.push_back(g);
  }
  if (history.empty()) return InvalidArgument("prefix caching: no full-history cache group");
  index_ = std::make_unique<PrefixIndex>(page_tokens);
  root_ = RootPageHash(salt);
  history_groups_ = std::move(history);
  names_.assign(pools_.size(), {});
  for (int32_t p = 0; p < num_partitions_; ++p) {
    for (int g = 0; g < num_groups(); ++g) names(p, g).resize(size_t(pool(p, g).num_pages()));
  }
  snapshots_.clear();
  snapshot_names_.clear();
  if (snapshots > 0) {
    for (int32_t p = 0; p < num_partitions_; ++p) {
      snapshots_.emplace_back(snapshots);
      snapshot_names_.emplace_back(static_cast<size_t>(snapshots));
    }
  }
  return Status::Ok();
}

int32_t CacheManager::prefix_page_tokens() const {
  DSV4_CHECK(prefix_caching());
  return index_->page_tokens();
}

CacheManager::PrefixMatch CacheManager::MatchPrefix(int32_t partition,
                                                    std::span<const int32_t> tokens,
                                                    int64_t max_tokens) const {
  PrefixMatch match;
  if (!prefix_caching() || max_tokens <= 0) return match;
  const int64_t per = index_->page_tokens();
  const int64_t n = std::min<int64_t>(static_cast<int64_t>(tokens.size()), max_tokens) / per;
  const std::span<const int32_t> head = tokens.first(static_cast<size_t>(n * per));
  const std::vector<PageHash> hashes = HashFullPages(head, index_->page_tokens(), root_);
  match.entries = index_->Match(root_, hashes, head, partition);
  if (!snapshots_.empty()) {
    // Only a boundary with the rolling state to restore is a hit.
    size_t usable = 0;
    for (size_t i = 0; i < match.entries.size(); ++i) {
      auto it = snapshot_at_.find(match.entries[i]->hash);
      if (it != snapshot_at_.end()) {
        usable = i + 1;
        match.snapshot = it->second;
      }
    }
    match.entries.resize(usable);
  }
  match.num_tokens = static_cast<int64_t>(match.entries.size()) * per;
  return match;
}

void CacheManager::AdoptPrefix(int32_t partition, OwnerId owner, const PrefixMatch& match) {
  DSV4_CHECK(prefix_caching() && !Holds(owner));
  OwnerState& state = owners_[owner];
  state.partition = partition;
  state.tables.resize(groups_.size());
  state.committed = match.num_tokens;
  state.shared_tokens = match.num_tokens;
  if (match.snapshot >= 0) {
    snapshots_[size_t(partition)].Ref(match.snapshot);
    state.restore_snapshot = match.snapshot;
  }
  for (size_t i = 0; i < history_groups_.size(); ++i) {
    const int g = history_groups_[i];
    BlockTable& table = state.tables[size_t(g)];
    for (const PrefixEntry* e : match.entries) {
      DSV4_CHECK(e->partition == partition);
      pool(partition, g).Ref(e->pages[i]);
      table.pages.push_back(e->pages[i]);
    }
  }
}

void CacheManager::PublishPrefix(OwnerId owner, std::span<const int32_t> tokens, int64_t num_pages,
                                 bool snapshot_at_end) {
  if (!prefix_caching() || num_pages <= 0) return;
  auto it = owners_.find(owner);
  DSV4_CHECK(it != owners_.end());
  OwnerState& state = it->second;
  const int64_t per = index_->page_tokens();
  DSV4_CHECK_MSG(num_pages * per <= state.committed && num_pages * per <= int64_t(tokens.size()),
                 "owner {} publishes {} pages with {} positions committed", owner, num_pages,
                 state.committed);
  const std::span<const int32_t> head = tokens.first(static_cast<size_t>(num_pages * per));
  const std::vector<PageHash> hashes = HashFullPages(head, index_->page_tokens(), root_);
  for (int64_t i = 0; i < num_pages; ++i) {
    const PrefixEntry* known = index_->Find(hashes[size_t(i)]);
    if (known != nullptr) continue;  // this page or a collision is indexed: ours stays private
    PrefixEntry e;
    e.hash = hashes[size_t(i)];
    e.parent = i == 0 ? root_ : hashes[size_t(i - 1)];
    e.partition = state.partition;
    e.tokens.assign(head.begin() + i * per, head.begin() + (i + 1) * per);
    for (int g : history_groups_) {
      const int32_t page = state.tables[size_t(g)].At(i);
      DSV4_CHECK_MSG(page != kNoPage, "owner {} has no page {} in group {}", owner, i,
                     group(g).name);
      e.pages.push_back(page);
    }
    for (size_t k = 0; k < history_groups_.size(); ++k) {
      const int g = history_groups_[k];
      pool(state.partition, g).SetCached(e.pages[k], true);
      names(state.partition, g)[size_t(e.pages[k])] = e.hash;
    }
    DSV4_CHECK(index_->Insert(std::move(e)));
  }
  state.shared_tokens = std::max(state.shared_tokens, num_pages * per);
  if (!snapshot_at_end) return;
  DSV4_CHECK_MSG(state.working_snapshot >= 0 && state.working_tokens == num_pages * per,
                 "owner {} publishes a snapshot at {} tokens but holds {} at {}", owner,
                 num_pages * per, state.working_snapshot, state.working_tokens);
  const PageHash& end = hashes[size_t(num_pages - 1)];
  SharedPagePool& ids = snapshots_[size_t(state.partition)];
  // The entry may be another partition's (one copy of a page is indexed):
  // then no hit here can use ours.
  const PrefixEntry* entry = index_->Find(end);
  if (entry != nullptr && entry->partition == state.partition && snapshot_at_.count(end) == 0) {
    ids.SetCached(state.working_snapshot, true);
    snapshot_at_[end] = state.working_snapshot;
    snapshot_names_[size_t(state.partition)][size_t(state.working_snapshot)] = end;
  }
  ReleaseSnapshots(state, /*working=*/true, /*restore=*/false);
}

bool CacheManager::CanTakeSnapshot(int32_t partition) const {
  return !snapshots_.empty() && snapshots_[size_t(partition)].num_available() > 0;
}

bool CacheManager::HasWorkingSnapshot(OwnerId owner) const {
  auto it = owners_.find(owner);
  return it != owners_.end() && it->second.working_snapshot >= 0;
}

int64_t CacheManager::num_free_snapshots(int32_t partition) const {
  return snapshots_.empty() ? 0 : snapshots_[size_t(partition)].num_available();
}

int32_t CacheManager::TakeSnapshot(OwnerId owner, int64_t at_tokens) {
  auto it = owners_.find(owner);
  DSV4_CHECK(it != owners_.end() && !snapshots_.empty());
  OwnerState& state = it->second;
  DSV4_CHECK(at_tokens % index_->page_tokens() == 0);
  state.working_tokens = at_tokens;
  if (state.working_snapshot >= 0) return state.working_snapshot;
  bool evicted = false;
  const int32_t id = snapshots_[size_t(state.partition)].Take(&evicted);
  if (evicted) {
    snapshot_at_.erase(snapshot_names_[size_t(state.partition)][size_t(id)]);
  }
  state.working_snapshot = id;
  return id;
}

void CacheManager::ReleaseSnapshots(OwnerState& state, bool working, bool restore) {
  if (snapshots_.empty()) return;
  SharedPagePool& ids = snapshots_[size_t(state.partition)];
  if (working && state.working_snapshot >= 0) {
    ids.Unref(state.working_snapshot);
    state.working_snapshot = -1;
  }
  if (restore && state.restore_snapshot >= 0) {
    ids.Unref(state.restore_snapshot);
    state.restore_snapshot = -1;
  }
}

int64_t CacheManager::SharedTokens(OwnerId owner) const {
  auto it = owners_.find(owner);
  return it == owners_.end() ? 0 : it->second.shared_tokens;
}

void CacheManager::Evicted(int32_t partition, int g, int32_t page) {
  DSV4_CHECK(prefix_caching());
  const PageHash hash = names(partition, g)[size_t(page)];
  const PrefixEntry* e = index_->Find(hash);
  DSV4_CHECK_MSG(e != nullptr, "evicted page {} of group {} was named by no entry", page,
                 group(g).name);
  for (size_t k = 0; k < history_groups_.size(); ++k) {
    // The evicted page itself is no longer cached (Take cleared it); the
    // others stop being so and become free unless an owner maps them.
    pool(partition, history_groups_[k]).SetCached(e->pages[k], false);
  }
  auto snap = snapshot_at_.find(hash);
  if (snap != snapshot_at_.end()) {  // the boundary is gone: so is its hit
    snapshots_[size_t(partition)].SetCached(snap->second, false);
    snapshot_at_.erase(snap);
  }
  index_->Erase(hash);
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
    if (NumMissingPages(owner, g, span) > pool(partition, g).num_available()) return false;
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
  // Shared pages are full pages strictly before every position a step
  // writes (its rows and drafts): a step never starts inside them.
  DSV4_CHECK_MSG(span.start >= state.shared_tokens,
                 "owner {}: step from {} would write shared positions below {}", owner, span.start,
                 state.shared_tokens);
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
    SharedPagePool& pages = pool(partition, g);
    for (const PageRange& r : required) {
      for (int64_t lp = r.begin; lp < r.end; ++lp) {
        int32_t& slot = widened.pages[size_t(lp - begin)];
        if (slot != kNoPage) continue;
        bool evicted = false;
        slot = pages.Take(&evicted);  // CHECKs on exhaustion: the query said it fits
        if (evicted) Evicted(partition, g, slot);
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
    SharedPagePool& pages = pool(state.partition, g);
    for (int64_t lp = table.first_page; lp < table.end_page(); ++lp) {
      const int32_t page = table.At(lp);
      if (page != kNoPage && (lp < live.begin || lp >= live.end)) pages.Unref(page);
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
  state.committed = num_computed;
  // The step that restored the adopted snapshot is done with it.
  ReleaseSnapshots(state, /*working=*/false, /*restore=*/true);
}

void CacheManager::Free(OwnerId owner) {
  auto it = owners_.find(owner);
  if (it == owners_.end()) return;
  ReleaseSnapshots(it->second, /*working=*/true, /*restore=*/true);
  for (int g = 0; g < num_groups(); ++g) {
    for (int32_t page : it->second.tables[size_t(g)].pages) {
      if (page != kNoPage) pool(it->second.partition, g).Unref(page);
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
      const SharedPagePool& pages = pool(p, g);
      DSV4_RETURN_IF_ERROR(pages.CheckInvariants());
      // Owners mapping each page.
      std::vector<int32_t> mapped(static_cast<size_t>(pages.num_pages()), 0);
      for (const auto& [owner, state] : owners_) {
        if (state.partition != p) continue;
        for (int32_t page : state.tables[size_t(g)].pages) {
          if (page == kNoPage) continue;
          if (page < 0 || page >= pages.num_pages()) {
            return Internal("partition {} group {}: owner {} maps page {} out of range", p,
                            group(g).name, owner, page);
          }
          ++mapped[size_t(page)];
        }
      }
      for (int32_t page = 0; page < pages.num_pages(); ++page) {
        const int32_t refs = pages.refcount(page);
        if (mapped[size_t(page)] != refs) {
          return Internal("partition {} group {}: page {} mapped by {} owners, refcount {}", p,
                          group(g).name, page, mapped[size_t(page)], refs);
        }
        if (!pages.cached(page)) {
          if (refs > 1) {
            return Internal("partition {} group {}: page {} shared by {} owners but not cached", p,
                            group(g).name, page, refs);
          }
          continue;
        }
        if (!prefix_caching()) {
          return Internal("partition {} group {}: page {} cached with prefix caching off", p,
                          group(g).name, page);
        }
        const PrefixEntry* e =
            index_->Find(names_[size_t(p) * groups_.size() + size_t(g)][size_t(page)]);
        const auto k = std::find(history_groups_.begin(), history_groups_.end(), g);
        if (e == nullptr || e->partition != p || k == history_groups_.end() ||
            e->pages[size_t(k - history_groups_.begin())] != page) {
          return Internal("partition {} group {}: cached page {} is not named by its entry", p,
                          group(g).name, page);
        }
      }
    }
  }
  for (size_t p = 0; p < snapshots_.size(); ++p) {
    const SharedPagePool& ids = snapshots_[p];
    DSV4_RETURN_IF_ERROR(ids.CheckInvariants());
    std::vector<int32_t> held(static_cast<size_t>(ids.num_pages()), 0);
    for (const auto& [owner, state] : owners_) {
      if (static_cast<size_t>(state.partition) != p) continue;
      if (state.working_snapshot >= 0) ++held[size_t(state.working_snapshot)];
      if (state.restore_snapshot >= 0) ++held[size_t(state.restore_snapshot)];
    }
    for (int32_t id = 0; id < ids.num_pages(); ++id) {
      if (held[size_t(id)] != ids.refcount(id)) {
        return Internal("partition {}: snapshot {} held by {} owners, refcount {}", p, id,
                        held[size_t(id)], ids.refcount(id));
      }
      if (!ids.cached(id)) continue;
      auto it = snapshot_at_.find(snapshot_names_[p][size_t(id)]);
      const PrefixEntry* e = index_->Find(snapshot_names_[p][size_t(id)]);
      if (it == snapshot_at_.end() || it->second != id || e == nullptr ||
          static_cast<size_t>(e->partition) != p) {
        return Internal("partition {}: published snapshot {} is not its entry's", p, id);
      }
    }
  }
  return Status::Ok();
}

bool CacheManager::AllFree() const {
  return std::all_of(pools_.begin(), pools_.end(),
                     [](const SharedPagePool& p) { return p.num_available() == p.num_pages(); });
}

}  // namespace dsv4::cache
