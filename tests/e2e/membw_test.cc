// The STREAM triad bench compares decode with (apps/dsv4/membw.h): passes
// over kept arrays (bench interleaves them with decode steps) and the
// best/median summary of their samples.
#include "membw.h"

#include <gtest/gtest.h>

namespace dsv4 {
namespace {

TEST(TriadTest, SummaryIsBestAndMedianOfTheSamples) {
  TriadResult r = SummarizeTriad({30, 10, 20}, 1 << 20, 2);
  EXPECT_EQ(r.best_gbps, 30);
  EXPECT_EQ(r.median_gbps, 20);
  EXPECT_EQ(r.array_bytes, size_t{1} << 20);
  EXPECT_EQ(r.threads, 2);
  // An even count: the mean of the two middle samples.
  EXPECT_EQ(SummarizeTriad({40, 10, 30, 20}, 1, 1).median_gbps, 25);
  EXPECT_EQ(SummarizeTriad({}, 1, 1).best_gbps, 0);
}

// Each window is divided by the mean of the passes on its two sides, not by
// the run's median pass: when the host's bandwidth halves during a run
// (passes 100, 100, 50, 50) and the decode with it, the windows on either
// side of the drop read 0.5.
TEST(TriadTest, WindowsPairWithTheirFlankingPasses) {
  const PairedRatios drop = PairWindowsWithPasses({50, 50, 25}, {100, 100, 50, 50});
  EXPECT_EQ(drop.windows, 3u);
  EXPECT_DOUBLE_EQ(drop.median, 0.5);
  EXPECT_DOUBLE_EQ(drop.q1, 0.5);
  EXPECT_DOUBLE_EQ(drop.q3, 50.0 / 75.0);  // the window across the drop
  // Nearest-rank quartiles of 8 ratios 0.1 .. 0.8: the 2nd and 6th.
  const PairedRatios eight =
      PairWindowsWithPasses({8, 1, 7, 2, 6, 3, 5, 4}, std::vector<double>(9, 10.0));
  EXPECT_DOUBLE_EQ(eight.q1, 0.2);
  EXPECT_DOUBLE_EQ(eight.median, 0.45);
  EXPECT_DOUBLE_EQ(eight.q3, 0.6);
  EXPECT_EQ(PairWindowsWithPasses({}, {70}).windows, 0u);
}

TEST(TriadTest, PassesRunOverTheSameArrays) {
  ThreadPool pool(2);
  Triad triad(size_t{4} << 20, &pool);
  EXPECT_EQ(triad.array_bytes(), size_t{4} << 20);
  for (int i = 0; i < 3; ++i) EXPECT_GT(triad.Pass(), 0.0);
  for (int i = 0; i < 3; ++i) EXPECT_GT(triad.ReadPass(), 0.0);
  const TriadResult r = MeasureTriad(size_t{4} << 20, 3, &pool);
  EXPECT_GT(r.median_gbps, 0.0);
  EXPECT_GE(r.best_gbps, r.median_gbps);
  EXPECT_EQ(r.threads, 2);
}

}  // namespace
}  // namespace dsv4
