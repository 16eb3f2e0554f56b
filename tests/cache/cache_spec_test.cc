#include "cache/cache_spec.h"

#include <gtest/gtest.h>

namespace dsv4 {
namespace {

std::vector<cache::CacheGroupSpec> FlashGroups() {
  Result<std::vector<cache::CacheGroupSpec>> groups =
      cache::MakeDsv4CacheGroups(cache::Dsv4CacheGeometry{});
  EXPECT_TRUE(groups.ok()) << groups.status().ToString();
  return *groups;
}

TEST(CacheSpecTest, SevenGroupsInReferenceOrder) {
  const std::vector<cache::CacheGroupSpec> g = FlashGroups();
  ASSERT_EQ(g.size(), size_t{cache::kNumDsv4Groups});
  const char* names[] = {"ori",       "cmp_c128",  "cmp_c4",         "idx",
                         "hca_state", "csa_state", "csa_inner_state"};
  const bool ring[] = {true, false, false, false, true, true, true};
  const int32_t page_tokens[] = {128, 128, 128, 128, 8, 4, 4};
  for (int i = 0; i < cache::kNumDsv4Groups; ++i) {
    EXPECT_EQ(g[size_t(i)].name, names[i]);
    EXPECT_EQ(g[size_t(i)].is_ring(), ring[i]) << names[i];
    EXPECT_EQ(g[size_t(i)].tokens_per_page, page_tokens[i]) << names[i];
  }
  // Window 128 plus the MTP layer's shifted row.
  EXPECT_EQ(g[cache::kGroupOri].lookback, 128);
}

TEST(CacheSpecTest, LiveFrom) {
  const std::vector<cache::CacheGroupSpec> g = FlashGroups();
  EXPECT_EQ(g[cache::kGroupOri].LiveFrom(0), 0);
  EXPECT_EQ(g[cache::kGroupOri].LiveFrom(100), 0);
  EXPECT_EQ(g[cache::kGroupOri].LiveFrom(300), 172);
  // HCA state: only the open 128-token block.
  EXPECT_EQ(g[cache::kGroupHcaState].LiveFrom(300), 256);
  EXPECT_EQ(g[cache::kGroupHcaState].LiveFrom(256), 256);
  // CSA states: open 4-token block plus the previous one (overlap).
  EXPECT_EQ(g[cache::kGroupCsaState].LiveFrom(10), 4);
  EXPECT_EQ(g[cache::kGroupCsaState].LiveFrom(3), 0);
  EXPECT_EQ(g[cache::kGroupCmpC4].LiveFrom(1000), 0);
  EXPECT_EQ(g[cache::kGroupOri].LivePages(300).begin, 1);
  EXPECT_EQ(g[cache::kGroupOri].LivePages(300).end, 3);
  EXPECT_TRUE(g[cache::kGroupOri].LivePages(0).empty());
}

TEST(CacheSpecTest, LongPrefillChunkLeavesAHoleInRings) {
  const std::vector<cache::CacheGroupSpec> g = FlashGroups();
  const cache::StepSpan chunk{1000, 5096, 0};
  // Reads [872, 1000), writes what stays live: [4968, 5096).
  std::vector<cache::PageRange> ori = g[cache::kGroupOri].RequiredPages(chunk);
  ASSERT_EQ(ori.size(), 2u);
  EXPECT_EQ(ori[0].begin, 6);
  EXPECT_EQ(ori[0].end, 8);
  EXPECT_EQ(ori[1].begin, 38);
  EXPECT_EQ(ori[1].end, 40);
  // Full history: every page up to the end.
  std::vector<cache::PageRange> cmp = g[cache::kGroupCmpC4].RequiredPages(chunk);
  ASSERT_EQ(cmp.size(), 1u);
  EXPECT_EQ(cmp[0].begin, 0);
  EXPECT_EQ(cmp[0].end, 40);
  // CSA state: the previous block [996, 1000) (the open one is empty), and
  // the last complete block written, [5092, 5096).
  std::vector<cache::PageRange> csa = g[cache::kGroupCsaState].RequiredPages(chunk);
  ASSERT_EQ(csa.size(), 2u);
  EXPECT_EQ(csa[0].begin, 249);
  EXPECT_EQ(csa[0].size(), 1);
  EXPECT_EQ(csa[1].begin, 1273);
  EXPECT_EQ(csa[1].size(), 1);
}

TEST(CacheSpecTest, DraftPositionsAcrossAPageBoundary) {
  const std::vector<cache::CacheGroupSpec> g = FlashGroups();
  // Tail row at 255 plus two drafts at 256 and 257 (next page).
  const cache::StepSpan decode{255, 258, 2};
  std::vector<cache::PageRange> cmp = g[cache::kGroupCmpC4].RequiredPages(decode);
  ASSERT_EQ(cmp.size(), 1u);
  EXPECT_EQ(cmp[0].end, 3);
  std::vector<cache::PageRange> ori = g[cache::kGroupOri].RequiredPages(decode);
  ASSERT_EQ(ori.size(), 1u);
  EXPECT_EQ(ori[0].begin, 0);
  EXPECT_EQ(ori[0].end, 3);
  // If every draft is rejected the commit is 256: ring keeps [128, 256).
  EXPECT_EQ(g[cache::kGroupOri].LivePages(256).begin, 1);
  EXPECT_EQ(g[cache::kGroupOri].LivePages(256).end, 2);
}

TEST(CacheSpecTest, EmptySpanNeedsNothing) {
  const std::vector<cache::CacheGroupSpec> g = FlashGroups();
  EXPECT_TRUE(g[cache::kGroupOri].RequiredPages({5, 5, 0}).empty());
}

TEST(CacheSpecTest, RejectsBadGeometry) {
  cache::Dsv4CacheGeometry geometry;
  geometry.block_size = 96;  // not a multiple of the HCA ratio 128
  Result<std::vector<cache::CacheGroupSpec>> groups = cache::MakeDsv4CacheGroups(geometry);
  ASSERT_FALSE(groups.ok());
  EXPECT_NE(groups.status().message().find("--block-size 96"), std::string::npos);
  geometry.block_size = 0;
  EXPECT_FALSE(cache::MakeDsv4CacheGroups(geometry).ok());
  cache::CacheGroupSpec bad;
  bad.name = "x";
  bad.tokens_per_page = 0;
  EXPECT_FALSE(cache::ValidateGroupSpec(bad).ok());
}

}  // namespace
}  // namespace dsv4
