#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "harness.h"

namespace dsv4::testing {
namespace {

engine::SchedulerConfig TinyConfig() {
  engine::SchedulerConfig c;
  c.max_num_batched_tokens = 64;
  c.max_num_seqs = 8;
  c.max_model_len = 256;
  c.prefill_tile = kTinyBlock;
  c.num_speculative_tokens = 2;
  return c;
}

const engine::ScheduledRequest* Find(const engine::StepPlan& plan, engine::RequestId id) {
  for (const engine::ScheduledRequest& e : plan.requests) {
    if (e.id == id) return &e;
  }
  return nullptr;
}

TEST(SchedulerConfigTest, ValidatesFlags) {
  engine::SchedulerConfig c = TinyConfig();
  EXPECT_TRUE(c.Validate().ok());
  c.max_num_batched_tokens = 0;
  EXPECT_NE(c.Validate().message().find("--max-num-batched-tokens"), std::string::npos);
  c = TinyConfig();
  c.long_prefill_token_threshold = 8;  // below the 16-token tile
  EXPECT_NE(c.Validate().message().find("prefill tile"), std::string::npos);
  c = TinyConfig();
  c.max_num_batched_tokens = 2;  // cannot hold 1 + 2 draft rows
  EXPECT_FALSE(c.Validate().ok());
  c = TinyConfig();
  c.max_prefill_extent = 8192;
  c.max_num_batched_tokens = 4096;
  c.long_prefill_token_threshold = 2048;
  c.max_model_len = 16384;
  EXPECT_EQ(c.PrefillExtent(), 2048);
  c.long_prefill_token_threshold = 0;
  EXPECT_EQ(c.PrefillExtent(), 4096);
}

TEST(SchedulerTest, RejectsBadRequests) {
  Harness h(TinyConfig(), TinyCache(1, 64, 64));
  EXPECT_FALSE(h.Add(1, 0, 4).ok());    // empty prompt
  EXPECT_FALSE(h.Add(2, 256, 4).ok());  // no room under max_model_len
  EXPECT_FALSE(h.Add(3, 4, 0).ok());    // max_tokens 0
  EXPECT_TRUE(h.Add(4, 4, 4).ok());
  EXPECT_EQ(h.Add(4, 4, 4).code(), StatusCode::kInvalidArgument);  // duplicate id
  engine::Request negative;
  negative.id = 5;
  negative.prompt = {3, -1};
  EXPECT_FALSE(h.scheduler().AddRequest(negative).ok());
}

TEST(SchedulerTest, ChunkedPrefillInWholeTilesThenDecode) {
  engine::SchedulerConfig c = TinyConfig();
  c.max_num_batched_tokens = 40;
  Harness h(c, TinyCache(1, 64, 64), /*accept_percent=*/100);
  ASSERT_TRUE(h.Add(1, 100, 10).ok());
  std::vector<int64_t> chunks, padded;
  for (int i = 0; i < 3; ++i) {
    engine::StepPlan plan = h.Step();
    ASSERT_EQ(plan.requests.size(), 1u);
    const engine::ScheduledRequest& e = plan.requests[0];
    EXPECT_EQ(e.start_pos % kTinyBlock, 0);
    EXPECT_EQ(e.is_new, i == 0);
    EXPECT_FALSE(e.decode);
    EXPECT_EQ(e.needs_logits, i == 2);
    chunks.push_back(e.num_tokens());
    padded.push_back(e.num_padded_tokens);
  }
  // 40-token budget: whole 16-token tiles until the rest fits, the final
  // chunk padded to the tile.
  EXPECT_EQ(chunks, (std::vector<int64_t>{32, 32, 36}));
  EXPECT_EQ(padded, (std::vector<int64_t>{32, 32, 48}));
  engine::StepPlan decode = h.Step();
  ASSERT_EQ(decode.requests.size(), 1u);
  EXPECT_TRUE(decode.requests[0].decode);
  EXPECT_EQ(decode.requests[0].num_draft, 2);
  EXPECT_EQ(decode.requests[0].start_pos, 100);
  EXPECT_EQ(decode.requests[0].token_ids[1], engine::kDraftToken);
  EXPECT_EQ(decode.requests[0].num_padded_tokens, 3);
  h.RunToCompletion();
  EXPECT_EQ(h.finished().at(1).tokens, h.Expected(1).tokens);
  EXPECT_EQ(h.finished().at(1).reason, engine::FinishReason::kLength);
}

TEST(SchedulerTest, PrefillAndDecodeShareAStep) {
  engine::SchedulerConfig c = TinyConfig();
  Harness h(c, TinyCache(1, 64, 64), 0);
  ASSERT_TRUE(h.Add(1, 8, 50).ok());
  h.Step();  // prefill of 1
  ASSERT_TRUE(h.Add(2, 200, 5).ok());
  engine::StepPlan plan = h.Step();
  const engine::ScheduledRequest* decode = Find(plan, 1);
  const engine::ScheduledRequest* prefill = Find(plan, 2);
  ASSERT_NE(decode, nullptr);
  ASSERT_NE(prefill, nullptr);
  EXPECT_TRUE(decode->decode);
  EXPECT_EQ(decode->num_tokens(), 3);
  EXPECT_FALSE(prefill->needs_logits);
  // The chunk takes whole tiles of what the decode row left.
  EXPECT_EQ(prefill->num_tokens(), 48);
  EXPECT_LE(plan.num_tokens, c.max_num_batched_tokens);
  h.RunToCompletion();
  EXPECT_EQ(h.finished().at(1).tokens, h.Expected(1).tokens);
  EXPECT_EQ(h.finished().at(2).tokens, h.Expected(2).tokens);
}

TEST(SchedulerTest, ProtectsLaterDecodersFromAnOlderPrefill) {
  engine::SchedulerConfig c = TinyConfig();
  c.max_num_batched_tokens = 49;
  Harness h(c, TinyCache(1, 64, 64));
  ASSERT_TRUE(h.Add(1, 200, 4).ok());  // oldest, long prompt
  ASSERT_TRUE(h.Add(2, 1, 20).ok());
  engine::StepPlan first = h.Step();
  ASSERT_EQ(first.requests.size(), 2u);  // 48 prompt tokens of 1, the 1-token prompt of 2
  engine::StepPlan second = h.Step();
  // Without the reservation request 1 would take 48 tokens and leave 2 one
  // row without drafts; with it, 1 takes 32 and 2 gets its 1 + 2 rows.
  ASSERT_NE(Find(second, 1), nullptr);
  ASSERT_NE(Find(second, 2), nullptr);
  EXPECT_EQ(Find(second, 1)->num_tokens(), 32);
  EXPECT_TRUE(Find(second, 2)->decode);
  EXPECT_EQ(Find(second, 2)->num_tokens(), 3);
  h.RunToCompletion();
  EXPECT_EQ(h.finished().at(1).tokens, h.Expected(1).tokens);
  EXPECT_EQ(h.finished().at(2).tokens, h.Expected(2).tokens);
}

TEST(SchedulerTest, ThresholdCapsTheChunk) {
  engine::SchedulerConfig c = TinyConfig();
  c.long_prefill_token_threshold = 32;
  Harness h(c, TinyCache(1, 64, 64));
  ASSERT_TRUE(h.Add(1, 100, 2).ok());
  EXPECT_EQ(h.Step().requests[0].num_tokens(), 32);
}

TEST(SchedulerTest, DraftsReservedAcrossAPageBoundary) {
  Harness h(TinyConfig(), TinyCache(1, 64, 64), /*accept_percent=*/0);
  ASSERT_TRUE(h.Add(1, 15, 10).ok());
  h.Step();  // prefill 0..14, token at 15 committed
  engine::StepPlan plan = h.Step();
  ASSERT_EQ(plan.requests.size(), 1u);
  const engine::ScheduledRequest& e = plan.requests[0];
  EXPECT_EQ(e.start_pos, 15);
  EXPECT_EQ(e.num_draft, 2);  // positions 16 and 17: the next 16-token page
  for (int g : {cache::kGroupCmpC4, cache::kGroupIdx, cache::kGroupCmpC128}) {
    EXPECT_NE(e.block_tables[size_t(g)].At(1), cache::kNoPage) << g;
  }
  // Both drafts rejected: 16 computed positions fill page 0 exactly, and the
  // page reserved for the drafts went back.
  EXPECT_EQ(h.scheduler().cache().NumPagesHeld(1, cache::kGroupCmpC4), 1);
  h.RunToCompletion();
  EXPECT_EQ(h.finished().at(1).tokens, h.Expected(1).tokens);
}

TEST(SchedulerTest, PreemptsTheCheapestNewerRequest) {
  engine::SchedulerConfig c = TinyConfig();
  c.num_speculative_tokens = 0;
  Harness h(c, TinyCache(1, 64, 7));
  ASSERT_TRUE(h.Add(1, 16, 60).ok());
  ASSERT_TRUE(h.Add(2, 16, 60).ok());
  ASSERT_TRUE(h.Add(3, 48, 20).ok());  // newest, but the most computed tokens
  engine::RequestId first_victim = -1;
  for (int i = 0; i < 200 && first_victim < 0; ++i) {
    engine::StepPlan plan = h.Step();
    ASSERT_FALSE(::testing::Test::HasFailure());
    for (const engine::ReleasedSlot& r : plan.released) {
      if (h.finished().count(r.id) == 0) first_victim = r.id;
    }
  }
  EXPECT_EQ(first_victim, 2);
  EXPECT_GE(h.scheduler().stats().num_preemptions, 1);
  h.RunToCompletion();
  // Recompute reproduces exactly what an uninterrupted run yields.
  for (engine::RequestId id : {1, 2, 3}) {
    EXPECT_EQ(h.finished().at(id).tokens, h.Expected(id).tokens) << id;
  }
}

// Every preemption, shrunk chunk and dropped draft is in the plan's events,
// consistent with the rows the plan hands out (the verbose trace shows them).
TEST(SchedulerTest, ReportsPreemptionsShrunkChunksAndDroppedDrafts) {
  using Kind = engine::SchedulerEvent::Kind;
  engine::SchedulerConfig c = TinyConfig();
  Harness h(c, TinyCache(1, 64, 12), /*accept_percent=*/50);
  for (engine::RequestId id = 1; id <= 6; ++id) {
    ASSERT_TRUE(h.Add(id, 20 + 13 * id, 30).ok());
  }
  std::map<Kind, int> seen;
  int64_t preemptions = 0;
  for (int i = 0; i < 2000 && h.finished().size() < 6; ++i) {
    engine::StepPlan plan = h.Step();
    ASSERT_FALSE(::testing::Test::HasFailure());
    for (const engine::SchedulerEvent& ev : plan.events) {
      ++seen[ev.kind];
      const engine::ScheduledRequest* e = Find(plan, ev.id);
      switch (ev.kind) {
        case Kind::kPreempt: {
          ++preemptions;
          EXPECT_EQ(e, nullptr) << "a victim gets no rows in the step that preempts it";
          EXPECT_NE(Find(plan, ev.cause), nullptr);
          EXPECT_GT(ev.wanted, 0);
          bool released = false;
          for (const engine::ReleasedSlot& r : plan.released) released |= r.id == ev.id;
          EXPECT_TRUE(released) << ev.id;
          break;
        }
        case Kind::kChunkShrunk:
          ASSERT_NE(e, nullptr);
          EXPECT_EQ(e->num_tokens(), ev.got);
          EXPECT_LT(ev.got, ev.wanted);
          EXPECT_EQ(ev.got % c.prefill_tile, 0);
          break;
        case Kind::kDraftsDropped:
          ASSERT_NE(e, nullptr);
          EXPECT_TRUE(e->decode);
          EXPECT_EQ(e->num_draft, ev.got);
          EXPECT_LT(ev.got, ev.wanted);
          break;
      }
    }
  }
  EXPECT_EQ(preemptions, h.scheduler().stats().num_preemptions);
  EXPECT_GT(seen[Kind::kPreempt], 0);
  EXPECT_GT(seen[Kind::kChunkShrunk], 0);
  EXPECT_GT(seen[Kind::kDraftsDropped], 0);
  ASSERT_EQ(h.finished().size(), 6u);
  for (engine::RequestId id = 1; id <= 6; ++id) {
    EXPECT_EQ(h.finished().at(id).tokens, h.Expected(id).tokens) << id;
  }
}

// Runs the head-of-line scenario; returns whether request 5, which fits,
// was admitted while request 2 (which does not) kept waiting.
bool AdmitsPastABlockedHead(int32_t max_admission_skips) {
  engine::SchedulerConfig c = TinyConfig();
  c.max_num_batched_tokens = 128;
  c.num_speculative_tokens = 0;
  c.max_admission_skips = max_admission_skips;
  Harness h(c, TinyCache(1, 64, 8));
  EXPECT_TRUE(h.Add(1, 80, 20).ok());  // 5 of 8 pages
  h.Step();
  EXPECT_TRUE(h.Add(2, 100, 4).ok());  // its 100-token chunk needs 7 pages
  EXPECT_TRUE(h.Add(3, 10, 2).ok());
  engine::StepPlan plan = h.Step();
  EXPECT_EQ(Find(plan, 2), nullptr);
  EXPECT_NE(Find(plan, 3), nullptr);  // admitted past the blocked head
  EXPECT_TRUE(h.Add(4, 10, 2).ok());
  plan = h.Step();
  EXPECT_NE(Find(plan, 4), nullptr);  // second skip of request 2
  EXPECT_TRUE(h.Add(5, 10, 2).ok());
  plan = h.Step();
  EXPECT_EQ(Find(plan, 2), nullptr);
  const bool admitted = Find(plan, 5) != nullptr;
  h.RunToCompletion();
  for (engine::RequestId id : {1, 2, 3, 4, 5}) {
    EXPECT_EQ(h.finished().at(id).tokens, h.Expected(id).tokens) << id;
  }
  return admitted;
}

TEST(SchedulerTest, NoHeadOfLineBlockingWithinTheSkipLimit) {
  EXPECT_TRUE(AdmitsPastABlockedHead(100));
  // Request 2 was skipped more than twice: admission now waits for it.
  EXPECT_FALSE(AdmitsPastABlockedHead(2));
}

TEST(SchedulerTest, AbortAnywhereReleasesEverythingOnce) {
  engine::SchedulerConfig c = TinyConfig();
  Harness h(c, TinyCache(1, 64, 64));
  for (engine::RequestId id = 1; id <= 4; ++id) ASSERT_TRUE(h.Add(id, 100, 30).ok());
  // Waiting.
  ASSERT_TRUE(h.scheduler().Abort(4).ok());
  EXPECT_EQ(h.scheduler().Abort(4).code(), StatusCode::kNotFound);
  h.Step();
  EXPECT_EQ(h.finished().at(4).reason, engine::FinishReason::kAbort);
  // Running, mid-prefill.
  ASSERT_TRUE(h.scheduler().Abort(1).ok());
  h.Step();
  // Between Schedule and Commit: the step's result for it is ignored.
  engine::StepPlan plan = h.scheduler().Schedule();
  ASSERT_NE(Find(plan, 2), nullptr);
  ASSERT_TRUE(h.scheduler().Abort(2).ok());
  Result<engine::StepResult> result = h.fake().Run(plan);
  ASSERT_TRUE(result.ok());
  ASSERT_TRUE(h.scheduler().Commit(plan, *result).ok());
  h.Collect(h.scheduler().TakeOutputs());
  EXPECT_TRUE(h.scheduler().CheckInvariants().ok());
  h.RunToCompletion();
  for (engine::RequestId id : {1, 2, 4}) {
    EXPECT_EQ(h.finished().at(id).reason, engine::FinishReason::kAbort) << id;
    EXPECT_TRUE(h.finished().at(id).tokens.empty()) << id;
  }
  EXPECT_EQ(h.finished().at(3).tokens, h.Expected(3).tokens);
}

TEST(SchedulerTest, StaleStepNeverTouchesAReusedSlot) {
  engine::SchedulerConfig c = TinyConfig();
  c.max_num_seqs = 1;
  Harness h(c, TinyCache(1, 64, 64), 50);
  ASSERT_TRUE(h.Add(1, 20, 30).ok());
  h.Step();
  engine::StepPlan stale = h.scheduler().Schedule();
  ASSERT_EQ(stale.requests.size(), 1u);
  EXPECT_EQ(stale.requests[0].generation, 1u);
  ASSERT_TRUE(h.scheduler().Abort(1).ok());
  Result<engine::StepResult> stale_result = h.fake().Run(stale);
  ASSERT_TRUE(stale_result.ok());
  ASSERT_TRUE(h.scheduler().Commit(stale, *stale_result).ok());  // ignored
  ASSERT_TRUE(h.Add(2, 20, 30).ok());
  engine::StepPlan next = h.Step();
  ASSERT_EQ(next.requests.size(), 1u);
  EXPECT_EQ(next.requests[0].slot, stale.requests[0].slot);  // reused ...
  EXPECT_EQ(next.requests[0].generation, 2u);                // ... with a new generation
  EXPECT_TRUE(next.requests[0].is_new);
  ASSERT_EQ(next.released.size(), 1u);
  EXPECT_EQ(next.released[0].generation, 1u);
  h.RunToCompletion();
  EXPECT_EQ(h.finished().at(2).tokens, h.Expected(2).tokens);
}

TEST(SchedulerTest, RoutesToTheLeastLoadedPartition) {
  engine::SchedulerConfig c = TinyConfig();
  c.num_partitions = 2;
  c.max_num_batched_tokens = 256;
  Harness h(c, TinyCache(2, 64, 64));
  ASSERT_TRUE(h.Add(1, 100, 4).ok());
  ASSERT_TRUE(h.Add(2, 10, 4).ok());
  ASSERT_TRUE(h.Add(3, 10, 4).ok());
  ASSERT_TRUE(h.Add(4, 10, 4).ok());
  engine::StepPlan plan = h.Step();
  ASSERT_EQ(plan.requests.size(), 4u);
  EXPECT_EQ(Find(plan, 1)->partition, 0);
  // Held tokens, not request counts: 10 + 10 + 10 < 100.
  EXPECT_EQ(Find(plan, 2)->partition, 1);
  EXPECT_EQ(Find(plan, 3)->partition, 1);
  EXPECT_EQ(Find(plan, 4)->partition, 1);
  // Page ids are partition-local: both partitions start at page 0.
  EXPECT_EQ(Find(plan, 1)->block_tables[cache::kGroupCmpC4].At(0), 0);
  EXPECT_EQ(Find(plan, 2)->block_tables[cache::kGroupCmpC4].At(0), 0);
  h.RunToCompletion();
}

TEST(SchedulerTest, FinishReasons) {
  engine::SchedulerConfig c = TinyConfig();
  Harness h(c, TinyCache(1, 64, 64), 60, /*stop_per_mille=*/150);
  ASSERT_TRUE(h.Add(1, 10, 200, -1, /*stop_on_fake_stop=*/true).ok());
  ASSERT_TRUE(h.Add(2, 10, 7).ok());    // max_tokens
  ASSERT_TRUE(h.Add(3, 250, 50).ok());  // max_model_len 256: 6 tokens
  h.RunToCompletion();
  EXPECT_EQ(h.finished().at(1).reason, engine::FinishReason::kStop);
  EXPECT_EQ(h.finished().at(1).tokens.back(), kFakeStopToken);
  EXPECT_EQ(h.finished().at(2).reason, engine::FinishReason::kLength);
  EXPECT_EQ(h.finished().at(2).tokens.size(), 7u);
  EXPECT_EQ(h.finished().at(3).reason, engine::FinishReason::kLength);
  EXPECT_EQ(h.finished().at(3).tokens.size(), 6u);
  for (engine::RequestId id : {1, 2, 3})
    EXPECT_EQ(h.finished().at(id).tokens, h.Expected(id).tokens);
}

TEST(SchedulerTest, AFailedStepEndsOnlyItsRequests) {
  engine::SchedulerConfig c = TinyConfig();
  c.max_num_seqs = 1;
  Harness h(c, TinyCache(1, 64, 64));
  ASSERT_TRUE(h.Add(1, 20, 10).ok());
  ASSERT_TRUE(h.Add(2, 20, 10).ok());  // waits: one sequence at a time
  h.Step();
  h.fake().FailNextRun();
  h.Step();
  EXPECT_EQ(h.finished().at(1).reason, engine::FinishReason::kError);
  EXPECT_NE(h.finished().at(1).error.message().find("injected"), std::string::npos);
  h.RunToCompletion();
  EXPECT_EQ(h.finished().at(2).tokens, h.Expected(2).tokens);
}

// Adds one token too many to one request's result.
class CorruptingExecutor : public engine::Executor {
 public:
  CorruptingExecutor(engine::Executor* inner, engine::RequestId victim)
      : inner_(inner), victim_(victim) {}
  Result<engine::StepResult> Run(const engine::StepPlan& plan) override {
    Result<engine::StepResult> r = inner_->Run(plan);
    if (r.ok()) {
      for (engine::RequestResult& rr : r->requests) {
        if (rr.id == victim_ && !rr.tokens.empty()) rr.tokens.push_back(7);
      }
    }
    return r;
  }

 private:
  engine::Executor* inner_;
  engine::RequestId victim_;
};

TEST(SchedulerTest, AMalformedResultEndsOnlyThatRequest) {
  engine::SchedulerConfig c = TinyConfig();
  c.num_speculative_tokens = 0;
  Harness h(c, TinyCache(1, 64, 64));
  ASSERT_TRUE(h.Add(1, 20, 10).ok());
  ASSERT_TRUE(h.Add(2, 20, 10).ok());
  CorruptingExecutor bad(&h.fake(), 1);
  engine::StepPlan plan = h.scheduler().Schedule();
  Result<engine::StepResult> result = bad.Run(plan);
  ASSERT_TRUE(result.ok());
  ASSERT_TRUE(h.scheduler().Commit(plan, *result).ok());
  h.Collect(h.scheduler().TakeOutputs());
  EXPECT_EQ(h.finished().at(1).reason, engine::FinishReason::kError);
  EXPECT_EQ(h.finished().count(2), 0u);
  // The fake advanced its own state for 1 beyond what the scheduler accepted;
  // that slot is released and never read again.
  h.RunToCompletion();
  EXPECT_EQ(h.finished().at(2).tokens, h.Expected(2).tokens);
}

TEST(SchedulerTest, ResultOfAnotherStepIsRejected) {
  Harness h(TinyConfig(), TinyCache(1, 64, 64));
  ASSERT_TRUE(h.Add(1, 20, 10).ok());
  engine::StepPlan plan = h.scheduler().Schedule();
  engine::StepResult wrong;
  wrong.step_id = plan.step_id + 5;
  EXPECT_EQ(h.scheduler().Commit(plan, wrong).code(), StatusCode::kInternal);
  h.Collect(h.scheduler().TakeOutputs());
  EXPECT_EQ(h.finished().at(1).reason, engine::FinishReason::kError);
  EXPECT_TRUE(h.scheduler().CheckInvariants().ok());
}

TEST(FakeExecutorTest, CatchesAWrongBlockTable) {
  Harness h(TinyConfig(), TinyCache(1, 64, 64));
  ASSERT_TRUE(h.Add(1, 40, 10).ok());
  h.Step();
  engine::StepPlan plan = h.scheduler().Schedule();
  ASSERT_EQ(plan.requests.size(), 1u);
  // Point the window's live page somewhere else: the read check must notice.
  std::vector<int32_t>& ori = plan.requests[0].block_tables[cache::kGroupOri].pages;
  ASSERT_FALSE(ori.empty());
  ori[0] = 50;
  ASSERT_TRUE(h.fake().Run(plan).ok());
  EXPECT_FALSE(h.fake().errors().empty());
}

}  // namespace
}  // namespace dsv4::testing
