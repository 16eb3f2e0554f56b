#include "model/attention_cache.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>
#include <utility>

#include "base/logging.h"

namespace dsv4::model {
namespace {

// Self-managed page sizes (external caches take page_tokens / ratio).
constexpr int64_t kCsaRowsPerPage = 32;  // one 128-token page of ratio-4 entries
constexpr int64_t kHcaRowsPerPage = 8;   // 1024 tokens of ratio-128 entries

int64_t Coff(int64_t ratio) { return ratio == 4 ? 2 : 1; }
size_t Sz(int64_t v) { return static_cast<size_t>(v); }

}  // namespace

LazyZeroMemory::LazyZeroMemory(size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  // MAP_NORESERVE: the budget was planned against available memory already;
  // untouched pages cost neither RSS nor swap reservation.
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  data_ = p;
}

LazyZeroMemory::~LazyZeroMemory() {
  if (data_ != nullptr) munmap(data_, size_);
}

LazyZeroMemory::LazyZeroMemory(LazyZeroMemory&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

LazyZeroMemory& LazyZeroMemory::operator=(LazyZeroMemory&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr) munmap(data_, size_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

PagedRows::PagedRows(int64_t width, int64_t rows_per_page, int64_t num_slots)
    : width_(width),
      rows_per_page_(rows_per_page),
      external_(false),
      pages_per_chunk_(1),
      tables_(Sz(num_slots)),
      sizes_(Sz(num_slots), 0) {}

PagedRows::PagedRows(int64_t width, int64_t rows_per_page, int64_t num_slots, int64_t num_pages)
    : width_(width),
      rows_per_page_(rows_per_page),
      external_(true),
      num_pages_(num_slots > 0 ? num_pages : 0),
      pages_per_chunk_(std::max<int64_t>(1, num_pages_)),
      tables_(Sz(num_slots)),
      sizes_(Sz(num_slots), 0) {
  DSV4_CHECK(num_pages >= 0 && num_pages <= std::numeric_limits<int32_t>::max());
  if (num_pages_ > 0) {
    pool_ = LazyZeroMemory(pool_bytes());
    chunks_.push_back(static_cast<bf16*>(pool_.data()));
  }
}

bf16* PagedRows::MutablePage(int32_t page) {
  return chunks_[Sz(page / pages_per_chunk_)] + (page % pages_per_chunk_) * width_ * rows_per_page_;
}

const bf16* PagedRows::PageData(int32_t page) const {
  DSV4_CHECK(page >= 0 && page < num_pages_);
  return const_cast<PagedRows*>(this)->MutablePage(page);
}

const bf16* PagedRows::Row(int64_t slot, int64_t i) const {
  DSV4_CHECK(i >= 0 && i < size(slot));
  const int32_t page = tables_[Sz(slot)][Sz(i / rows_per_page_)];
  return const_cast<PagedRows*>(this)->MutablePage(page) + (i % rows_per_page_) * width_;
}

int32_t PagedRows::PageOfRow(int64_t slot, int64_t i) const {
  DSV4_CHECK(i >= 0 && i < size(slot));
  return tables_[Sz(slot)][Sz(i / rows_per_page_)];
}

void PagedRows::AllocateSelfManagedPage(int64_t slot) {
  if (free_pages_.empty()) {
    free_pages_.push_back(static_cast<int32_t>(num_pages_++));
    owned_.emplace_back(page_bytes());
    chunks_.push_back(owned_.back().as<bf16>());
  }
  tables_[Sz(slot)].push_back(free_pages_.back());
  free_pages_.pop_back();
}

bf16* PagedRows::Append(int64_t slot) {
  int64_t& n = sizes_[Sz(slot)];
  const auto& table = tables_[Sz(slot)];
  if (n == static_cast<int64_t>(table.size()) * rows_per_page_) {
    // External tables were checked to cover the call (CheckTable).
    DSV4_CHECK_MSG(!external_, "slot {}: row {} lies outside its {} external pages", slot, n,
                   table.size());
    AllocateSelfManagedPage(slot);
  }
  bf16* row = MutablePage(table[Sz(n / rows_per_page_)]) + (n % rows_per_page_) * width_;
  ++n;
  return row;
}

void PagedRows::Truncate(int64_t slot, int64_t n) {
  DSV4_CHECK(n >= 0 && n <= size(slot));
  sizes_[Sz(slot)] = n;
  if (external_) return;
  auto& table = tables_[Sz(slot)];
  const auto keep = Sz((n + rows_per_page_ - 1) / rows_per_page_);
  while (table.size() > keep) {
    free_pages_.push_back(table.back());
    table.pop_back();
  }
}

void PagedRows::Clear(int64_t slot) {
  auto& table = tables_[Sz(slot)];
  if (!external_) free_pages_.insert(free_pages_.end(), table.rbegin(), table.rend());
  table.clear();
  sizes_[Sz(slot)] = 0;
}

Status PagedRows::CheckTable(int64_t slot, std::span<const int32_t> pages, int64_t keep_rows,
                             int64_t end_rows, const char* what) const {
  if (!external_) return FailedPrecondition("{}: the cache manages its own pages", what);
  const auto need = (end_rows + rows_per_page_ - 1) / rows_per_page_;
  if (static_cast<int64_t>(pages.size()) < need) {
    return FailedPrecondition("{}: slot {} needs {} pages for {} rows, the table has {}", what,
                              slot, need, end_rows, pages.size());
  }
  for (size_t i = 0; i < pages.size(); ++i) {
    if (pages[i] < 0 || pages[i] >= num_pages_) {
      return InvalidArgument("{}: slot {} logical page {} is pool page {}, outside [0, {})", what,
                             slot, i, pages[i], num_pages_);
    }
  }
  const auto& table = tables_[Sz(slot)];
  const auto kept = Sz((std::min(keep_rows, size(slot)) + rows_per_page_ - 1) / rows_per_page_);
  for (size_t i = 0; i < kept; ++i) {
    if (pages[i] != table[i]) {
      return FailedPrecondition("{}: slot {} logical page {} moved from pool page {} to {}", what,
                                slot, i, table[i], pages[i]);
    }
  }
  return Status::Ok();
}

void PagedRows::SetTable(int64_t slot, std::span<const int32_t> pages) {
  DSV4_CHECK(external_);
  tables_[Sz(slot)].assign(pages.begin(), pages.end());
}

void PagedRows::Adopt(int64_t slot, std::span<const int32_t> pages, int64_t rows) {
  DSV4_CHECK(external_ && rows >= 0 && static_cast<int64_t>(pages.size()) * rows_per_page_ >= rows);
  for (int32_t page : pages) DSV4_CHECK(page >= 0 && page < num_pages_);
  tables_[Sz(slot)].assign(pages.begin(), pages.end());
  sizes_[Sz(slot)] = rows;
}

void PagedRows::ClearPage(int32_t page) {
  DSV4_CHECK(external_ && page >= 0 && page < num_pages_);
  std::memset(static_cast<void*>(MutablePage(page)), 0, page_bytes());
}

void PagedRows::FillPool(bf16 value) {
  for (int64_t p = 0; p < num_pages_; ++p) {
    std::fill_n(MutablePage(static_cast<int32_t>(p)), width_ * rows_per_page_, value);
  }
}

namespace {

// The list of one group in one layer: self-managed or from an external pool.
PagedRows MakeRows(const AttentionCacheGeometry& g, int64_t width, int64_t self_rows_per_page,
                   int64_t num_slots, int64_t num_pages) {
  // A list the layer does not have (num_slots 0) stays an empty self-managed one.
  if (g.page_tokens == 0 || num_slots == 0) return PagedRows(width, self_rows_per_page, num_slots);
  DSV4_CHECK_MSG(g.page_tokens % g.compress_ratio == 0, "page of {} tokens for ratio {}",
                 g.page_tokens, g.compress_ratio);
  return PagedRows(width, g.page_tokens / g.compress_ratio, num_slots, num_pages);
}

}  // namespace

AttentionCache::AttentionCache(const AttentionCacheGeometry& geometry, int64_t num_slots)
    : g_(geometry),
      num_slots_(num_slots),
      num_cached_(Sz(num_slots), 0),
      compressed_(MakeRows(geometry, geometry.head_dim,
                           geometry.compress_ratio == 128 ? kHcaRowsPerPage : kCsaRowsPerPage,
                           geometry.compress_ratio != 0 ? num_slots : 0,
                           geometry.compressed_pages)),
      index_keys_(MakeRows(geometry, geometry.index_head_dim, kCsaRowsPerPage,
                           geometry.compress_ratio == 4 ? num_slots : 0, geometry.index_pages)) {
  DSV4_CHECK(g_.ring_capacity >= g_.sliding_window && g_.sliding_window > 0);
  DSV4_CHECK(g_.compress_ratio == 0 || g_.compress_ratio == 4 || g_.compress_ratio == 128);
  const auto slots = Sz(num_slots);
  ring_ = Buffer(slots * Sz(g_.ring_capacity * g_.head_dim) * sizeof(bf16));
  attn_state_kv_ = Buffer(slots * Sz(attn_state_elems()) * sizeof(float));
  attn_state_score_ = Buffer(slots * Sz(attn_state_elems()) * sizeof(float));
  index_state_kv_ = Buffer(slots * Sz(index_state_elems()) * sizeof(float));
  index_state_score_ = Buffer(slots * Sz(index_state_elems()) * sizeof(float));
  for (int64_t s = 0; s < num_slots; ++s) Reset(s);
}

int64_t AttentionCache::AttnStateRows() const {
  return g_.compress_ratio == 0 ? 0 : Coff(g_.compress_ratio) * g_.compress_ratio + slack();
}

int64_t AttentionCache::IndexStateRows() const { return g_.compress_ratio == 4 ? 8 + slack() : 0; }

int64_t AttentionCache::AttnStateElems(const AttentionCacheGeometry& g) {
  if (g.compress_ratio == 0) return 0;
  const int64_t rows =
      Coff(g.compress_ratio) * g.compress_ratio + g.ring_capacity - g.sliding_window;
  return rows * Coff(g.compress_ratio) * g.head_dim;
}

int64_t AttentionCache::IndexStateElems(const AttentionCacheGeometry& g) {
  if (g.compress_ratio != 4) return 0;
  return (8 + g.ring_capacity - g.sliding_window) * 2 * g.index_head_dim;
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

size_t AttentionCache::FixedBytesFor(const AttentionCacheGeometry& g) {
  return Sz(g.ring_capacity * g.head_dim) * sizeof(bf16) +
         2 * Sz(AttnStateElems(g) + IndexStateElems(g)) * sizeof(float);
}

namespace {

// The per-slot buffers of a layer in the order SaveRolling lays them out.
template <typename Cache, typename Fn>
void ForEachRollingBuffer(Cache& c, int64_t slot, int64_t ring_elems, int64_t attn_elems,
                          int64_t index_elems, Fn&& fn) {
  fn(c.RingRow(slot, 0), Sz(ring_elems) * sizeof(bf16));
  if (attn_elems > 0) {
    fn(c.AttnStateKv(slot), Sz(attn_elems) * sizeof(float));
    fn(c.AttnStateScore(slot), Sz(attn_elems) * sizeof(float));
  }
  if (index_elems > 0) {
    fn(c.IndexStateKv(slot), Sz(index_elems) * sizeof(float));
    fn(c.IndexStateScore(slot), Sz(index_elems) * sizeof(float));
  }
}

}  // namespace

void AttentionCache::SaveRolling(int64_t slot, std::span<std::byte> dst) const {
  DSV4_CHECK(slot >= 0 && slot < num_slots_ && dst.size() == FixedBytesPerSlot());
  // The state accessors are non-const only because the forward writes
  // through them; nothing is written here.
  auto& self = const_cast<AttentionCache&>(*this);
  size_t at = 0;
  ForEachRollingBuffer(self, slot, g_.ring_capacity * g_.head_dim, attn_state_elems(),
                       index_state_elems(), [&](const void* p, size_t n) {
                         std::memcpy(dst.data() + at, p, n);
                         at += n;
                       });
  DSV4_CHECK(at == dst.size());
}

void AttentionCache::RestoreRolling(int64_t slot, std::span<const std::byte> src,
                                    int64_t num_tokens, int64_t num_compressed,
                                    int64_t num_index_keys,
                                    std::span<const int32_t> compressed_pages,
                                    std::span<const int32_t> index_pages) {
  DSV4_CHECK(slot >= 0 && slot < num_slots_ && src.size() == FixedBytesPerSlot());
  DSV4_CHECK(external_pages() || (num_compressed == 0 && num_index_keys == 0));
  Reset(slot);
  size_t at = 0;
  ForEachRollingBuffer(*this, slot, g_.ring_capacity * g_.head_dim, attn_state_elems(),
                       index_state_elems(), [&](void* p, size_t n) {
                         std::memcpy(p, src.data() + at, n);
                         at += n;
                       });
  DSV4_CHECK(at == src.size());
  num_cached_[Sz(slot)] = num_tokens;
  if (g_.compress_ratio != 0 && external_pages()) {
    compressed_.Adopt(slot, compressed_pages, num_compressed);
  }
  if (g_.compress_ratio == 4 && external_pages()) {
    index_keys_.Adopt(slot, index_pages, num_index_keys);
  }
}

namespace {

// Row width of pooled `group` in a layer of `g`, 0 when the layer has no such
// list.
int64_t HistoryWidth(const AttentionCacheGeometry& g, cache::Dsv4Group group) {
  switch (group) {
    case cache::kGroupCmpC4:
      return g.compress_ratio == 4 ? g.head_dim : 0;
    case cache::kGroupCmpC128:
      return g.compress_ratio > 4 ? g.head_dim : 0;
    case cache::kGroupIdx:
      return g.compress_ratio == 4 ? g.index_head_dim : 0;
    default:
      return 0;
  }
}

const char* PagesName(cache::Dsv4Group group) {
  switch (group) {
    case cache::kGroupCmpC4:
      return "cmp_c4 pages";
    case cache::kGroupCmpC128:
      return "cmp_c128 pages";
    default:
      return "idx pages";
  }
}

}  // namespace

PagedRows* AttentionCache::history(cache::Dsv4Group group) {
  if (HistoryWidth(g_, group) == 0) return nullptr;
  return group == cache::kGroupIdx ? &index_keys_ : &compressed_;
}

const PagedRows* AttentionCache::history(cache::Dsv4Group group) const {
  return const_cast<AttentionCache*>(this)->history(group);
}

size_t AttentionCache::PoolPageBytes(const AttentionCacheGeometry& g, cache::Dsv4Group group) {
  const int64_t width = HistoryWidth(g, group);
  if (width == 0 || g.page_tokens <= 0) return 0;
  return PagedRows::PageBytesFor(width, g.page_tokens / g.compress_ratio);
}

Status AttentionCache::CheckPages(const SequenceSlice& s) const {
  for (cache::Dsv4Group group : kPooledGroups) {
    const PagedRows* rows = history(group);
    const std::span<const int32_t> table = s.pages.tables[Sz(group)];
    const std::span<const int32_t> fresh = s.pages.fresh[Sz(group)];
    const bool given = !table.empty() || !fresh.empty();
    if (rows == nullptr || (!external_pages() && !given)) continue;
    const int64_t ratio = g_.compress_ratio;
    DSV4_RETURN_IF_ERROR(rows->CheckTable(s.cache_slot, table, s.start_pos / ratio,
                                          (s.start_pos + s.num_tokens) / ratio, PagesName(group)));
    for (int32_t page : fresh) {
      if (page < 0 || page >= rows->num_pages()) {
        return InvalidArgument("{}: fresh page {} outside [0, {})", PagesName(group), page,
                               rows->num_pages());
      }
    }
  }
  return Status::Ok();
}

void AttentionCache::ApplyPages(const SequenceSlice& s) {
  if (!external_pages()) return;
  for (cache::Dsv4Group group : kPooledGroups) {
    const auto g = Sz(group);
    PagedRows* rows = history(group);
    if (rows == nullptr) continue;
    // A previous owner's rows are in a fresh page; the model writes every row
    // before reading it, so this is hygiene, not what correctness rests on
    // (a page-addressed kernel reading whole pages would need it).
    for (int32_t page : s.pages.fresh[g]) rows->ClearPage(page);
    rows->SetTable(s.cache_slot, s.pages.tables[g]);
  }
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

}  // namespace dsv4::model
