// Per-sequence state of one DeepSeek-V4 attention layer (docs/model.md
// "Per-sequence state (`AttentionCache`)"), for a fixed number of sequence slots.
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
//
// Rings and compressor states are per-slot storage sized by need (window + K
// rows, coff*ratio + K rows): a position-addressed ring never needs more, and
// paging it in 128-token pages would cost 2-3x the memory (docs/engine.md §4,
// "per-slot rings").  The growing lists are paged (PagedRows): every row is
// addressed through the slot's page table, which either an internal allocator
// fills on demand (self-managed caches: tests, golden checks, bare loops) or
// the scheduler sets from its block tables each step (external pages: the
// engine's fixed pools, page ids = the scheduler's page ids of the cmp_c4 /
// cmp_c128 / idx groups).
//
// Byte counts per slot (d = head_dim, di = index_head_dim, cap = ring_capacity):
//   fixed (FixedBytesPerSlot): ring 2*cap*d; ratio 4: + 2 states of [8, 2d]
//   FP32 (128*d) + 2 indexer states of [8, 2di] FP32 (128*di); ratio 128: + 2
//   states of [128, d] FP32 (1024*d); plus the slack rows of each state.
//   Growing: ratio 4: 2*d + 2*di bytes per 4 tokens; ratio 128: 2*d per 128
//   tokens; in whole pages (self-managed: 32 rows for ratio 4, 8 for ratio
//   128; external: page_tokens / ratio rows).
//   Flash (d 512, di 128, cap 128): CSA 128 KiB + 80 KiB fixed, 1280 B per 4
//   tokens; HCA 128 KiB + 512 KiB fixed, 1 KiB per 128 tokens.
//
// Thread safety: none; one forward at a time per cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "model/forward_batch.h"
#include "tensor/numeric.h"
#include "tensor/tensor.h"

namespace dsv4::model {

// Anonymous zero-filled memory that the OS backs on first touch (mmap), so a
// pool planned for gigabytes costs resident memory only for the pages
// requests have written.  Move-only.
class LazyZeroMemory {
 public:
  LazyZeroMemory() = default;
  // Throws std::bad_alloc when the address space cannot be reserved.
  explicit LazyZeroMemory(size_t bytes);
  ~LazyZeroMemory();
  LazyZeroMemory(LazyZeroMemory&& other) noexcept;
  LazyZeroMemory& operator=(LazyZeroMemory&& other) noexcept;
  LazyZeroMemory(const LazyZeroMemory&) = delete;
  LazyZeroMemory& operator=(const LazyZeroMemory&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

// Growing per-slot lists of fixed-width BF16 rows in pages of rows_per_page
// rows.  Row i of a slot is row i % rows_per_page of page table[i /
// rows_per_page]; one addressing path for both ways of owning the pages:
//   * self-managed: the pool grows one page at a time and an internal free
//     list fills the tables on Append (pages return on Truncate / Clear);
//   * external: a fixed pool of num_pages pages (lazily backed, zero until
//     written); the owner of the page ids sets each slot's table (SetTable,
//     after CheckTable) before the rows it covers are appended, and clears
//     pages it hands out anew (ClearPage).  Truncate / Clear only shrink the
//     row count; the page ids stay the owner's business.
class PagedRows {
 public:
  // Self-managed.
  PagedRows(int64_t width, int64_t rows_per_page, int64_t num_slots);
  // External pages: a fixed pool of num_pages pages.
  PagedRows(int64_t width, int64_t rows_per_page, int64_t num_slots, int64_t num_pages);
  PagedRows(const PagedRows&) = delete;
  PagedRows& operator=(const PagedRows&) = delete;

  bool external() const { return external_; }
  int64_t width() const { return width_; }
  int64_t rows_per_page() const { return rows_per_page_; }
  int64_t size(int64_t slot) const { return sizes_[static_cast<size_t>(slot)]; }
  // Row i of the slot.  REQUIRES: i < size(slot).  Stable until the row is
  // truncated away or its page is given to another slot.
  const bf16* Row(int64_t slot, int64_t i) const;
  // Pool page holding row i of the slot (introspection, tests).
  int32_t PageOfRow(int64_t slot, int64_t i) const;
  const std::vector<int32_t>& table(int64_t slot) const {
    return tables_[static_cast<size_t>(slot)];
  }
  // Appends one (uninitialized) row and returns it.  REQUIRES (external): the
  // slot's table covers size(slot) + 1 rows.
  bf16* Append(int64_t slot);
  // Keeps the first n rows (n <= size).  Self-managed: pages past them go back
  // to the free list.
  void Truncate(int64_t slot, int64_t n);
  // Drops the slot's rows and its table (self-managed: pages to the free list).
  void Clear(int64_t slot);

  // ---- External pages. ----
  // Whether `pages` can replace the slot's table for a call that keeps the
  // first keep_rows rows and grows the list to end_rows: every id in [0,
  // num_pages), enough pages for end_rows, and the pages of the kept rows
  // unchanged.  InvalidArgument / FailedPrecondition naming `what` otherwise.
  Status CheckTable(int64_t slot, std::span<const int32_t> pages, int64_t keep_rows,
                    int64_t end_rows, const char* what) const;
  // REQUIRES: CheckTable passed.
  void SetTable(int64_t slot, std::span<const int32_t> pages);
  // Prefix-cache hit: the slot's list becomes `rows` rows that already lie in
  // `pages` (another sequence wrote them).  REQUIRES: external, every id in
  // range, pages cover rows.
  void Adopt(int64_t slot, std::span<const int32_t> pages, int64_t rows);
  // Zeroes one page.  REQUIRES: 0 <= page < num_pages().
  void ClearPage(int32_t page);

  // Pages in the pool (self-managed: allocated so far).
  int64_t num_pages() const { return num_pages_; }
  size_t page_bytes() const { return PageBytesFor(width_, rows_per_page_); }
  static size_t PageBytesFor(int64_t width, int64_t rows_per_page) {
    return static_cast<size_t>(width * rows_per_page) * sizeof(bf16);
  }
  // Bytes reserved for the pool (external: all of it, resident or not).
  size_t pool_bytes() const { return static_cast<size_t>(num_pages_) * page_bytes(); }
  // [rows_per_page, width] of one pool page (tests inspect pool contents).
  const bf16* PageData(int32_t page) const;
  // Tests: overwrites every pool page with `value` (poisoning).
  void FillPool(bf16 value);

 private:
  bf16* MutablePage(int32_t page);
  void AllocateSelfManagedPage(int64_t slot);

  int64_t width_;
  int64_t rows_per_page_;
  bool external_;
  int64_t num_pages_ = 0;
  // Page p lives in chunk p / pages_per_chunk_ at offset p % pages_per_chunk_:
  // one chunk holding the whole pool (external), one chunk per page
  // (self-managed, so pages never move while the pool grows).
  int64_t pages_per_chunk_;
  std::vector<bf16*> chunks_;
  LazyZeroMemory pool_;                       // external
  std::vector<Buffer> owned_;                 // self-managed, one per page
  std::vector<int32_t> free_pages_;           // self-managed
  std::vector<std::vector<int32_t>> tables_;  // [slot] -> page ids
  std::vector<int64_t> sizes_;                // [slot] -> rows
};

struct AttentionCacheGeometry {
  int64_t head_dim = 0;        // d
  int64_t sliding_window = 0;  // W
  int64_t ring_capacity = 0;   // >= W
  int64_t compress_ratio = 0;  // 0, 4 or 128
  int64_t index_head_dim = 0;  // only used when compress_ratio == 4
  // Full-history rows: 0 = self-managed pages; > 0 = external fixed pools
  // whose pages cover page_tokens source positions (a multiple of the ratio:
  // page_tokens / ratio rows per page, the scheduler's rows_per_page).
  int64_t page_tokens = 0;
  int64_t compressed_pages = 0;  // external: pool pages of the compressed rows
  int64_t index_pages = 0;       // external: pool pages of the indexer keys (ratio 4)
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
  // compressor states kv = 0 / score = -inf (docs/model.md "Decisions where the
  // reference is silent", item 3).
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
  // The counts after `tokens` positions (a row is emitted when its block is
  // complete).
  int64_t NumCompressedFor(int64_t tokens) const {
    return g_.compress_ratio != 0 ? tokens / g_.compress_ratio : 0;
  }
  int64_t NumIndexKeysFor(int64_t tokens) const { return g_.compress_ratio == 4 ? tokens / 4 : 0; }
  // Bytes a slot holds independent of its length (ring + compressor states).
  size_t FixedBytesPerSlot() const { return FixedBytesFor(g_); }
  static size_t FixedBytesFor(const AttentionCacheGeometry& geometry);

  // ---- Prefix caching (docs/engine.md §7.2). ----
  // Copies the slot's rolling state (ring rows, then the attention and
  // indexer compressor states) into dst, FixedBytesPerSlot() bytes.
  void SaveRolling(int64_t slot, std::span<std::byte> dst) const;
  // Makes the slot what a sequence was when SaveRolling ran: rolling state
  // from src, num_tokens cached, the compressed rows and indexer keys adopted
  // from the given tables (external pages).  REQUIRES: src holds
  // FixedBytesPerSlot() bytes; the tables cover the rows (ModelCache checks).
  void RestoreRolling(int64_t slot, std::span<const std::byte> src, int64_t num_tokens,
                      int64_t num_compressed, int64_t num_index_keys,
                      std::span<const int32_t> compressed_pages,
                      std::span<const int32_t> index_pages);

  // ---- Pages of the growing lists. ----
  bool external_pages() const { return g_.page_tokens > 0; }
  // The list of pooled `group` (kPooledGroups) in this layer, or null when the
  // layer has none (window-only layers; kGroupIdx on ratio-128 layers; any
  // group that is not pooled).
  PagedRows* history(cache::Dsv4Group group);
  const PagedRows* history(cache::Dsv4Group group) const;
  // Bytes of one external pool page of `group` in a layer of `geometry`
  // (page_tokens > 0), 0 when such a layer has no list of the group.  The
  // pools are sized by it and Model::DeclareCache prices pages with it.
  static size_t PoolPageBytes(const AttentionCacheGeometry& geometry, cache::Dsv4Group group);
  // Whether slice s's pages fit this layer (external caches: s.pages covers
  // every row kept after the rewind to s.start_pos and every row the call
  // appends, ids in range, kept rows' pages unchanged; self-managed caches:
  // s.pages is empty).  Errors name the layer's group; nothing is changed.
  Status CheckPages(const SequenceSlice& s) const;
  // Zeroes s.pages.fresh and installs s.pages.tables for the slot.
  // REQUIRES: CheckPages(s) passed.  No-op for self-managed caches.
  void ApplyPages(const SequenceSlice& s);

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
  static int64_t AttnStateElems(const AttentionCacheGeometry& g);  // per slot, per buffer
  static int64_t IndexStateElems(const AttentionCacheGeometry& g);
  int64_t attn_state_elems() const { return AttnStateElems(g_); }
  int64_t index_state_elems() const { return IndexStateElems(g_); }

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

}  // namespace dsv4::model
