// A decode step allocates nothing on the heap (docs/kernels.md "Scratch
// memory"): the workspace, the kernels' scratch arrays and the cache are sized
// on first use, and a thread-pool dispatch passes its closure by reference
// (base/function_ref.h), so after warm-up a batch-1 forward makes no call to
// operator new.  Allocation per token costs little time here, but its
// latency under a contended allocator is what a server's tail sees.  The
// global operator new of this binary counts (testing/alloc_counter.h).
#include <gtest/gtest.h>

#include <array>
#include <vector>

#include "base/thread_pool.h"
#include "testing/alloc_counter.h"
#include "tiny_model_fixture.h"

namespace dsv4 {
namespace {

TEST(PoolAllocations, DispatchOfALargeClosureAllocatesNothing) {
  ThreadPool pool(2);
  std::array<int64_t, 8> captured{};  // 64 bytes by value: std::function would allocate
  std::vector<int64_t> out(64);
  const auto body = [&out, captured](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[static_cast<size_t>(i)] = i + captured[0];
  };
  pool.ParallelFor(64, 1, body);  // warm-up: the workers are up
  EXPECT_EQ(testing::CountAllocations([&] {
              pool.ParallelFor(64, 1, body);
              pool.ParallelForDynamic(64, 4, body);
              ParallelFor(&pool, 64, 1, [&out, captured](int64_t begin, int64_t end) {
                for (int64_t i = begin; i < end; ++i) out[static_cast<size_t>(i)] += captured[1];
              });
            }),
            0);
  for (int64_t i = 0; i < 64; ++i) EXPECT_EQ(out[static_cast<size_t>(i)], i);
}

class ForwardAllocationTest : public testing::TinyModelTest {};

// Decode steps of one sequence after a prompt allocate nothing once the
// workspace and the per-thread scratch arrays have grown to the context they
// see.  Those grow geometrically with the context (the indexer's top-k over
// the compressed keys, its score rows), so a process that has never seen a
// context this long allocates O(log context) times along the way; here an
// earlier 64-token sequence in another slot has sized them, as the server's
// earlier requests would.  Positions 28..59 stay inside the first page of
// every growing list of the self-managed cache (a page holds 128 tokens'
// ratio-4 entries, 1024 tokens' ratio-128 ones), so no step takes a page
// either; the engine's caches use fixed pools anyway.
TEST_F(ForwardAllocationTest, DecodeStepsAllocateNothing) {
  model::Workspace ws;
  auto cache = model_->NewCache(2);
  std::vector<float> logits(static_cast<size_t>(model_->config().vocab_size));
  model::ForwardOutputs out;
  out.logits = logits.data();
  const auto prefill = [&](int32_t slot, int64_t len) {
    std::vector<int32_t> prompt(static_cast<size_t>(len));
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(3 + i % 60);
    model::ForwardBatch b;
    b.Add(slot, 0, prompt);
    b.logit_rows = {len - 1};
    ASSERT_TRUE(model_->Forward(b, *cache, out, ws, pool_).ok());
  };
  int64_t pos = 0;
  // One decode step of slot at pos; returns its heap allocations.
  const auto step = [&](int32_t slot) {
    model::ForwardBatch d;
    d.Add(slot, pos, {static_cast<int32_t>(5 + pos % 50)});
    d.logit_rows = {0};
    Status s;
    const int64_t n =
        testing::CountAllocations([&] { s = model_->Forward(d, *cache, out, ws, pool_); });
    EXPECT_TRUE(s.ok()) << s.ToString();
    ++pos;
    return n;
  };
  prefill(1, 64);  // the earlier, longer request
  pos = 64;
  for (int i = 0; i < 4; ++i) step(1);
  prefill(0, 24);
  pos = 24;
  for (int i = 0; i < 4; ++i) step(0);  // warm-up of the decode path itself
  for (int i = 0; i < 32; ++i) EXPECT_EQ(step(0), 0) << "decode step at position " << pos - 1;
}

}  // namespace
}  // namespace dsv4
