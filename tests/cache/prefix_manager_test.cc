// Prefix caching in the cache manager (docs/engine.md §7): published full
// pages are found again by their tokens, shared by reference count, kept
// when their owners go (preemption included) and evicted only when an
// allocation needs the memory, taking their index entry with them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cache/cache_manager.h"

namespace dsv4 {
namespace {

constexpr int32_t kPage = 8;

// A ring group (window 8, pages of 4) and two full-history groups with pages
// of 8 tokens (like cmp_c4 and cmp_c128: same tokens, different rows).
std::vector<cache::CacheGroupSpec> Groups() {
  cache::CacheGroupSpec ring;
  ring.name = "ring";
  ring.kind = cache::GroupKind::kRing;
  ring.tokens_per_page = 4;
  ring.align = 1;
  ring.lookback = 7;
  cache::CacheGroupSpec a;
  a.name = "full_a";
  a.kind = cache::GroupKind::kFullHistory;
  a.tokens_per_page = kPage;
  cache::CacheGroupSpec b = a;
  b.name = "full_b";
  return {ring, a, b};
}

cache::CacheManager Make(int32_t partitions, int64_t full_pages, int64_t snapshots = 0) {
  auto cache = cache::CacheManager::Create(Groups(), partitions, {64, full_pages, full_pages});
  EXPECT_TRUE(cache.ok()) << cache.status().ToString();
  cache::CacheManager m = std::move(cache).value();
  EXPECT_TRUE(m.EnablePrefixCaching(42, snapshots).ok());
  return m;
}

std::vector<int32_t> Seq(int n, int32_t first) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = first + i;
  return v;
}

// Runs [start, end) for owner and commits it.
void Step(cache::CacheManager& m, int32_t p, int64_t owner, int64_t start, int64_t end,
          cache::FreshPages* fresh = nullptr) {
  const cache::StepSpan span{start, end, 0};
  ASSERT_TRUE(m.CanAllocate(p, owner, span));
  m.Allocate(p, owner, span, fresh);
  m.Commit(owner, end);
  ASSERT_TRUE(m.CheckInvariants().ok()) << m.CheckInvariants().ToString();
}

TEST(PrefixManagerTest, EnableValidates) {
  auto groups = Groups();
  groups[2].tokens_per_page = 16;
  auto m = cache::CacheManager::Create(groups, 1, {8, 8, 8});
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE(m->EnablePrefixCaching(1).ok());
  EXPECT_FALSE(m->prefix_caching());
  EXPECT_EQ(m->MatchPrefix(0, Seq(40, 0), 40).num_tokens, 0);
}

TEST(PrefixManagerTest, HitSharesPagesAndSurvivesItsOwners) {
  cache::CacheManager m = Make(2, 16);
  const std::vector<int32_t> a = Seq(20, 100);
  Step(m, 0, 1, 0, 20);
  m.PublishPrefix(1, a, 2);  // pages [0, 16)
  EXPECT_EQ(m.SharedTokens(1), 16);

  std::vector<int32_t> b(a.begin(), a.begin() + 16);
  for (int32_t t : Seq(14, 900)) b.push_back(t);
  // At most max_tokens tokens (whole pages); only the publishing partition.
  EXPECT_EQ(m.MatchPrefix(0, b, 15).num_tokens, 8);
  EXPECT_EQ(m.MatchPrefix(1, b, 29).num_tokens, 0);
  std::vector<int32_t> c = b;
  c[9] = 5;  // differs in page 1
  EXPECT_EQ(m.MatchPrefix(0, c, 29).num_tokens, 8);

  const cache::CacheManager::PrefixMatch hit = m.MatchPrefix(0, b, 29);
  ASSERT_EQ(hit.num_tokens, 16);
  m.AdoptPrefix(0, 2, hit);
  ASSERT_TRUE(m.CheckInvariants().ok()) << m.CheckInvariants().ToString();
  for (int g = 1; g <= 2; ++g) {
    EXPECT_EQ(m.Tables(2)[size_t(g)].pages,
              std::vector<int32_t>(m.Tables(1)[size_t(g)].pages.begin(),
                                   m.Tables(1)[size_t(g)].pages.begin() + 2));
  }
  cache::FreshPages fresh;
  Step(m, 0, 2, 16, 30, &fresh);
  for (int g = 1; g <= 2; ++g) {
    ASSERT_EQ(fresh[size_t(g)].size(), 2u);  // pages 2 and 3 only: the shared ones are not fresh
    for (int32_t page : fresh[size_t(g)]) {
      for (int32_t shared : m.Tables(1)[size_t(g)].pages) EXPECT_NE(page, shared);
    }
  }
  // Both owners go (finish, or preemption): the pages stay cached, count as
  // free, and are found again.
  m.Free(1);
  m.Free(2);
  ASSERT_TRUE(m.CheckInvariants().ok());
  EXPECT_TRUE(m.AllFree());
  EXPECT_EQ(m.num_cached_pages(0, 1), 2);
  EXPECT_EQ(m.num_free_pages(0, 1), 16);
  const auto again = m.MatchPrefix(0, a, 19);
  EXPECT_EQ(again.num_tokens, 16);
  m.AdoptPrefix(0, 3, again);
  EXPECT_EQ(m.num_cached_pages(0, 1), 0);  // referenced again: off the LRU
  EXPECT_EQ(m.num_free_pages(0, 1), 14);
  ASSERT_TRUE(m.CheckInvariants().ok());
}

TEST(PrefixManagerTest, EvictionDropsTheEntryAndFreesItsOtherPages) {
  cache::CacheManager m = Make(1, 4);
  const std::vector<int32_t> a = Seq(16, 7);
  Step(m, 0, 1, 0, 16);
  m.PublishPrefix(1, a, 2);
  m.Free(1);
  EXPECT_EQ(m.num_cached_pages(0, 1), 2);
  // Another sequence needs 3 pages: the 2 free ones, then the least recently
  // released cached page (page 0 of the chain: the whole chain is gone).
  Step(m, 0, 2, 0, 24);
  EXPECT_EQ(m.MatchPrefix(0, a, 16).num_tokens, 0);
  ASSERT_TRUE(m.CheckInvariants().ok()) << m.CheckInvariants().ToString();
  m.Free(2);
  ASSERT_TRUE(m.CheckInvariants().ok());
  EXPECT_TRUE(m.AllFree());
}

// With snapshots in use a hit ends where a snapshot was published; the
// adopter holds it until its first commit; a new snapshot evicts the least
// recently released published one, and with it that hit.
TEST(PrefixManagerTest, SnapshotsGateHitsAndAreEvictedLeastRecentFirst) {
  cache::CacheManager m = Make(1, 16, 2);
  const std::vector<int32_t> a = Seq(20, 300);
  std::vector<int32_t> c = a;
  c[12] = 1;  // differs in page 1
  Step(m, 0, 1, 0, 8);
  m.PublishPrefix(1, a, 1);
  EXPECT_EQ(m.MatchPrefix(0, a, 19).num_tokens, 0);  // pages without a snapshot
  const int32_t s8 = m.TakeSnapshot(1, 8);
  m.PublishPrefix(1, a, 1, true);
  Step(m, 0, 1, 8, 16);
  const int32_t s16 = m.TakeSnapshot(1, 16);
  m.PublishPrefix(1, a, 2, true);
  ASSERT_TRUE(m.CheckInvariants().ok()) << m.CheckInvariants().ToString();
  EXPECT_NE(s8, s16);
  EXPECT_EQ(m.num_free_snapshots(0), 2);  // published, unreferenced: reusable
  auto hit = m.MatchPrefix(0, a, 19);
  EXPECT_EQ(hit.num_tokens, 16);
  EXPECT_EQ(hit.snapshot, s16);
  hit = m.MatchPrefix(0, c, 19);
  EXPECT_EQ(hit.num_tokens, 8);
  EXPECT_EQ(hit.snapshot, s8);

  m.AdoptPrefix(0, 2, m.MatchPrefix(0, a, 19));
  EXPECT_EQ(m.num_free_snapshots(0), 1);  // held for the restoring step
  ASSERT_TRUE(m.CheckInvariants().ok()) << m.CheckInvariants().ToString();
  Step(m, 0, 2, 16, 20);
  EXPECT_EQ(m.num_free_snapshots(0), 2);

  // Owner 3 needs a snapshot id: the least recently released published one
  // (s8) goes, and with it the 8-token hit.
  Step(m, 0, 3, 0, 8);
  EXPECT_EQ(m.TakeSnapshot(3, 8), s8);
  EXPECT_EQ(m.MatchPrefix(0, c, 19).num_tokens, 0);
  EXPECT_EQ(m.MatchPrefix(0, a, 19).num_tokens, 16);
  ASSERT_TRUE(m.CheckInvariants().ok()) << m.CheckInvariants().ToString();
  for (int64_t o : {1, 2, 3}) m.Free(o);
  ASSERT_TRUE(m.CheckInvariants().ok());
  EXPECT_EQ(m.num_free_snapshots(0), 2);
}

TEST(PrefixManagerDeathTest, AStepNeverWritesASharedPage) {
  cache::CacheManager m = Make(1, 16);
  const std::vector<int32_t> a = Seq(20, 1);
  Step(m, 0, 1, 0, 20);
  m.PublishPrefix(1, a, 2);
  m.AdoptPrefix(0, 2, m.MatchPrefix(0, a, 19));
  EXPECT_DEATH(m.Allocate(0, 2, cache::StepSpan{8, 12, 0}, nullptr), "shared positions");
  EXPECT_DEATH(m.PublishPrefix(1, a, 3), "publishes 3 pages");
}

// Random owners over prompts drawn from a few shared prefixes, on a pool
// small enough that evictions and preemptions happen.  After every
// operation: the manager's invariants, and a content model: each physical
// page remembers which token prefix wrote it, and every page an owner maps
// (adopted or its own) holds the owner's own prefix.
void RandomOwners(int64_t snapshots) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    std::mt19937 rng(seed);
    const int32_t parts = 1 + static_cast<int32_t>(seed % 2);
    cache::CacheManager m = Make(parts, 24, snapshots);
    // (partition, snapshot id) -> the prefix its state stands for.
    std::map<std::pair<int32_t, int32_t>, std::string> snapshot_content;
    std::vector<std::vector<int32_t>> stems;
    for (int s = 0; s < 4; ++s) stems.push_back(Seq(40, 1000 * (s + 1)));
    struct Owner {
      int32_t partition;
      std::vector<int32_t> tokens;
      int64_t computed;
    };
    std::map<int64_t, Owner> owners;
    // (partition, group, page) -> the tokens that page's content stands for.
    std::map<std::tuple<int32_t, int, int32_t>, std::string> content;
    // A page's tokens and all before it (clipped to the sequence: a page the
    // writer never fills is never checked as full, nor published).
    auto key = [](const std::vector<int32_t>& t, int64_t page) {
      const size_t n = std::min(t.size(), static_cast<size_t>((page + 1) * kPage));
      return std::string(reinterpret_cast<const char*>(t.data()), n * sizeof(int32_t));
    };
    int64_t next_id = 0, hits = 0, hit_tokens = 0, preemptions = 0, evictions = 0;
    for (int op = 0; op < 3000; ++op) {
      const int what = static_cast<int>(rng() % 10);
      if (what < 3 || owners.empty()) {  // admit
        Owner o;
        o.partition = static_cast<int32_t>(rng() % static_cast<uint32_t>(parts));
        const auto& stem = stems[rng() % stems.size()];
        o.tokens.assign(stem.begin(), stem.begin() + 8 + rng() % 33);
        for (uint32_t i = 0, n = rng() % 20; i < n; ++i) o.tokens.push_back(int32_t(rng() % 50));
        const auto match = m.MatchPrefix(o.partition, o.tokens, int64_t(o.tokens.size()) - 1);
        o.computed = match.num_tokens;
        const int64_t id = next_id++;
        if (match.num_tokens > 0 && snapshots > 0) {
          ASSERT_GE(match.snapshot, 0);
          ASSERT_EQ(snapshot_content.at({o.partition, match.snapshot}),
                    std::string(reinterpret_cast<const char*>(o.tokens.data()),
                                size_t(match.num_tokens) * sizeof(int32_t)));
        }
        if (match.num_tokens > 0) {
          m.AdoptPrefix(o.partition, id, match);
          ++hits;
          hit_tokens += match.num_tokens;
        }
        owners[id] = o;
      } else if (what < 4) {  // finish or preempt
        auto it = owners.begin();
        std::advance(it, rng() % owners.size());
        m.Free(it->first);
        owners.erase(it);
      } else {  // a chunk
        auto it = owners.begin();
        std::advance(it, rng() % owners.size());
        Owner& o = it->second;
        int64_t end =
            std::min<int64_t>(int64_t(o.tokens.size()), o.computed + 1 + int64_t(rng() % 12));
        if (snapshots > 0 && rng() % 2 == 0) {  // end on a page boundary (a snapshot point)
          end = std::min<int64_t>(int64_t(o.tokens.size()), (o.computed / kPage + 1) * kPage);
        }
        const cache::StepSpan span{o.computed, end, 0};
        if (o.computed >= int64_t(o.tokens.size())) {
          m.Free(it->first);
          owners.erase(it);
        } else if (!m.CanAllocate(o.partition, it->first, span)) {
          m.Free(it->first);  // preempted: recompute later (here: dropped)
          owners.erase(it);
          ++preemptions;
        } else {
          cache::FreshPages fresh;
          const int64_t cached = m.num_cached_pages(o.partition, 1);
          m.Allocate(o.partition, it->first, span, &fresh);
          // Only an eviction takes a cached page off the LRU here.
          evictions += cached - m.num_cached_pages(o.partition, 1);
          for (int g = 1; g <= 2; ++g) {
            const auto& table = m.Tables(it->first)[size_t(g)];
            for (int32_t page : fresh[size_t(g)]) {
              int64_t lp = table.first_page;
              while (table.At(lp) != page) ++lp;
              content[{o.partition, g, page}] = key(o.tokens, lp);
            }
          }
          m.Commit(it->first, end);
          o.computed = end;
          const int64_t n = o.computed / kPage;
          if (snapshots > 0 && n > 0 && o.computed % kPage == 0 && m.CanTakeSnapshot(o.partition)) {
            const int32_t sid = m.TakeSnapshot(it->first, o.computed);
            snapshot_content[{o.partition, sid}] = key(o.tokens, n - 1);
            m.PublishPrefix(it->first, o.tokens, n, true);
          } else {
            m.PublishPrefix(it->first, o.tokens, n);
          }
        }
      }
      ASSERT_TRUE(m.CheckInvariants().ok())
          << "seed " << seed << " op " << op << ": " << m.CheckInvariants().ToString();
      for (const auto& [id, o] : owners) {
        if (!m.Holds(id)) continue;
        for (int g = 1; g <= 2; ++g) {
          const auto& table = m.Tables(id)[size_t(g)];
          for (int64_t lp = 0; lp < o.computed / kPage; ++lp) {
            ASSERT_EQ(content.at({o.partition, g, table.At(lp)}), key(o.tokens, lp))
                << "seed " << seed << " op " << op << " owner " << id << " page " << lp;
          }
        }
      }
    }
    EXPECT_GT(hits, snapshots > 0 ? 30 : 100) << "seed " << seed;
    EXPECT_GT(preemptions, 0) << "seed " << seed;
    EXPECT_GT(evictions, 0) << "seed " << seed;
    std::printf(
        "snapshots %lld seed %u: %lld hits (%lld tokens), %lld preemptions, %lld evictions\n",
        static_cast<long long>(snapshots), seed, static_cast<long long>(hits),
        static_cast<long long>(hit_tokens), static_cast<long long>(preemptions),
        static_cast<long long>(evictions));
    for (const auto& [id, o] : owners) m.Free(id);
    EXPECT_TRUE(m.AllFree());
    ASSERT_TRUE(m.CheckInvariants().ok());
  }
}

TEST(PrefixManagerTest, RandomOwnersKeepEveryInvariantAndSeeOnlyTheirOwnPrefix) { RandomOwners(0); }

// The same with 6 snapshot ids per partition: hits end at published
// snapshots whose state stands for exactly the matched prefix.
TEST(PrefixManagerTest, RandomOwnersWithSnapshotsRestoreOnlyTheirOwnPrefix) { RandomOwners(6); }

}  // namespace
}  // namespace dsv4
