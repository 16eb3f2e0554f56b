#include "engine/cache_layout.h"

#include <gtest/gtest.h>

#include "engine/memory_budget.h"

namespace dsv4 {
namespace {

TEST(CacheLayoutTest, ReferencePageBytesOfFlash) {
  // PyPTO's W8A8 deployment, K = 1 (MTP layer in ori): docs/engine.md "Bytes per
  // slot, Flash".
  const engine::Dsv4CacheShapes flash = engine::Dsv4CacheShapes::Flash();
  Result<std::vector<cache::CacheGroupSpec>> g =
      engine::BuildDsv4CacheGroups(flash, engine::CacheStorage::ReferenceW8A8(flash), 128);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ((*g)[cache::kGroupOri].page_bytes, 5'767'168);
  EXPECT_EQ((*g)[cache::kGroupCmpC128].page_bytes, 20'480);
  EXPECT_EQ((*g)[cache::kGroupCmpC4].page_bytes, 688'128);
  EXPECT_EQ((*g)[cache::kGroupIdx].page_bytes, 88'704);
  EXPECT_EQ((*g)[cache::kGroupHcaState].page_bytes, 655'360);
  EXPECT_EQ((*g)[cache::kGroupCsaState].page_bytes, 688'128);
  EXPECT_EQ((*g)[cache::kGroupCsaInnerState].page_bytes, 172'032);
  engine::Dsv4CacheShapes no_mtp = flash;
  no_mtp.num_mtp_layers = 0;
  g = engine::BuildDsv4CacheGroups(no_mtp, engine::CacheStorage::ReferenceW8A8(no_mtp), 128);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ((*g)[cache::kGroupOri].page_bytes, 5'636'096);
  EXPECT_EQ((*g)[cache::kGroupOri].lookback, 127);
}

TEST(CacheLayoutTest, StorageRows) {
  const engine::Dsv4CacheShapes flash = engine::Dsv4CacheShapes::Flash();
  EXPECT_EQ(engine::CacheStorage::Fp8(flash).kv_row_bytes, 584);
  EXPECT_EQ(engine::CacheStorage::Fp8(flash).index_row_bytes, 132);
  EXPECT_EQ(engine::CacheStorage::Bf16(flash).kv_row_bytes, 1024);
  EXPECT_EQ(engine::CacheStorage::Bf16(flash).index_row_bytes, 256);
}

TEST(CacheLayoutTest, BytesPerSlotAgainstTheReference) {
  const engine::Dsv4CacheShapes flash = engine::Dsv4CacheShapes::Flash();
  const engine::CacheStorage w8a8 = engine::CacheStorage::ReferenceW8A8(flash);
  // The reference's figures: ~108 MiB at 512, ~111 MiB at 1024, ~202 MiB at 16384.
  const std::pair<int64_t, int64_t> reference[] = {
      {512, 113'625'600}, {1024, 116'814'848}, {16384, 212'492'288}};
  for (const auto& [len, bytes] : reference) {
    Result<engine::SlotComparison> c = engine::CompareBytesPerSlot(flash, w8a8, len, 8192, 1);
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(c->reference_total, bytes) << len;
    EXPECT_LT(c->ours_total, c->reference_total) << len;
  }
  // At 512 with the same row formats: ori 3 pages, hca_state 17, csa states 3.
  Result<engine::SlotComparison> c = engine::CompareBytesPerSlot(flash, w8a8, 512, 8192, 1);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->ours[cache::kGroupOri], 3 * 5'767'168);
  EXPECT_EQ(c->ours[cache::kGroupHcaState], 17 * 655'360);
  EXPECT_EQ(c->ours[cache::kGroupCsaState], 3 * 688'128);
  EXPECT_EQ(c->ours[cache::kGroupCsaInnerState], 3 * 172'032);
  EXPECT_EQ(c->ours_total, 3 * 5'767'168 + 4 * (20'480 + 688'128 + 88'704) + 17 * 655'360 +
                               3 * 688'128 + 3 * 172'032);
  EXPECT_EQ(c->ours_total, 34'212'352);  // 32.6 MiB against 108.4 MiB
  // The rolling compressor state: 87.4 MB in the reference, 13.7 MB here.
  const int64_t ref_state = c->reference[cache::kGroupHcaState] +
                            c->reference[cache::kGroupCsaState] +
                            c->reference[cache::kGroupCsaInnerState];
  const int64_t our_state = c->ours[cache::kGroupHcaState] + c->ours[cache::kGroupCsaState] +
                            c->ours[cache::kGroupCsaInnerState];
  EXPECT_EQ(ref_state, 87'367'680);
  EXPECT_EQ(our_state, 13'721'600);
  EXPECT_NE(engine::DescribeSlotComparison(*c).find("ours 34212352"), std::string::npos);
}

TEST(CacheLayoutTest, CreateFlashCacheFromABudget) {
  engine::CacheSetupOptions o;
  o.shapes = engine::Dsv4CacheShapes::Flash();
  o.storage = engine::CacheStorage::Fp8(o.shapes);
  o.budget_bytes = 64LL << 30;  // 64 GiB over 8 partitions
  o.num_partitions = 8;
  o.max_model_len = 16384;
  o.max_step_tokens = 2048;
  o.num_spec = 1;
  o.max_num_seqs = 64;
  Result<engine::CacheSetup> setup = engine::CreateDsv4Cache(o);
  ASSERT_TRUE(setup.ok()) << setup.status().ToString();
  EXPECT_EQ(setup->cache.num_partitions(), 8);
  EXPECT_EQ(setup->plan.num_ring_requests, 8);  // ceil(64 / 8) per partition
  EXPECT_GE(setup->plan.num_slots, 8);
  EXPECT_LE(setup->plan.total_bytes, o.budget_bytes / 8);
  EXPECT_NE(setup->description.find("slots at max context 16384"), std::string::npos);
  EXPECT_NE(setup->description.find("bytes per slot"), std::string::npos);
  // A budget below one slot is a clear error.
  o.budget_bytes = 8 * (setup->plan.bytes_per_slot - 1);
  Result<engine::CacheSetup> small = engine::CreateDsv4Cache(o);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("--kv-cache-memory"), std::string::npos);
}

// Per-slot rings (the CPU runner): ring pages cost nothing, each slot costs
// the model's ring bytes, and the rings get as many slots as leave one
// max-length history (not at most half the budget).
TEST(CacheLayoutTest, PerSlotRingsArePricedPerSlot) {
  engine::CacheSetupOptions o;
  o.shapes = engine::Dsv4CacheShapes::Flash();
  o.storage = engine::CacheStorage::Bf16(o.shapes);
  o.budget_bytes = 1LL << 30;
  o.max_model_len = 16384;
  o.max_step_tokens = 2048;
  o.num_spec = 1;
  o.prefill_tile = 128;
  o.max_num_seqs = 64;
  o.slot_ring_bytes = 18'315'264;  // Flash, K = 1 (model_paged_cache_test)
  Result<engine::CacheSetup> setup = engine::CreateDsv4Cache(o);
  ASSERT_TRUE(setup.ok()) << setup.status().ToString();
  const cache::CapacityPlan& plan = setup->plan;
  int64_t history = 0;
  for (const cache::CacheGroupSpec& g : setup->cache.groups()) {
    if (g.is_ring()) {
      EXPECT_EQ(g.page_bytes, 0) << g.name;
    }
  }
  for (int g = 0; g < setup->cache.num_groups(); ++g) {
    if (!setup->cache.group(g).is_ring()) {
      history += plan.num_pages[static_cast<size_t>(g)] * setup->cache.group(g).page_bytes;
    }
  }
  const int64_t one_history = 16384 / 128 * plan.history_bytes_per_unit;
  EXPECT_EQ(plan.ring_bytes_per_request, o.slot_ring_bytes);
  EXPECT_EQ(plan.bytes_per_slot, o.slot_ring_bytes + one_history);
  EXPECT_EQ(plan.num_ring_requests, (o.budget_bytes - one_history) / o.slot_ring_bytes);
  EXPECT_GT(plan.num_ring_requests, o.budget_bytes / 2 / o.slot_ring_bytes);
  EXPECT_EQ(plan.total_bytes, plan.num_ring_requests * o.slot_ring_bytes + history);
  EXPECT_LE(plan.total_bytes, o.budget_bytes);
  EXPECT_NE(setup->description.find("per-slot rings of 18315264 bytes"), std::string::npos);
  o.max_num_seqs = 4;  // a generous budget: max_num_seqs slots
  setup = engine::CreateDsv4Cache(o);
  ASSERT_TRUE(setup.ok());
  EXPECT_EQ(setup->plan.num_ring_requests, 4);
}

TEST(MemoryBudgetTest, ParsesMeminfo) {
  Result<engine::MemoryInfo> m = engine::ParseMemInfo(
      "MemTotal:       16000000 kB\nMemFree:         1000 kB\nMemAvailable:   12000000 kB\n");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->total_bytes, 16'000'000LL * 1024);
  EXPECT_EQ(m->available_bytes, 12'000'000LL * 1024);
  EXPECT_FALSE(engine::ParseMemInfo("MemTotal: 5 kB\n").ok());
  EXPECT_TRUE(engine::ReadMemInfo().ok());
  EXPECT_EQ(engine::ReadMemInfo("/nonexistent/meminfo").status().code(), StatusCode::kIoError);
}

TEST(MemoryBudgetTest, ResolvesTheBudget) {
  const engine::MemoryInfo m{1000, 700};  // 300 in use
  engine::KvBudgetOptions o;
  o.kv_cache_memory = 123;
  EXPECT_EQ(*engine::ResolveKvBudget(o, m), 123);
  o.kv_cache_memory = 0;
  o.memory_utilization = 0.9;
  EXPECT_EQ(*engine::ResolveKvBudget(o, m), 600);
  o.resident_reserve = 100;
  EXPECT_EQ(*engine::ResolveKvBudget(o, m), 500);
  o.memory_utilization = 0.3;
  EXPECT_EQ(engine::ResolveKvBudget(o, m).status().code(), StatusCode::kResourceExhausted);
  o.memory_utilization = 1.5;
  EXPECT_EQ(engine::ResolveKvBudget(o, m).status().code(), StatusCode::kInvalidArgument);
  o.kv_cache_memory = -1;
  EXPECT_EQ(engine::ResolveKvBudget(o, m).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dsv4
