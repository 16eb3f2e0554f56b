#include "text/bpe.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace dsv4::text {

uint64_t HashBytes(std::string_view s) {
  // Word-at-a-time multiply-rotate with a murmur3 finalizer: pre-tokens are
  // short, and open addressing indexes by the low bits, which the finalizer
  // makes depend on every input byte.
  uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = std::rotl((h ^ w) * 0xFF51AFD7ED558CCDull, 29);
  }
  uint64_t tail = 0;
  std::memcpy(&tail, s.data() + i, s.size() - i);
  h ^= tail;
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDull;
  h ^= h >> 33;
  h *= 0xC4CEB9FE1A85EC53ull;
  return h ^ (h >> 33);
}

bool StringIdMap::KeyEquals(const Slot& s, std::string_view key) {
  return std::memcmp(s.data, key.data(), key.size()) == 0;
}

void StringIdMap::Build(const std::vector<std::pair<std::string_view, int32_t>>& entries) {
  size_t cap = 16;
  while (cap < entries.size() * 2) cap <<= 1;
  slots_.assign(cap, Slot{});
  sizes_.assign(cap, 0);
  mask_ = cap - 1;
  for (const auto& [key, value] : entries) {
    const uint64_t h = HashBytes(key);
    const auto tag = static_cast<uint32_t>(h >> 32);
    uint64_t i = h & mask_;
    while (slots_[i].value >= 0) {
      if (slots_[i].tag == tag && sizes_[i] == key.size() && KeyEquals(slots_[i], key)) break;
      i = (i + 1) & mask_;
    }
    slots_[i] = Slot{key.data(), tag, value};
    sizes_[i] = static_cast<uint32_t>(key.size());
  }
}

int32_t StringIdMap::Find(std::string_view key) const {
  if (slots_.empty()) return -1;
  const uint64_t h = HashBytes(key);
  const auto tag = static_cast<uint32_t>(h >> 32);
  uint64_t i = h & mask_;
  while (slots_[i].value >= 0) {
    const Slot& s = slots_[i];
    if (s.tag == tag && sizes_[i] == key.size() && KeyEquals(s, key)) return s.value;
    i = (i + 1) & mask_;
  }
  return -1;
}

namespace {

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

uint64_t MixKey(uint64_t k) {
  k ^= k >> 33;
  k *= 0xFF51AFD7ED558CCDull;
  return k ^ (k >> 29);
}

}  // namespace

Result<std::unique_ptr<BpeModel>> BpeModel::Create(std::vector<std::string> token_bytes,
                                                   const std::vector<Merge>& merges,
                                                   bool ignore_merges) {
  std::unique_ptr<BpeModel> m(new BpeModel());
  m->token_bytes_ = std::move(token_bytes);
  m->ignore_merges_ = ignore_merges;
  std::vector<std::pair<std::string_view, int32_t>> entries;
  entries.reserve(m->token_bytes_.size());
  for (size_t id = 0; id < m->token_bytes_.size(); ++id) {
    if (!m->token_bytes_[id].empty())
      entries.emplace_back(m->token_bytes_[id], static_cast<int32_t>(id));
  }
  m->vocab_.Build(entries);
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    m->byte_ids_[b] = m->vocab_.Find(std::string_view(&c, 1));
    if (m->byte_ids_[b] < 0) {
      return InvalidArgument(
          "tokenizer: byte 0x{:02x} has no vocabulary entry (byte-level BPE "
          "without byte fallback needs all 256)",
          b);
    }
  }
  size_t cap = 16;
  while (cap < merges.size() * 2) cap <<= 1;
  m->merges_.assign(cap, MergeSlot{});
  m->merge_mask_ = cap - 1;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const Merge& mg = merges[rank];
    const uint64_t key = PairKey(mg.left, mg.right);
    uint64_t i = MixKey(key) & m->merge_mask_;
    while (m->merges_[i].key != ~0ull && m->merges_[i].key != key) i = (i + 1) & m->merge_mask_;
    // Real files never repeat a pair; rejecting one avoids guessing which
    // rank the author meant.
    if (m->merges_[i].key == key)
      return InvalidArgument("tokenizer: duplicate merge at rank {}", rank);
    m->merges_[i] = MergeSlot{key, static_cast<int32_t>(rank), mg.merged};
  }
  // The lock-free cache: every vocabulary entry that BPE maps back to itself.
  std::vector<std::pair<std::string_view, int32_t>> self;
  std::vector<int32_t> ids;
  for (const auto& [bytes, id] : entries) {
    ids.clear();
    m->MergeUncached(bytes, ids);
    if (ids.size() == 1 && ids[0] == id) self.emplace_back(bytes, id);
  }
  m->self_tokens_.Build(self);
  return m;
}

const BpeModel::MergeSlot* BpeModel::FindMerge(int32_t left, int32_t right) const {
  const uint64_t key = PairKey(left, right);
  uint64_t i = MixKey(key) & merge_mask_;
  while (true) {
    const MergeSlot& s = merges_[i];
    if (s.key == key) return &s;
    if (s.key == ~0ull) return nullptr;
    i = (i + 1) & merge_mask_;
  }
}

void BpeModel::EncodePiece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (piece.size() == 1) {
    out.push_back(byte_ids_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  const int32_t self = self_tokens_.Find(piece);
  if (self >= 0) {
    out.push_back(self);
    return;
  }
  if (ignore_merges_) {
    const int32_t whole = vocab_.Find(piece);
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
  }
  if (piece.size() > kMaxCachedPieceBytes) {
    MergeUncached(piece, out);
    return;
  }
  CacheShard& shard = cache_[HashBytes(piece) % kNumShards];
  {
    MutexLock lock(&shard.mu);
    auto it = shard.map.find(piece);
    if (it != shard.map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = out.size();
  MergeUncached(piece, out);
  MutexLock lock(&shard.mu);
  if (shard.map.size() >= kMaxShardEntries) shard.map.clear();
  shard.map.emplace(std::string(piece), std::vector<int32_t>(out.begin() + start, out.end()));
}

void BpeModel::MergeUncached(std::string_view piece, std::vector<int32_t>& out) const {
  // The quadratic scan wins on the short pieces that dominate text; long
  // pieces (whitespace runs, base64 blobs) take the O(n log n) heap path.
  if (piece.size() <= 48) {
    MergeSmall(piece, out);
  } else {
    MergeLarge(piece, out);
  }
}

void BpeModel::MergeSmall(std::string_view piece, std::vector<int32_t>& out) const {
  const int n0 = static_cast<int>(piece.size());
  int32_t ids[48];
  int32_t ranks[48];  // ranks[i]: rank of pair (ids[i], ids[i+1]); INT32_MAX if none
  int32_t merged[48];
  int n = n0;
  for (int i = 0; i < n; ++i) ids[i] = byte_ids_[static_cast<uint8_t>(piece[i])];
  auto rank_at = [&](int i) {
    const MergeSlot* s = FindMerge(ids[i], ids[i + 1]);
    ranks[i] = s ? s->rank : INT32_MAX;
    merged[i] = s ? s->merged : -1;
  };
  for (int i = 0; i + 1 < n; ++i) rank_at(i);
  while (n > 1) {
    int best = -1;
    int32_t best_rank = INT32_MAX;
    for (int i = 0; i + 1 < n; ++i) {
      if (ranks[i] < best_rank) {
        best_rank = ranks[i];
        best = i;
      }
    }
    if (best < 0) break;
    ids[best] = merged[best];
    for (int i = best + 1; i + 1 < n; ++i) {
      ids[i] = ids[i + 1];
      ranks[i] = ranks[i + 1];
      merged[i] = merged[i + 1];
    }
    --n;
    if (best + 1 < n) rank_at(best);
    if (best > 0) rank_at(best - 1);
  }
  out.insert(out.end(), ids, ids + n);
}

void BpeModel::MergeLarge(std::string_view piece, std::vector<int32_t>& out) const {
  const int n = static_cast<int>(piece.size());
  struct Sym {
    int32_t id;
    int32_t prev;
    int32_t next;  // -1 at the ends
  };
  std::vector<Sym> syms(n);
  for (int i = 0; i < n; ++i)
    syms[i] = Sym{byte_ids_[static_cast<uint8_t>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1};
  struct Cand {
    int32_t rank;
    int32_t pos;  // index of the left symbol (its byte offset: stable under merges)
    int32_t left;
    int32_t right;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Cand> heap;
  auto push = [&](int pos) {
    const int nx = syms[pos].next;
    if (nx < 0) return;
    const MergeSlot* s = FindMerge(syms[pos].id, syms[nx].id);
    if (!s) return;
    heap.push_back(Cand{s->rank, pos, syms[pos].id, syms[nx].id});
    std::push_heap(heap.begin(), heap.end(), std::greater<>());
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const Cand c = heap.back();
    heap.pop_back();
    Sym& left = syms[c.pos];
    // Stale entry: the left symbol was absorbed (id -1) or a neighbour changed.
    if (left.id != c.left || left.next < 0 || syms[left.next].id != c.right) continue;
    const int right = left.next;
    left.id = FindMerge(c.left, c.right)->merged;
    left.next = syms[right].next;
    if (left.next >= 0) syms[left.next].prev = c.pos;
    syms[right].id = -1;
    if (left.prev >= 0) push(left.prev);
    push(c.pos);
  }
  for (int i = 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
}

}  // namespace dsv4::text
