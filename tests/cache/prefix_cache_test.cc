// Prefix-caching bookkeeping: page hashes (stable, chained), the shared page
// pool (refcounts, cached pages on an LRU, eviction only of unreferenced
// cached pages) against a reference model, the index's verification (a hash
// collision or a foreign parent is a miss), and a randomized simulation of
// requests sharing prefixes over one small pool with every invariant checked
// after every operation.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "cache/prefix_hash.h"
#include "cache/prefix_index.h"
#include "cache/shared_page_pool.h"

namespace dsv4::testing {
namespace {

// RootPageHash(0x1234) and HashPage(it, {0, 1, 2, 128000, -1, 7}).
constexpr uint64_t kPinnedRootLo = 3182782907271382320ULL;
constexpr uint64_t kPinnedRootHi = 4542031371685860337ULL;
constexpr uint64_t kPinnedPageLo = 2107503264570747367ULL;
constexpr uint64_t kPinnedPageHi = 11883352218107866498ULL;

std::vector<int32_t> Iota(int32_t n, int32_t first) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = first + i;
  return v;
}

TEST(PrefixHashTest, ChainsFullPagesOnly) {
  const cache::PageHash root = cache::RootPageHash(7);
  const std::vector<int32_t> tokens = Iota(10, 100);
  const std::vector<cache::PageHash> h = cache::HashFullPages(tokens, 4, root);
  ASSERT_EQ(h.size(), 2u);  // the 2 trailing tokens make no page
  EXPECT_EQ(h[0], cache::HashPage(root, std::span<const int32_t>(tokens).subspan(0, 4)));
  EXPECT_EQ(h[1], cache::HashPage(h[0], std::span<const int32_t>(tokens).subspan(4, 4)));
  EXPECT_NE(h[0], h[1]);
}

TEST(PrefixHashTest, EveryLaterPageDependsOnEveryEarlierToken) {
  const cache::PageHash root = cache::RootPageHash(7);
  std::vector<int32_t> tokens = Iota(12, 5);
  const std::vector<cache::PageHash> a = cache::HashFullPages(tokens, 4, root);
  tokens[1] += 1;
  const std::vector<cache::PageHash> b = cache::HashFullPages(tokens, 4, root);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NE(a[i], b[i]) << i;
  tokens[1] -= 1;
  EXPECT_EQ(cache::HashFullPages(tokens, 4, root), a);
  // Another salt (another model or cache configuration): nothing is shared.
  const std::vector<cache::PageHash> c = cache::HashFullPages(tokens, 4, cache::RootPageHash(8));
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NE(a[i], c[i]) << i;
}

TEST(PrefixHashTest, StableAcrossProcessesAndBuilds) {
  // Pinned values: the byte layout (tags, parent, little-endian ids) and
  // XXH3-128 are fixed, so another process, build or host computes the same
  // hashes; a change here silently invalidates every hash a peer computed.
  const cache::PageHash root = cache::RootPageHash(0x1234);
  const cache::PageHash h = cache::HashPage(root, std::vector<int32_t>{0, 1, 2, 128000, -1, 7});
  EXPECT_EQ(root.lo, kPinnedRootLo);
  EXPECT_EQ(root.hi, kPinnedRootHi);
  EXPECT_EQ(h.lo, kPinnedPageLo);
  EXPECT_EQ(h.hi, kPinnedPageHi);
}

// A reference model of SharedPagePool: refcounts, cached flags, the free
// set and the LRU order as plain containers.
struct PoolModel {
  std::vector<int32_t> refs;
  std::vector<bool> cached;
  std::vector<int32_t> free;  // stack
  std::deque<int32_t> lru;    // front = least recently released
  explicit PoolModel(int32_t n) : refs(size_t(n), 0), cached(size_t(n), false) {
    for (int32_t p = n - 1; p >= 0; --p) free.push_back(p);
  }
  int64_t available() const { return int64_t(free.size() + lru.size()); }
  int32_t Take(bool* evicted) {
    int32_t p;
    if (!free.empty()) {
      p = free.back();
      free.pop_back();
      *evicted = false;
    } else {
      p = lru.front();
      lru.pop_front();
      cached[size_t(p)] = false;
      *evicted = true;
    }
    refs[size_t(p)] = 1;
    return p;
  }
  void Ref(int32_t p) {
    if (refs[size_t(p)] == 0) lru.erase(std::find(lru.begin(), lru.end(), p));
    ++refs[size_t(p)];
  }
  void Unref(int32_t p) {
    if (--refs[size_t(p)] > 0) return;
    if (cached[size_t(p)]) {
      lru.push_back(p);
    } else {
      free.push_back(p);
    }
  }
  void SetCached(int32_t p, bool c) {
    if (cached[size_t(p)] == c) return;
    cached[size_t(p)] = c;
    if (!c && refs[size_t(p)] == 0) {
      lru.erase(std::find(lru.begin(), lru.end(), p));
      free.push_back(p);
    }
  }
};

TEST(SharedPagePoolTest, MatchesTheReferenceModelUnderRandomOperations) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    const int32_t n = 1 + int32_t(rng() % 12);
    cache::SharedPagePool pool(n);
    PoolModel model(n);
    for (int step = 0; step < 2000; ++step) {
      const int32_t p = int32_t(rng() % uint32_t(n));
      switch (rng() % 4) {
        case 0:
          if (model.available() > 0) {
            bool e1 = false, e2 = false;
            ASSERT_EQ(pool.Take(&e1), model.Take(&e2)) << seed << " " << step;
            ASSERT_EQ(e1, e2);
          }
          break;
        case 1:
          if (model.refs[size_t(p)] > 0 || model.cached[size_t(p)]) {
            pool.Ref(p);
            model.Ref(p);
          }
          break;
        case 2:
          if (model.refs[size_t(p)] > 0) {
            pool.Unref(p);
            model.Unref(p);
          }
          break;
        default:
          if (model.refs[size_t(p)] > 0) {  // an index names the page, or stops naming it
            const bool c = (rng() % 2) != 0;
            pool.SetCached(p, c);
            model.SetCached(p, c);
          } else if (model.cached[size_t(p)] && rng() % 2 == 0) {  // dropped while on the LRU
            pool.SetCached(p, false);
            model.SetCached(p, false);
          }
      }
      ASSERT_TRUE(pool.CheckInvariants().ok()) << pool.CheckInvariants().ToString();
      ASSERT_EQ(pool.num_available(), model.available());
      ASSERT_EQ(pool.num_cached_unreferenced(), int64_t(model.lru.size()));
      for (int32_t q = 0; q < n; ++q) {
        ASSERT_EQ(pool.refcount(q), model.refs[size_t(q)]);
        ASSERT_EQ(pool.cached(q), model.cached[size_t(q)]);
      }
    }
  }
}

TEST(SharedPagePoolTest, EvictsOnlyUnreferencedCachedPagesLeastRecentFirst) {
  cache::SharedPagePool pool(3);
  bool evicted = false;
  const int32_t a = pool.Take(&evicted);
  const int32_t b = pool.Take(&evicted);
  const int32_t c = pool.Take(&evicted);
  for (int32_t p : {a, b, c}) pool.SetCached(p, true);
  pool.Unref(b);  // released first: evicted first
  pool.Unref(a);
  // c is still referenced: never a candidate.
  EXPECT_EQ(pool.Take(&evicted), b);
  EXPECT_TRUE(evicted);
  EXPECT_FALSE(pool.cached(b));
  pool.Ref(a);  // a prefix hit takes a back off the LRU
  EXPECT_EQ(pool.num_available(), 0);
  pool.Unref(a);
  EXPECT_EQ(pool.Take(&evicted), a);
  EXPECT_TRUE(evicted);
  EXPECT_TRUE(pool.CheckInvariants().ok());
}

cache::PrefixEntry Entry(const std::vector<cache::PageHash>& hashes, const cache::PageHash& root,
                         size_t i, const std::vector<int32_t>& tokens, int32_t per, int32_t page) {
  cache::PrefixEntry e;
  e.hash = hashes[i];
  e.parent = i == 0 ? root : hashes[i - 1];
  e.tokens.assign(tokens.begin() + long(i) * per, tokens.begin() + long(i + 1) * per);
  e.pages = {page};
  return e;
}

TEST(PrefixIndexTest, MatchesTheLongestVerifiedPrefix) {
  constexpr int32_t kPer = 4;
  const cache::PageHash root = cache::RootPageHash(1);
  const std::vector<int32_t> a = Iota(14, 10);  // 3 full pages
  const std::vector<cache::PageHash> ha = cache::HashFullPages(a, kPer, root);
  cache::PrefixIndex index(kPer);
  for (size_t i = 0; i < ha.size(); ++i)
    ASSERT_TRUE(index.Insert(Entry(ha, root, i, a, kPer, 40 + int(i))));
  EXPECT_FALSE(index.Insert(Entry(ha, root, 0, a, kPer, 99)));  // a second copy stays unshared

  std::vector<const cache::PrefixEntry*> hits = index.Match(root, ha, a, -1);
  ASSERT_EQ(hits.size(), 3u);
  EXPECT_EQ(hits[2]->pages[0], 42);

  // Diverging in page 1: only page 0 hits.
  std::vector<int32_t> b = a;
  b[5] = 7;
  EXPECT_EQ(index.Match(root, cache::HashFullPages(b, kPer, root), b, -1).size(), 1u);
  // Another salt: nothing.
  const cache::PageHash other = cache::RootPageHash(2);
  EXPECT_TRUE(index.Match(other, cache::HashFullPages(a, kPer, other), a, -1).empty());
  // Partition filter.
  EXPECT_TRUE(index.Match(root, ha, a, 1).empty());
  EXPECT_EQ(index.Match(root, ha, a, 0).size(), 3u);
}

TEST(PrefixIndexTest, ACollisionIsAMissNeverAnotherRequestsCache) {
  constexpr int32_t kPer = 4;
  const cache::PageHash root = cache::RootPageHash(1);
  const std::vector<int32_t> a = Iota(8, 10);
  const std::vector<cache::PageHash> ha = cache::HashFullPages(a, kPer, root);
  cache::PrefixIndex index(kPer);
  // A foreign entry stored under a's page-0 hash (as a collision would):
  // other tokens.
  cache::PrefixEntry forged = Entry(ha, root, 0, a, kPer, 1);
  forged.tokens[2] += 1;
  ASSERT_TRUE(index.Insert(forged));
  EXPECT_TRUE(index.Match(root, ha, a, -1).empty());
  // Right tokens but a foreign parent: a miss too.
  index.Erase(ha[0]);
  cache::PrefixEntry orphan = Entry(ha, root, 0, a, kPer, 1);
  orphan.parent = cache::RootPageHash(3);
  ASSERT_TRUE(index.Insert(orphan));
  EXPECT_TRUE(index.Match(root, ha, a, -1).empty());
}

// Requests drawn from a few shared prefixes run over one small pool the way
// the cache manager uses it: match (Ref the hits), Take the rest (an evicted
// page leaves the index), register every full computed page, finish (Unref).
// Invariants after every operation: the pool's own, every index entry names a
// cached page and every cached page is named by exactly one entry, a running
// request's page is never evicted, and a hit's pages hold what the request
// would have computed (the simulated content is the page hash).
TEST(PrefixCacheSimulationTest, SharedPrefixesUnderEvictionKeepEveryInvariant) {
  constexpr int32_t kPer = 4;
  constexpr int32_t kPages = 24;
  const cache::PageHash root = cache::RootPageHash(9);
  std::mt19937 rng(5);
  std::vector<std::vector<int32_t>> stems;
  for (int s = 0; s < 4; ++s) stems.push_back(Iota(kPer * (1 + s % 3), 1000 * (s + 1)));

  cache::SharedPagePool pool(kPages);
  cache::PrefixIndex index(kPer);
  std::vector<cache::PageHash> content(kPages);  // what each page holds
  std::map<int32_t, cache::PageHash> named;      // cached page -> its entry's hash
  struct Running {
    std::vector<int32_t> pages;
  };
  std::map<int, Running> running;
  int next_id = 0;
  int64_t hits = 0, evictions = 0;

  auto check = [&] {
    ASSERT_TRUE(pool.CheckInvariants().ok());
    int64_t cached = 0;
    for (int32_t p = 0; p < kPages; ++p) cached += pool.cached(p) ? 1 : 0;
    ASSERT_EQ(cached, index.size());
    for (const auto& [page, hash] : named) {
      const cache::PrefixEntry* e = index.Find(hash);
      ASSERT_NE(e, nullptr);
      ASSERT_EQ(e->pages[0], page);
      ASSERT_TRUE(pool.cached(page));
      ASSERT_EQ(content[size_t(page)], hash);
    }
    for (const auto& [id, r] : running) {
      for (int32_t p : r.pages) ASSERT_GT(pool.refcount(p), 0);
    }
  };

  for (int op = 0; op < 3000; ++op) {
    if (running.size() < 3 && (rng() % 2 == 0 || running.empty())) {
      std::vector<int32_t> tokens = stems[rng() % stems.size()];
      const int extra = int(rng() % 10);
      for (int i = 0; i < extra; ++i) tokens.push_back(int32_t(rng() % 50));
      const std::vector<cache::PageHash> hashes = cache::HashFullPages(tokens, kPer, root);
      const auto needed = int64_t((tokens.size() + kPer - 1) / kPer);
      std::vector<const cache::PrefixEntry*> hit = index.Match(root, hashes, tokens, -1);
      if (int64_t(hit.size()) + pool.num_available() < needed) continue;  // would not fit
      Running r;
      for (const cache::PrefixEntry* e : hit) {
        ASSERT_EQ(content[size_t(e->pages[0])], e->hash);  // the hit holds that page
        pool.Ref(e->pages[0]);
        r.pages.push_back(e->pages[0]);
      }
      hits += int64_t(hit.size());
      for (int64_t i = int64_t(hit.size()); i < needed; ++i) {
        bool evicted = false;
        const int32_t p = pool.Take(&evicted);
        if (evicted) {
          ++evictions;
          index.Erase(named.at(p));
          named.erase(p);
        }
        r.pages.push_back(p);
        // "Compute" the page, then register it if it is full.
        if (size_t(i) < hashes.size()) {
          content[size_t(p)] = hashes[size_t(i)];
          cache::PrefixEntry e;
          e.hash = hashes[size_t(i)];
          e.parent = i == 0 ? root : hashes[size_t(i - 1)];
          e.tokens.assign(tokens.begin() + i * kPer, tokens.begin() + (i + 1) * kPer);
          e.pages = {p};
          if (index.Insert(std::move(e))) {
            pool.SetCached(p, true);
            named[p] = hashes[size_t(i)];
          }
        } else {
          content[size_t(p)] = cache::PageHash{};  // a partial page: never shared
        }
      }
      running[next_id++] = std::move(r);
    } else if (!running.empty()) {
      auto it = running.begin();
      std::advance(it, long(rng() % running.size()));
      for (int32_t p : it->second.pages) pool.Unref(p);
      running.erase(it);
    }
    check();
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GT(hits, 100);      // prefixes were shared
  EXPECT_GT(evictions, 10);  // and the pool was tight enough to evict
}

}  // namespace
}  // namespace dsv4::testing
