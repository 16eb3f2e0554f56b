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
