// Per-sequence state of the whole model: one AttentionCache per main layer
// plus one for the MTP block, all with the same number of sequence slots.
// A slot is one sequence; Reset(slot) starts a fresh one in every layer.
//
// Thread safety: none; one forward at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"
#include "model/attention_cache.h"

namespace dsv4 {

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
  size_t FixedBytesPerSlot() const;

 private:
  std::vector<std::unique_ptr<AttentionCache>> layers_;
  std::unique_ptr<AttentionCache> mtp_;
  int64_t num_slots_;
  std::vector<bool> in_use_;
};

}  // namespace dsv4
