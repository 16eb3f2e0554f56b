// Per-sequence state of one DeepSeek-V4 attention layer (model.md §5), for a
// fixed number of sequence slots.
//
// Per slot it holds
//   * the raw-KV window ring: ring_capacity rows of head_dim BF16, position p
//     in row p mod ring_capacity (ring_capacity >= sliding_window; slack above
//     the window lets a caller re-run the last ring_capacity - sliding_window
//     positions, e.g. after a rejected speculative token, on window-only layers);
//   * compressed layers (ratio 4 / 128): the attention compressor state
//     (FP32 kv and score, [coff*ratio, coff*head_dim] each) and the growing list
//     of compressed KV rows (entry t covers positions ratio*t .. ratio*t+ratio-1);
//   * CSA layers (ratio 4): the indexer compressor state ([8, 2*index_head_dim]
//     each) and the growing list of indexer keys (index_head_dim BF16 per entry).
// Growing lists live in per-layer pools of fixed-size pages addressed through
// a per-slot page table (the shape of the paged cache groups of serving.md
// §4), so row addresses are stable while a list grows.
//
// Byte counts per slot (d = head_dim, di = index_head_dim, cap = ring_capacity):
//   fixed (FixedBytesPerSlot): ring 2*cap*d; ratio 4: + 2 states of [8, 2d]
//   FP32 (128*d) + 2 indexer states of [8, 2di] FP32 (128*di); ratio 128: + 2
//   states of [128, d] FP32 (1024*d); plus the slack rows of each state.
//   Growing: ratio 4: 2*d + 2*di bytes per 4 tokens; ratio 128: 2*d per 128
//   tokens; allocated in whole pages (32 rows for ratio 4, 8 for ratio 128).
//   Flash (d 512, di 128, cap 128): CSA 128 KiB + 80 KiB fixed, 1280 B per 4
//   tokens; HCA 128 KiB + 512 KiB fixed, 1 KiB per 128 tokens.
//
// Thread safety: none; one forward at a time per cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tensor/numeric.h"
#include "tensor/tensor.h"

namespace dsv4 {

// Growing per-slot lists of fixed-width BF16 rows kept in pages of
// rows_per_page rows drawn from one per-layer pool.
class PagedRows {
 public:
  PagedRows(int64_t width, int64_t rows_per_page, int64_t num_slots);
  PagedRows(const PagedRows&) = delete;
  PagedRows& operator=(const PagedRows&) = delete;

  int64_t width() const { return width_; }
  int64_t size(int64_t slot) const { return sizes_[static_cast<size_t>(slot)]; }
  // Row i of the slot.  REQUIRES: i < size(slot).  Stable until Clear(slot).
  const bf16* Row(int64_t slot, int64_t i) const;
  // Appends one (uninitialized) row and returns it.
  bf16* Append(int64_t slot);
  // Keeps the first n rows (n <= size); freed pages return to the pool.
  void Truncate(int64_t slot, int64_t n);
  // Drops the slot's rows; its pages return to the pool's free list.
  void Clear(int64_t slot);
  int64_t num_pages() const { return static_cast<int64_t>(pages_.size()); }
  size_t page_bytes() const { return static_cast<size_t>(width_ * rows_per_page_) * sizeof(bf16); }

 private:
  int64_t width_;
  int64_t rows_per_page_;
  std::vector<Buffer> pages_;  // the pool
  std::vector<int32_t> free_pages_;
  std::vector<std::vector<int32_t>> tables_;  // [slot] -> page ids
  std::vector<int64_t> sizes_;                // [slot] -> rows
};

struct AttentionCacheGeometry {
  int64_t head_dim = 0;        // d
  int64_t sliding_window = 0;  // W
  int64_t ring_capacity = 0;   // >= W
  int64_t compress_ratio = 0;  // 0, 4 or 128
  int64_t index_head_dim = 0;  // only used when compress_ratio == 4
};

class AttentionCache {
 public:
  // Every slot starts fresh (as after Reset).
  AttentionCache(const AttentionCacheGeometry& geometry, int64_t num_slots);
  AttentionCache(const AttentionCache&) = delete;
  AttentionCache& operator=(const AttentionCache&) = delete;

  const AttentionCacheGeometry& geometry() const { return g_; }
  int64_t num_slots() const { return num_slots_; }

  // Fresh sequence: no cached tokens, no compressed rows or indexer keys,
  // compressor states kv = 0 / score = -inf (model.md §9 item 3).
  void Reset(int64_t slot);
  // Positions 0 .. NumCachedTokens(slot)-1 have been processed.
  int64_t NumCachedTokens(int64_t slot) const { return num_cached_[static_cast<size_t>(slot)]; }
  // Whether the slot can continue at start_pos (see slack above).
  bool CanContinueAt(int64_t slot, int64_t start_pos) const;
  // Forgets positions >= start_pos (compressed rows and indexer keys whose
  // block reaches start_pos).  REQUIRES: CanContinueAt(slot, start_pos).
  void Rewind(int64_t slot, int64_t start_pos);
  // Compressed KV rows / indexer keys emitted so far.
  int64_t NumCompressed(int64_t slot) const;
  int64_t NumIndexKeys(int64_t slot) const;
  // Bytes a slot holds independent of its length (ring + compressor states).
  size_t FixedBytesPerSlot() const;

  // ---- Used by Attention (model/ internals). ----
  bf16* RingRow(int64_t slot, int64_t pos);  // [head_dim]
  const bf16* RingRow(int64_t slot, int64_t pos) const;
  int64_t slack() const { return g_.ring_capacity - g_.sliding_window; }
  int64_t AttnStateRows() const;     // coff*ratio + slack
  int64_t IndexStateRows() const;    // 8 + slack
  float* AttnStateKv(int64_t slot);  // [AttnStateRows(), coff*d]
  float* AttnStateScore(int64_t slot);
  float* IndexStateKv(int64_t slot);  // [IndexStateRows(), 2*di]
  float* IndexStateScore(int64_t slot);
  PagedRows& compressed() { return compressed_; }
  const PagedRows& compressed() const { return compressed_; }
  PagedRows& index_keys() { return index_keys_; }
  const PagedRows& index_keys() const { return index_keys_; }
  void SetNumCachedTokens(int64_t slot, int64_t n) { num_cached_[static_cast<size_t>(slot)] = n; }

 private:
  int64_t attn_state_elems() const;  // per slot, per buffer
  int64_t index_state_elems() const;

  AttentionCacheGeometry g_;
  int64_t num_slots_;
  std::vector<int64_t> num_cached_;
  Buffer ring_;           // [num_slots, ring_capacity, d] BF16
  Buffer attn_state_kv_;  // [num_slots, AttnStateRows(), coff*d] FP32
  Buffer attn_state_score_;
  Buffer index_state_kv_;  // [num_slots, IndexStateRows(), 2*di] FP32
  Buffer index_state_score_;
  PagedRows compressed_;  // width d
  PagedRows index_keys_;  // width di
};

}  // namespace dsv4
