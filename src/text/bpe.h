// Byte-level BPE over raw bytes (HF tokenizers model type "BPE").
//
// Vocabulary entries and merges are held as raw byte strings (the byte-level
// alphabet is undone at load), so a pre-token is encoded straight from its
// bytes.  Merge priority is the merge's position in the file ("rank"); the
// lowest-ranked adjacent pair is merged first, leftmost on ties — the order
// HF's BPE::merge_word applies.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"

namespace dsv4::text {

// Open-addressing map from byte strings (views into storage owned by the
// caller, which must outlive the map) to int32 values.
class StringIdMap {
 public:
  void Build(const std::vector<std::pair<std::string_view, int32_t>>& entries);
  // -1 when absent.
  int32_t Find(std::string_view key) const;

 private:
  // 16 bytes; the hash tag rejects almost every non-matching probe without
  // touching the key bytes.
  struct Slot {
    const char* data = nullptr;
    uint32_t tag = 0;  // high 32 bits of the key's hash
    int32_t value = -1;
  };
  static bool KeyEquals(const Slot& s, std::string_view key);
  std::vector<uint32_t> sizes_;  // [slots] key sizes (kept out of the hot slot)
  std::vector<Slot> slots_;
  uint64_t mask_ = 0;
};

uint64_t HashBytes(std::string_view s);

class BpeModel {
 public:
  struct Merge {
    int32_t left;
    int32_t right;
    int32_t merged;
  };

  // `token_bytes[id]` is the raw byte string of base-vocabulary entry `id`
  // (empty = no entry).  Every single byte must be a vocabulary entry: with
  // no byte fallback and no unk token that is what makes encoding total.
  static Result<std::unique_ptr<BpeModel>> Create(std::vector<std::string> token_bytes,
                                                  const std::vector<Merge>& merges,
                                                  bool ignore_merges);

  BpeModel(const BpeModel&) = delete;
  BpeModel& operator=(const BpeModel&) = delete;

  // Appends the ids of one pre-token.  Thread-safe.
  void EncodePiece(std::string_view piece, std::vector<int32_t>& out) const;

  // Base-vocabulary id of exactly these bytes, or -1.
  int32_t Find(std::string_view bytes) const { return vocab_.Find(bytes); }
  const std::string& TokenBytes(int32_t id) const { return token_bytes_[id]; }
  int32_t num_ids() const { return static_cast<int32_t>(token_bytes_.size()); }

 private:
  BpeModel() = default;

  struct MergeSlot {
    uint64_t key = ~0ull;  // (left << 32) | right
    int32_t rank = 0;
    int32_t merged = 0;
  };
  // Returns the slot of pair (left, right) or nullptr.
  const MergeSlot* FindMerge(int32_t left, int32_t right) const;
  void MergeSmall(std::string_view piece, std::vector<int32_t>& out) const;
  void MergeLarge(std::string_view piece, std::vector<int32_t>& out) const;
  void MergeUncached(std::string_view piece, std::vector<int32_t>& out) const;

  std::vector<std::string> token_bytes_;  // [num_ids]
  StringIdMap vocab_;
  // Ids whose own bytes BPE-encode to exactly that one id: a lock-free cache
  // that covers most words of natural text.  -1 where that is not the case.
  StringIdMap self_tokens_;
  std::vector<MergeSlot> merges_;
  uint64_t merge_mask_ = 0;
  std::array<int32_t, 256> byte_ids_{};
  bool ignore_merges_ = false;

  // Cache for pre-tokens that encode to several ids, sharded so concurrent
  // encoders rarely contend.  Bounded: a full shard is cleared.
  struct PieceHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return HashBytes(s); }
  };
  struct CacheShard {
    Mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>, PieceHash, std::equal_to<>> map
        GUARDED_BY(mu);
  };
  static constexpr int kNumShards = 16;
  static constexpr size_t kMaxShardEntries = 8192;
  static constexpr size_t kMaxCachedPieceBytes = 64;
  mutable std::array<CacheShard, kNumShards> cache_;
};

}  // namespace dsv4::text
