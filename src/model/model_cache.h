// Per-sequence state of the whole model: one AttentionCache per main layer
// plus one for the MTP block, all with the same number of sequence slots.
// A slot is one sequence; Reset(slot) starts a fresh one in every layer.
//
// Storage (docs/model.md "Caches"): rings and compressor states are per slot
// in every mode.  The growing lists (compressed KV rows, indexer keys) are
// paged: self-managed caches (Model::NewCache(num_slots, options)) allocate
// pages on demand; caches with external pages (NewCache with CachePools, the
// engine) hold one fixed pool per layer and group, in which page id p means
// the same page of every layer of the group, and each forward's SlicePages
// say which pages a sequence's rows live in (the scheduler's block tables).
//
// Thread safety: none; one forward at a time.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "model/attention_cache.h"

namespace dsv4::model {

// Everything a slot holds outside the page pools at one moment: the rolling
// state (window rings, compressor states) of every layer and the MTP block,
// and per layer the counts of cached tokens, compressed rows and indexer keys.
// Restoring it next to the pages the rows lie in gives back that slot
// byte for byte (prefix caching, docs/engine.md §7.2).
struct SlotSnapshot {
  std::vector<int64_t> counts;   // 3 per layer (main layers, then MTP): tokens, compressed, keys
  std::vector<std::byte> bytes;  // FixedBytesPerSlot()
  int64_t num_tokens() const { return counts.empty() ? 0 : counts.front(); }
};

class ModelCache {
 public:
  // Made by Model::NewCache.  mtp may be null (model loaded without MTP).
  ModelCache(std::vector<std::unique_ptr<AttentionCache>> layers,
             std::unique_ptr<AttentionCache> mtp, int64_t num_slots);
  ModelCache(const ModelCache&) = delete;
  ModelCache& operator=(const ModelCache&) = delete;

  int64_t num_slots() const { return num_slots_; }
  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }

  // Fresh sequence in slot (main layers and MTP).
  void Reset(int64_t slot);
  // Fresh MTP state only (e.g. to rebuild the MTP window from stored streams).
  void ResetMtp(int64_t slot);

  // Simple slot allocator for callers that do not manage slots themselves:
  // a free slot, already Reset, or ResourceExhausted.
  Result<int64_t> AcquireSlot();
  // Returns an acquired slot to the free list.
  void ReleaseSlot(int64_t slot);

  // Tokens the main model has processed in slot (all main layers agree).
  int64_t NumCachedTokens(int64_t slot) const;
  int64_t NumMtpCachedTokens(int64_t slot) const;

  // layer in [0, num_layers()) for main layers; num_layers() is the MTP block.
  AttentionCache& layer(int64_t layer);
  const AttentionCache& layer(int64_t layer) const;
  bool has_mtp() const { return mtp_ != nullptr; }

  // Bytes held per slot independent of sequence length, over all layers.
  // Also the size of one SlotSnapshot.
  size_t FixedBytesPerSlot() const;

  // ---- Prefix caching (docs/engine.md §7.2). ----
  // Copies the slot's rolling state and counts into *out (reusing its memory).
  void SaveSlot(int64_t slot, SlotSnapshot* out) const;
  // Makes `slot` the snapshotted sequence, its compressed rows and indexer
  // keys adopted from `tables` (pooled groups; the pages another sequence
  // wrote them in).  The restored rows must fill whole pages in every layer:
  // a shared page is never written again, and a partly filled one would be
  // (its next rows are the restoring sequence's own).  InvalidArgument (and
  // the slot untouched) for a self-managed cache, a snapshot of another
  // cache's shape, a table that does not cover the rows, an id out of range
  // or a partly filled page.
  Status RestoreSlot(int64_t slot, const SlotSnapshot& snapshot,
                     const std::array<std::span<const int32_t>, cache::kNumDsv4Groups>& tables);

  // Whether the growing lists live in external page pools.
  bool external_pages() const;
  // Bytes of one page of pooled `group` summed over every layer that has the
  // group (Model::DeclareCache computes the same from the geometries).
  size_t PageBytes(cache::Dsv4Group group) const;
  // Pool pages of pooled `group` (external: fixed; self-managed: allocated so
  // far, per layer).  0 when no layer has the group.
  int64_t NumPoolPages(cache::Dsv4Group group) const;
  // Bytes allocated: per-slot state of every slot plus every page pool
  // (external pools count in full, resident or not).
  size_t AllocatedBytes() const;
  // Tests: overwrites every page of every pool with `value`.
  void FillPools(bf16 value);

 private:
  std::vector<std::unique_ptr<AttentionCache>> layers_;
  std::unique_ptr<AttentionCache> mtp_;
  int64_t num_slots_;
  std::vector<bool> in_use_;
};

}  // namespace dsv4::model
