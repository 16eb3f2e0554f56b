// Randomised scheduling: arrivals, aborts, prompt and output lengths, draft
// acceptance and cache pressure, with every invariant checked after every
// step (pages owned exactly once, budgets, slots, the fake's contract checks)
// and every output compared with the uninterrupted result at the end.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "engine/cache_layout.h"
#include "harness.h"

namespace dsv4::testing {
namespace {

struct Scenario {
  uint32_t seed;
  int32_t dp;
  int32_t k;
  int64_t budget_tokens;
  int64_t threshold;
  int64_t max_num_seqs;
  int64_t slots_of_memory;  // cache budget in max-length requests per partition
};

class RandomizedSchedulerTest : public ::testing::TestWithParam<Scenario> {};

TEST_P(RandomizedSchedulerTest, InvariantsHoldEveryStep) {
  const Scenario sc = GetParam();
  std::mt19937 rng(sc.seed);
  engine::SchedulerConfig config;
  config.max_num_batched_tokens = sc.budget_tokens;
  config.max_num_seqs = sc.max_num_seqs;
  config.long_prefill_token_threshold = sc.threshold;
  config.max_model_len = 160;
  config.prefill_tile = kTinyBlock;
  config.num_speculative_tokens = sc.k;
  config.num_partitions = sc.dp;
  config.max_admission_skips = 8;
  ASSERT_TRUE(config.Validate().ok());

  // Pools sized the production way, for a budget of a few max-length slots.
  engine::CacheSetupOptions setup;
  setup.shapes = TinyShapes();
  setup.storage = engine::CacheStorage::Bf16(setup.shapes);
  setup.block_size = kTinyBlock;
  setup.state_pages = {4, 8};
  setup.num_partitions = sc.dp;
  setup.max_model_len = config.max_model_len;
  setup.max_step_tokens = config.PrefillExtent();
  setup.num_spec = sc.k;
  setup.prefill_tile = config.prefill_tile;
  setup.max_num_seqs = config.max_num_seqs;
  setup.budget_bytes = 1LL << 40;
  Result<engine::CacheSetup> probe = engine::CreateDsv4Cache(setup);
  ASSERT_TRUE(probe.ok()) << probe.status().ToString();
  setup.budget_bytes = sc.slots_of_memory * probe->plan.bytes_per_slot * sc.dp;
  Result<engine::CacheSetup> cache = engine::CreateDsv4Cache(setup);
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();
  const std::vector<int64_t> peak = cache->plan.peak_pages;

  Harness h(config, std::move(cache->cache), /*accept_percent=*/60, /*stop_per_mille=*/15);
  std::set<engine::RequestId> live;
  std::set<engine::RequestId> aborted;
  engine::RequestId next_id = 1;
  const int kSteps = 3000;
  for (int step = 0; step < kSteps + 20000 && (step < kSteps || h.scheduler().HasUnfinished());
       ++step) {
    if (step < kSteps && rng() % 100 < 12) {
      const int64_t prompt = 1 + static_cast<int64_t>(rng() % 150);
      const int64_t max_tokens = 1 + static_cast<int64_t>(rng() % 60);
      const int32_t max_draft = static_cast<int32_t>(rng() % 3) - 1;
      ASSERT_TRUE(h.Add(next_id, prompt, max_tokens, max_draft, rng() % 2 == 0).ok());
      live.insert(next_id++);
    }
    if (!live.empty() && rng() % 100 < 2) {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      ASSERT_TRUE(h.scheduler().Abort(*it).ok());
      aborted.insert(*it);
      live.erase(it);
    }
    const engine::StepPlan plan = h.Step();
    ASSERT_FALSE(::testing::Test::HasFailure()) << "step " << step;
    std::set<engine::RequestId> in_plan;
    for (const engine::ScheduledRequest& e : plan.requests) {
      ASSERT_TRUE(in_plan.insert(e.id).second) << "request twice in one plan";
      ASSERT_LE(e.num_real_tokens(), config.PrefillExtent());
      if (!e.decode) {
        ASSERT_EQ(e.start_pos % config.prefill_tile, 0) << "chunk not on a tile";
        ASSERT_EQ(e.num_draft, 0);
      }
      if (!e.needs_logits) {
        ASSERT_EQ(e.num_real_tokens() % config.prefill_tile, 0);
      }
      for (size_t g = 0; g < peak.size(); ++g) {
        ASSERT_LE(e.block_tables[g].num_mapped(), peak[g]) << "group " << g;
      }
    }
    for (const auto& [id, f] : h.finished()) live.erase(id);
  }
  ASSERT_FALSE(h.scheduler().HasUnfinished())
      << h.scheduler().num_waiting() << " waiting, " << h.scheduler().num_running() << " running";
  h.Step();  // delivers the last releases
  EXPECT_EQ(h.fake().num_live_slots(), 0);
  EXPECT_TRUE(h.scheduler().cache().AllFree());
  ASSERT_TRUE(h.scheduler().CheckInvariants().ok());

  int64_t num_done = 0;
  for (const auto& [id, f] : h.finished()) {
    const Finished want = h.Expected(id);
    if (aborted.count(id) != 0 && f.reason == engine::FinishReason::kAbort) {
      ASSERT_LE(f.tokens.size(), want.tokens.size());
      EXPECT_TRUE(std::equal(f.tokens.begin(), f.tokens.end(), want.tokens.begin())) << id;
      continue;
    }
    EXPECT_NE(f.reason, engine::FinishReason::kError) << id << ": " << f.error.ToString();
    EXPECT_EQ(f.tokens, want.tokens) << "request " << id;
    EXPECT_EQ(f.reason, want.reason) << "request " << id;
    ++num_done;
  }
  EXPECT_EQ(static_cast<int64_t>(h.finished().size()), next_id - 1);
  EXPECT_GT(num_done, 150);
  const engine::SchedulerStats& stats = h.scheduler().stats();
  RecordProperty("preemptions", static_cast<int>(stats.num_preemptions));
  if (sc.slots_of_memory <= 2) {
    EXPECT_GT(stats.num_preemptions, 0);
  }
  if (sc.k > 0) {
    EXPECT_GT(stats.num_accepted_drafts, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Seeds, RandomizedSchedulerTest,
    ::testing::Values(Scenario{1, 1, 0, 64, 0, 8, 2}, Scenario{2, 1, 1, 64, 32, 16, 2},
                      Scenario{3, 2, 3, 200, 0, 16, 3}, Scenario{4, 3, 2, 48, 0, 4, 1},
                      Scenario{5, 2, 1, 128, 64, 16, 6}, Scenario{6, 1, 3, 32, 0, 16, 1}));

}  // namespace
}  // namespace dsv4::testing
