#include "cache/capacity.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace dsv4 {
namespace {

std::vector<cache::CacheGroupSpec> FlashGroups() {
  Result<std::vector<cache::CacheGroupSpec>> groups =
      cache::MakeDsv4CacheGroups(cache::Dsv4CacheGeometry{});
  EXPECT_TRUE(groups.ok());
  return *groups;
}

TEST(CapacityTest, PeakPagesOfFlashRings) {
  const std::vector<cache::CacheGroupSpec> g = FlashGroups();
  // K = 1, 8192-token chunks starting on 128-token tiles.  ori: a decode
  // row reads 128 positions and writes 2 (3 pages); a chunk reads one
  // aligned page and writes up to 2.  hca_state: a decode row after up to
  // 127 open-block tokens (16 pages of 8) writes into a 17th.  csa states:
  // previous + open block read, 2 rows written.
  EXPECT_EQ(cache::PeakPagesPerRequest(g[cache::kGroupOri], 512, 8192, 1, 128), 3);
  EXPECT_EQ(cache::PeakPagesPerRequest(g[cache::kGroupHcaState], 512, 8192, 1, 128), 17);
  EXPECT_EQ(cache::PeakPagesPerRequest(g[cache::kGroupCsaState], 512, 8192, 1, 128), 3);
  EXPECT_EQ(cache::PeakPagesPerRequest(g[cache::kGroupCsaInnerState], 512, 8192, 1, 128), 3);
  // Chunks at any position cost more: both ends of a long chunk unaligned.
  EXPECT_EQ(cache::PeakPagesPerRequest(g[cache::kGroupOri], 512, 8192, 1, 1), 4);
  EXPECT_EQ(cache::PeakPagesPerRequest(g[cache::kGroupHcaState], 512, 8192, 1, 1), 32);
  // Full history: the pages of the whole context.
  EXPECT_EQ(cache::PeakPagesPerRequest(g[cache::kGroupCmpC4], 512, 8192, 1, 128), 4);
  EXPECT_EQ(cache::PeakPagesPerRequest(g[cache::kGroupCmpC4], 513, 8192, 1, 128), 5);
}

TEST(CapacityTest, PeakCoversEveryStepBruteForce) {
  const std::vector<cache::CacheGroupSpec> g = FlashGroups();
  for (int gi : {cache::kGroupOri, cache::kGroupHcaState, cache::kGroupCsaState}) {
    const int64_t peak = cache::PeakPagesPerRequest(g[size_t(gi)], 4096, 600, 3, 32);
    for (int64_t start = 0; start < 1200; start += 1) {
      for (int64_t n = 1; n <= 600 && start % 32 == 0; n += 1) {
        int64_t pages = 0;
        for (const cache::PageRange& r : g[size_t(gi)].RequiredPages({start, start + n, 0}))
          pages += r.size();
        ASSERT_LE(pages, peak) << g[size_t(gi)].name << " start " << start << " n " << n;
      }
      int64_t pages = 0;
      for (const cache::PageRange& r : g[size_t(gi)].RequiredPages({start, start + 4, 3}))
        pages += r.size();
      ASSERT_LE(pages, peak);
    }
  }
}

std::vector<cache::CacheGroupSpec> Priced() {
  std::vector<cache::CacheGroupSpec> g = FlashGroups();
  for (size_t i = 0; i < g.size(); ++i) g[i].page_bytes = 1000 * static_cast<int64_t>(i + 1);
  return g;
}

TEST(CapacityTest, PlanSizesRingsPerRequestAndHistoryByToken) {
  const std::vector<cache::CacheGroupSpec> g = Priced();
  cache::CapacityOptions o;
  o.max_model_len = 1024;
  o.max_step_tokens = 2048;
  o.num_spec = 1;
  o.prefill_align = 128;
  o.max_seqs = 4;
  o.budget_bytes = 10'000'000;
  Result<cache::CapacityPlan> plan = cache::PlanCapacity(g, o);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->num_ring_requests, 4);
  for (size_t i = 0; i < g.size(); ++i) {
    if (g[i].is_ring()) {
      EXPECT_EQ(plan->num_pages[i], 4 * plan->peak_pages[i]) << g[i].name;
    }
  }
  EXPECT_EQ(plan->unit_tokens, 128);
  EXPECT_EQ(plan->history_bytes_per_unit, 2000 + 3000 + 4000);
  // History for at most 4 max-length requests (8 units each).
  EXPECT_EQ(plan->num_units, 32);
  EXPECT_EQ(plan->num_slots, 4);
  EXPECT_LE(plan->total_bytes, o.budget_bytes);
  int64_t per_slot = 0;
  for (size_t i = 0; i < g.size(); ++i) per_slot += plan->peak_pages[i] * g[i].page_bytes;
  EXPECT_EQ(plan->bytes_per_slot, per_slot);
  EXPECT_NE(cache::DescribeCapacity(g, o, *plan).find("4 slots at max context 1024"),
            std::string::npos);
}

TEST(CapacityTest, TightBudgetTradesRingsForHistory) {
  const std::vector<cache::CacheGroupSpec> g = Priced();
  cache::CapacityOptions o;
  o.max_model_len = 1024;
  o.max_step_tokens = 2048;
  o.num_spec = 1;
  o.prefill_align = 128;
  o.max_seqs = 64;
  Result<cache::CapacityPlan> probe = cache::PlanCapacity(g, {1LL << 40, 1024, 2048, 1, 128, 64});
  ASSERT_TRUE(probe.ok());
  o.budget_bytes = 3 * probe->bytes_per_slot;
  Result<cache::CapacityPlan> plan = cache::PlanCapacity(g, o);
  ASSERT_TRUE(plan.ok());
  // Rings take at most half: the other half holds at least 1.5 slots of history.
  EXPECT_GE(plan->num_slots, 1);
  EXPECT_LT(plan->num_ring_requests, 64);
  EXPECT_LE(plan->num_ring_requests * plan->ring_bytes_per_request, o.budget_bytes / 2);
  // History fills the rest, up to what the ring requests could ever use.
  EXPECT_EQ(plan->num_units,
            std::min(plan->num_ring_requests * 8,
                     (o.budget_bytes - plan->num_ring_requests * plan->ring_bytes_per_request) /
                         plan->history_bytes_per_unit));
  EXPECT_LE(plan->total_bytes, o.budget_bytes);
  // Not even one max-length request: a clear error.
  o.budget_bytes = probe->bytes_per_slot - 1;
  Result<cache::CapacityPlan> none = cache::PlanCapacity(g, o);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(none.status().message().find("--max-model-len 1024"), std::string::npos);
}

// Prefix caching's snapshot buffers are charged with each runner slot:
// a slot with 2 snapshots costs 3 times its rings, the plan's bytes add up
// and the budget holds fewer slots than without them.
TEST(CapacityTest, SnapshotsAreChargedPerSlot) {
  std::vector<cache::CacheGroupSpec> g = Priced();
  for (auto& spec : g) {
    if (spec.is_ring()) spec.page_bytes = 0;  // per-slot rings
  }
  cache::CapacityOptions o;
  o.max_model_len = 1024;
  o.max_step_tokens = 2048;
  o.num_spec = 1;
  o.prefill_align = 128;
  o.max_seqs = 64;
  o.slot_ring_bytes = 1'000'000;
  o.budget_bytes = 20'000'000;
  Result<cache::CapacityPlan> plain = cache::PlanCapacity(g, o);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->num_snapshots, 0);
  o.snapshots_per_slot = 2;
  Result<cache::CapacityPlan> plan = cache::PlanCapacity(g, o);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->ring_bytes_per_request, 3'000'000);
  EXPECT_EQ(plan->num_snapshots, 2 * plan->num_ring_requests);
  EXPECT_LT(plan->num_ring_requests, plain->num_ring_requests);
  int64_t history = 0;
  for (size_t i = 0; i < g.size(); ++i) history += plan->num_pages[i] * g[i].page_bytes;
  EXPECT_EQ(plan->total_bytes,
            (plan->num_ring_requests + plan->num_snapshots) * o.slot_ring_bytes + history);
  EXPECT_LE(plan->total_bytes, o.budget_bytes);
  EXPECT_NE(cache::DescribeCapacity(g, o, *plan)
                .find(std::to_string(plan->num_snapshots) + " prefix-cache snapshots"),
            std::string::npos);
  // Snapshots of rings that are pages are not a thing; negative counts neither.
  o.slot_ring_bytes = 0;
  EXPECT_EQ(cache::PlanCapacity(g, o).status().code(), StatusCode::kInvalidArgument);
  o.slot_ring_bytes = 1'000'000;
  o.snapshots_per_slot = -1;
  EXPECT_EQ(cache::PlanCapacity(g, o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dsv4
