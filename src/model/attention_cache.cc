#include "model/attention_cache.h"

#include <algorithm>
#include <limits>

#include "base/logging.h"

namespace dsv4 {
namespace {

constexpr int64_t kCsaRowsPerPage = 32;  // one 128-token page of ratio-4 entries
constexpr int64_t kHcaRowsPerPage = 8;   // 1024 tokens of ratio-128 entries

int64_t Coff(int64_t ratio) { return ratio == 4 ? 2 : 1; }

}  // namespace

PagedRows::PagedRows(int64_t width, int64_t rows_per_page, int64_t num_slots)
    : width_(width),
      rows_per_page_(rows_per_page),
      tables_(static_cast<size_t>(num_slots)),
      sizes_(static_cast<size_t>(num_slots), 0) {}

const bf16* PagedRows::Row(int64_t slot, int64_t i) const {
  DSV4_CHECK(i >= 0 && i < size(slot));
  const auto& table = tables_[static_cast<size_t>(slot)];
  const Buffer& page = pages_[static_cast<size_t>(table[static_cast<size_t>(i / rows_per_page_)])];
  return page.as<bf16>() + (i % rows_per_page_) * width_;
}

bf16* PagedRows::Append(int64_t slot) {
  auto& table = tables_[static_cast<size_t>(slot)];
  int64_t& n = sizes_[static_cast<size_t>(slot)];
  if (n == static_cast<int64_t>(table.size()) * rows_per_page_) {
    if (free_pages_.empty()) {
      free_pages_.push_back(static_cast<int32_t>(pages_.size()));
      pages_.emplace_back(page_bytes());
    }
    table.push_back(free_pages_.back());
    free_pages_.pop_back();
  }
  Buffer& page = pages_[static_cast<size_t>(table[static_cast<size_t>(n / rows_per_page_)])];
  bf16* row = page.as<bf16>() + (n % rows_per_page_) * width_;
  ++n;
  return row;
}

void PagedRows::Truncate(int64_t slot, int64_t n) {
  auto& table = tables_[static_cast<size_t>(slot)];
  DSV4_CHECK(n >= 0 && n <= size(slot));
  const auto keep = static_cast<size_t>((n + rows_per_page_ - 1) / rows_per_page_);
  while (table.size() > keep) {
    free_pages_.push_back(table.back());
    table.pop_back();
  }
  sizes_[static_cast<size_t>(slot)] = n;
}

void PagedRows::Clear(int64_t slot) {
  auto& table = tables_[static_cast<size_t>(slot)];
  free_pages_.insert(free_pages_.end(), table.rbegin(), table.rend());
  table.clear();
  sizes_[static_cast<size_t>(slot)] = 0;
}

AttentionCache::AttentionCache(const AttentionCacheGeometry& geometry, int64_t num_slots)
    : g_(geometry),
      num_slots_(num_slots),
      num_cached_(static_cast<size_t>(num_slots), 0),
      compressed_(geometry.head_dim,
                  geometry.compress_ratio == 128 ? kHcaRowsPerPage : kCsaRowsPerPage,
                  geometry.compress_ratio != 0 ? num_slots : 0),
      index_keys_(geometry.index_head_dim, kCsaRowsPerPage,
                  geometry.compress_ratio == 4 ? num_slots : 0) {
  DSV4_CHECK(g_.ring_capacity >= g_.sliding_window && g_.sliding_window > 0);
  DSV4_CHECK(g_.compress_ratio == 0 || g_.compress_ratio == 4 || g_.compress_ratio == 128);
  const auto slots = static_cast<size_t>(num_slots);
  ring_ = Buffer(slots * static_cast<size_t>(g_.ring_capacity * g_.head_dim) * sizeof(bf16));
  attn_state_kv_ = Buffer(slots * static_cast<size_t>(attn_state_elems()) * sizeof(float));
  attn_state_score_ = Buffer(slots * static_cast<size_t>(attn_state_elems()) * sizeof(float));
  index_state_kv_ = Buffer(slots * static_cast<size_t>(index_state_elems()) * sizeof(float));
  index_state_score_ = Buffer(slots * static_cast<size_t>(index_state_elems()) * sizeof(float));
  for (int64_t s = 0; s < num_slots; ++s) Reset(s);
}

int64_t AttentionCache::AttnStateRows() const {
  return g_.compress_ratio == 0 ? 0 : Coff(g_.compress_ratio) * g_.compress_ratio + slack();
}

int64_t AttentionCache::IndexStateRows() const { return g_.compress_ratio == 4 ? 8 + slack() : 0; }

int64_t AttentionCache::attn_state_elems() const {
  if (g_.compress_ratio == 0) return 0;
  return AttnStateRows() * Coff(g_.compress_ratio) * g_.head_dim;
}

int64_t AttentionCache::index_state_elems() const {
  return g_.compress_ratio == 4 ? IndexStateRows() * 2 * g_.index_head_dim : 0;
}

bool AttentionCache::CanContinueAt(int64_t slot, int64_t start_pos) const {
  const int64_t cached = NumCachedTokens(slot);
  return start_pos >= 0 && start_pos <= cached && cached - start_pos <= slack();
}

void AttentionCache::Rewind(int64_t slot, int64_t start_pos) {
  DSV4_CHECK(CanContinueAt(slot, start_pos));
  num_cached_[static_cast<size_t>(slot)] = start_pos;
  if (g_.compress_ratio != 0) {
    const int64_t keep = start_pos / g_.compress_ratio;
    if (compressed_.size(slot) > keep) compressed_.Truncate(slot, keep);
  }
  if (g_.compress_ratio == 4 && index_keys_.size(slot) > start_pos / 4) {
    index_keys_.Truncate(slot, start_pos / 4);
  }
}

void AttentionCache::Reset(int64_t slot) {
  DSV4_CHECK(slot >= 0 && slot < num_slots_);
  num_cached_[static_cast<size_t>(slot)] = 0;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (g_.compress_ratio != 0) {
    const int64_t n = attn_state_elems();
    std::fill_n(AttnStateKv(slot), n, 0.0f);
    std::fill_n(AttnStateScore(slot), n, kNegInf);
    compressed_.Clear(slot);
  }
  if (g_.compress_ratio == 4) {
    const int64_t n = index_state_elems();
    std::fill_n(IndexStateKv(slot), n, 0.0f);
    std::fill_n(IndexStateScore(slot), n, kNegInf);
    index_keys_.Clear(slot);
  }
}

int64_t AttentionCache::NumCompressed(int64_t slot) const {
  return g_.compress_ratio != 0 ? compressed_.size(slot) : 0;
}

int64_t AttentionCache::NumIndexKeys(int64_t slot) const {
  return g_.compress_ratio == 4 ? index_keys_.size(slot) : 0;
}

size_t AttentionCache::FixedBytesPerSlot() const {
  return static_cast<size_t>(g_.ring_capacity * g_.head_dim) * sizeof(bf16) +
         2 * static_cast<size_t>(attn_state_elems() + index_state_elems()) * sizeof(float);
}

bf16* AttentionCache::RingRow(int64_t slot, int64_t pos) {
  return ring_.as<bf16>() + (slot * g_.ring_capacity + pos % g_.ring_capacity) * g_.head_dim;
}

const bf16* AttentionCache::RingRow(int64_t slot, int64_t pos) const {
  return ring_.as<bf16>() + (slot * g_.ring_capacity + pos % g_.ring_capacity) * g_.head_dim;
}

float* AttentionCache::AttnStateKv(int64_t slot) {
  return attn_state_kv_.as<float>() + slot * attn_state_elems();
}
float* AttentionCache::AttnStateScore(int64_t slot) {
  return attn_state_score_.as<float>() + slot * attn_state_elems();
}
float* AttentionCache::IndexStateKv(int64_t slot) {
  return index_state_kv_.as<float>() + slot * index_state_elems();
}
float* AttentionCache::IndexStateScore(int64_t slot) {
  return index_state_score_.as<float>() + slot * index_state_elems();
}

}  // namespace dsv4
