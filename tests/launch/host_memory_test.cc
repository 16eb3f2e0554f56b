#include "launch/host_memory.h"

#include <gtest/gtest.h>

namespace dsv4::launch {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

engine::MemoryInfo Host(int64_t total_gib, int64_t available_gib) {
  return engine::MemoryInfo{total_gib * kGiB, available_gib * kGiB};
}

TEST(HostMemory, RefusesACacheLargerThanTheHostWithTheNumbers) {
  engine::KvBudgetOptions o;
  o.kv_cache_memory = 1024 * kGiB;  // --kv-cache-memory 1T
  const Result<HostMemoryPlan> plan = PlanHostMemory(o, Host(24, 22), kGiB / 8, kGiB);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(plan.status().message(),
            "--kv-cache-memory 1.0 TiB does not fit: the host has 22.0 GiB available of 24.0 GiB "
            "total; after 1.0 GiB of working memory at most 21.0 GiB is left for the caches");
}

TEST(HostMemory, AcceptsACacheThatFitsAndSaysWhetherWeightsStay) {
  engine::KvBudgetOptions o;
  o.kv_cache_memory = 8 * kGiB;
  Result<HostMemoryPlan> plan = PlanHostMemory(o, Host(24, 22), 4 * kGiB, kGiB);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->kv_bytes, 8 * kGiB);
  EXPECT_FALSE(plan->weights_stream);
  EXPECT_TRUE(plan->stream_warning.empty());
  // The same cache beside a 149 GiB checkpoint: accepted, weights stream.
  plan = PlanHostMemory(o, Host(24, 22), 149 * kGiB, kGiB);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_TRUE(plan->weights_stream);
  EXPECT_NE(plan->stream_warning.find("weights will stream from disk"), std::string::npos)
      << plan->stream_warning;
  EXPECT_NE(plan->stream_warning.find("13.0 GiB of them stay in the page cache"), std::string::npos)
      << plan->stream_warning;
}

TEST(HostMemory, AutomaticBudgetReservesResidentWeights) {
  engine::KvBudgetOptions o;
  o.memory_utilization = 0.5;
  o.resident_reserve = 4 * kGiB;
  // 0.5 * 64 - (64 - 60) in use - 2 working - 4 weights = 22 GiB.
  const Result<HostMemoryPlan> plan = PlanHostMemory(o, Host(64, 60), 4 * kGiB, 2 * kGiB);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->kv_bytes, 22 * kGiB);
  EXPECT_FALSE(plan->weights_stream);
}

TEST(HostMemory, AutomaticBudgetOnAHostSmallerThanTheCheckpointStreams) {
  engine::KvBudgetOptions o;
  o.memory_utilization = 0.9;
  o.resident_reserve = 149 * kGiB;
  // Weights cannot stay: half of 0.9 * 20 - 0 in use - 2 working = 8 GiB.
  const Result<HostMemoryPlan> plan = PlanHostMemory(o, Host(20, 20), 149 * kGiB, 2 * kGiB);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->kv_bytes, 8 * kGiB);
  EXPECT_TRUE(plan->weights_stream);
}

TEST(HostMemory, NothingLeftIsResourceExhaustedNamingTheNumbers) {
  engine::KvBudgetOptions o;
  o.memory_utilization = 0.1;
  const Result<HostMemoryPlan> plan = PlanHostMemory(o, Host(10, 5), kGiB, kGiB);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(plan.status().message().find("5.0 GiB is in use"), std::string::npos)
      << plan.status().message();
}

TEST(HostMemory, FormatsBinaryUnits) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(3 * (int64_t{1} << 20) / 2), "1.5 MiB");
  EXPECT_EQ(FormatBytes(int64_t{1} << 40), "1.0 TiB");
}

TEST(HostMemory, WorkingMemoryGrowsWithTheStepBudget) {
  checkpoint::ModelConfig c;
  c.hidden_size = 4096;
  c.hc_mult = 4;
  c.vocab_size = 129280;
  EngineOptions o;
  o.max_num_batched_tokens = 1024;
  o.max_num_seqs = 8;
  // 1024 tokens * 8 buffers * 4 * 4096 * 4 B + 8 rows * 129280 * 4 B.
  EXPECT_EQ(WorkingMemoryBytes(c, o), int64_t{1024} * 8 * 4 * 4096 * 4 + int64_t{8} * 129280 * 4);
  o.max_num_batched_tokens = 2048;
  EXPECT_GT(WorkingMemoryBytes(c, o), int64_t{2048} * 8 * 4 * 4096 * 4);
}

}  // namespace
}  // namespace dsv4::launch
