#include "cache/cache_manager.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "cache/page_pool.h"

namespace dsv4 {
namespace {

// One ring group (window 8, pages of 4) and one full-history group (pages of 8).
std::vector<cache::CacheGroupSpec> SmallGroups() {
  cache::CacheGroupSpec ring;
  ring.name = "ring";
  ring.kind = cache::GroupKind::kRing;
  ring.tokens_per_page = 4;
  ring.align = 1;
  ring.lookback = 7;
  cache::CacheGroupSpec full;
  full.name = "full";
  full.kind = cache::GroupKind::kFullHistory;
  full.tokens_per_page = 8;
  return {ring, full};
}

cache::CacheManager Make(int32_t partitions, int64_t ring_pages, int64_t full_pages) {
  Result<cache::CacheManager> cache =
      cache::CacheManager::Create(SmallGroups(), partitions, {ring_pages, full_pages});
  EXPECT_TRUE(cache.ok()) << cache.status().ToString();
  return std::move(cache).value();
}

TEST(PagePoolTest, TakeReleaseLifo) {
  cache::PagePool pool(3);
  EXPECT_EQ(pool.Take(), 0);
  EXPECT_EQ(pool.Take(), 1);
  pool.Release(0);
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_EQ(pool.Take(), 0);  // most recently released first
  EXPECT_TRUE(pool.in_use(0));
}

TEST(PagePoolDeathTest, DoubleReleaseIsAnInvariantViolation) {
  cache::PagePool pool(2);
  const int32_t page = pool.Take();
  pool.Release(page);
  EXPECT_DEATH(pool.Release(page), "released twice");
}

TEST(CacheManagerTest, CreateValidates) {
  EXPECT_FALSE(cache::CacheManager::Create(SmallGroups(), 0, {1, 1}).ok());
  EXPECT_FALSE(cache::CacheManager::Create(SmallGroups(), 1, {1}).ok());
  EXPECT_FALSE(cache::CacheManager::Create({}, 1, {}).ok());
  EXPECT_FALSE(cache::CacheManager::Create(SmallGroups(), 1, {-1, 1}).ok());
}

TEST(CacheManagerTest, QueryThenCommit) {
  cache::CacheManager cache = Make(1, 16, 16);
  const cache::StepSpan first{0, 20, 0};  // ring keeps [12, 20) -> pages 3, 4; full pages 0..2
  EXPECT_EQ(cache.NumMissingPages(7, 0, first), 2);
  EXPECT_EQ(cache.NumMissingPages(7, 1, first), 3);
  ASSERT_TRUE(cache.CanAllocate(0, 7, first));
  cache::FreshPages fresh;
  cache.Allocate(0, 7, first, &fresh);
  EXPECT_EQ(fresh[0].size(), 2u);
  EXPECT_EQ(fresh[1].size(), 3u);
  EXPECT_EQ(cache.num_free_pages(0, 0), 14);
  EXPECT_EQ(cache.num_free_pages(0, 1), 13);
  const cache::BlockTable& ring = cache.Tables(7)[0];
  EXPECT_EQ(ring.first_page, 3);
  EXPECT_EQ(ring.num_mapped(), 2);
  cache.Commit(7, 20);
  EXPECT_TRUE(cache.CheckInvariants().ok());
  // A second step reads [12, 20) and writes [20, 21): one new ring page.
  const cache::StepSpan next{20, 21, 0};
  EXPECT_EQ(cache.NumMissingPages(7, 0, next), 1);
  EXPECT_EQ(cache.NumMissingPages(7, 1, next), 0);
  cache.Allocate(0, 7, next, nullptr);
  cache.Commit(7, 21);
  // Live ring positions are [13, 21): pages 3..5, page 3 still needed.
  EXPECT_EQ(cache.Tables(7)[0].first_page, 3);
  EXPECT_EQ(cache.NumPagesHeld(7, 0), 3);
  cache.Allocate(0, 7, {21, 25, 0}, nullptr);
  cache.Commit(7, 25);
  // Live [17, 25): page 3 went back to the free list.
  EXPECT_EQ(cache.Tables(7)[0].first_page, 4);
  EXPECT_EQ(cache.num_free_pages(0, 0), 16 - cache.NumPagesHeld(7, 0));
  EXPECT_TRUE(cache.CheckInvariants().ok());
  cache.Free(7);
  cache.Free(7);  // no-op: nothing is released twice
  EXPECT_TRUE(cache.AllFree());
  EXPECT_TRUE(cache.CheckInvariants().ok());
}

TEST(CacheManagerTest, CanAllocateFailsWithoutTakingAnything) {
  cache::CacheManager cache = Make(1, 16, 2);
  EXPECT_FALSE(cache.CanAllocate(0, 1, {0, 17, 0}));  // needs 3 full pages
  EXPECT_TRUE(cache.AllFree());
  EXPECT_FALSE(cache.Holds(1));
  EXPECT_TRUE(cache.CanAllocate(0, 1, {0, 16, 0}));
}

TEST(CacheManagerTest, RejectedDraftsGiveBackTheirPage) {
  cache::CacheManager cache = Make(1, 16, 16);
  cache.Allocate(0, 1, {0, 15, 0}, nullptr);
  cache.Commit(1, 15);
  EXPECT_EQ(cache.NumPagesHeld(1, 1), 2);
  // Tail at 15 plus drafts at 16, 17: reserved across the boundary at 16.
  const cache::StepSpan decode{15, 18, 2};
  EXPECT_EQ(cache.NumMissingPages(1, 1, decode), 1);
  cache.Allocate(0, 1, decode, nullptr);
  EXPECT_EQ(cache.NumPagesHeld(1, 1), 3);
  cache.Commit(1, 16);  // both drafts rejected
  EXPECT_EQ(cache.NumPagesHeld(1, 1), 2);
  EXPECT_EQ(cache.num_free_pages(0, 1), 14);
  EXPECT_TRUE(cache.CheckInvariants().ok());
}

TEST(CacheManagerTest, LongChunkHoldsOnlyWhatStaysLive) {
  cache::CacheManager cache = Make(1, 8, 64);
  cache.Allocate(0, 1, {0, 200, 0}, nullptr);
  // Ring: [192, 200) only (2 pages), not 50 pages for the whole chunk.
  EXPECT_EQ(cache.NumPagesHeld(1, 0), 2);
  EXPECT_EQ(cache.NumPagesHeld(1, 1), 25);
  cache.Commit(1, 200);
  EXPECT_EQ(cache.NumPagesHeld(1, 0), 2);
  // Next chunk reads [192, 200) and writes its tail: a hole in between.
  cache.Allocate(0, 1, {200, 300, 0}, nullptr);
  const cache::BlockTable& ring = cache.Tables(1)[0];
  EXPECT_NE(ring.At(48), cache::kNoPage);
  EXPECT_NE(ring.At(49), cache::kNoPage);
  EXPECT_EQ(ring.At(60), cache::kNoPage);
  EXPECT_NE(ring.At(73), cache::kNoPage);
  EXPECT_NE(ring.At(74), cache::kNoPage);
  EXPECT_EQ(ring.At(72), cache::kNoPage);
  EXPECT_EQ(cache.NumPagesHeld(1, 0), 4);  // 48, 49 (reads) and 73, 74 ([293, 300))
  cache.Commit(1, 300);
  EXPECT_TRUE(cache.CheckInvariants().ok());
}

TEST(CacheManagerTest, RowOfGivesSlotMappings) {
  Result<std::vector<cache::CacheGroupSpec>> g =
      cache::MakeDsv4CacheGroups(cache::Dsv4CacheGeometry{});
  ASSERT_TRUE(g.ok());
  cache::BlockTable table;
  table.first_page = 2;
  table.pages = {7, cache::kNoPage, 3};
  const cache::CacheGroupSpec& ori = (*g)[cache::kGroupOri];
  EXPECT_EQ(cache::RowOf(ori, table, 2 * 128 + 5), 7 * 128 + 5);
  EXPECT_EQ(cache::RowOf(ori, table, 3 * 128 + 5), -1);  // hole
  EXPECT_EQ(cache::RowOf(ori, table, 100), -1);          // released
  const cache::CacheGroupSpec& c4 = (*g)[cache::kGroupCmpC4];
  EXPECT_EQ(c4.rows_per_page(), 32);
  EXPECT_EQ(cache::RowOf(c4, table, 4 * 128 + 11), 3 * 32 + 2);  // block 2 of page 3
  const cache::CacheGroupSpec& c128 = (*g)[cache::kGroupCmpC128];
  EXPECT_EQ(cache::RowOf(c128, table, 2 * 128 + 127), 7);
  const cache::CacheGroupSpec& hca = (*g)[cache::kGroupHcaState];
  cache::BlockTable state;
  state.first_page = 32;
  state.pages = {9};
  EXPECT_EQ(cache::RowOf(hca, state, 32 * 8 + 3), 9 * 8 + 3);
}

TEST(CacheManagerTest, PartitionsHaveTheirOwnNamespaces) {
  cache::CacheManager cache = Make(2, 4, 4);
  cache.Allocate(0, 1, {0, 8, 0}, nullptr);
  cache.Allocate(1, 2, {0, 8, 0}, nullptr);
  // Both start at page 0 of their own partition.
  EXPECT_EQ(cache.Tables(1)[1].At(0), 0);
  EXPECT_EQ(cache.Tables(2)[1].At(0), 0);
  EXPECT_EQ(cache.PartitionOf(2), 1);
  EXPECT_EQ(cache.num_free_pages(0, 1), 3);
  EXPECT_EQ(cache.num_free_pages(1, 1), 3);
  EXPECT_TRUE(cache.CheckInvariants().ok());
  cache.Free(1);
  cache.Free(2);
  EXPECT_TRUE(cache.AllFree());
}

}  // namespace
}  // namespace dsv4
