#include "engine/engine_core.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "harness.h"

namespace dsv4::testing {
namespace {

int32_t PromptToken(engine::RequestId id, int64_t pos) {
  return 2 + static_cast<int32_t>(id * 10 + pos);
}
int64_t PromptLen(engine::RequestId id) { return 10 * id; }

class EngineCoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    engine::SchedulerConfig c;
    c.max_num_batched_tokens = 64;
    c.max_num_seqs = 4;
    c.max_model_len = 128;
    c.prefill_tile = kTinyBlock;
    c.num_speculative_tokens = 1;
    Result<std::unique_ptr<engine::Scheduler>> scheduler =
        engine::Scheduler::Create(c, TinyCache(1, 64, 64));
    ASSERT_TRUE(scheduler.ok());
    engine::Scheduler* s = scheduler->get();
    fake_ = std::make_unique<FakeExecutor>(
        s->cache(),
        [](engine::RequestId id, int64_t pos) {
          return pos < PromptLen(id) ? PromptToken(id, pos) : FakeModelToken(id, pos, 0);
        },
        50);
    engine_ = std::make_unique<engine::EngineCore>(std::move(scheduler).value(), fake_.get());
  }

  Status Add(engine::RequestId id, int64_t max_tokens) {
    engine::Request r;
    r.id = id;
    for (int64_t p = 0; p < PromptLen(id); ++p) r.prompt.push_back(PromptToken(id, p));
    r.max_tokens = max_tokens;
    return engine_->AddRequest(std::move(r));
  }

  void StepAndCollect() {
    Result<std::vector<engine::RequestOutput>> outputs = engine_->Step();
    ASSERT_TRUE(outputs.ok());
    for (const engine::RequestOutput& o : *outputs) {
      auto& t = tokens_[o.id];
      t.insert(t.end(), o.new_tokens.begin(), o.new_tokens.end());
      reasons_[o.id] = o.finish;
    }
    ASSERT_TRUE(fake_->errors().empty()) << fake_->errors().front();
  }

  // Steps until idle, plus one step that hands the last releases (and any
  // pending abort output) over.
  void Drain() {
    for (int i = 0; i < 1000 && engine_->HasUnfinished(); ++i) StepAndCollect();
    ASSERT_FALSE(engine_->HasUnfinished());
    StepAndCollect();
    EXPECT_EQ(fake_->num_live_slots(), 0);
    EXPECT_TRUE(engine_->scheduler().cache().AllFree());
  }

  std::unique_ptr<FakeExecutor> fake_;
  std::unique_ptr<engine::EngineCore> engine_;
  std::map<engine::RequestId, std::vector<int32_t>> tokens_;
  std::map<engine::RequestId, engine::FinishReason> reasons_;
};

TEST_F(EngineCoreTest, StepsUntilEveryRequestFinishes) {
  for (engine::RequestId id = 1; id <= 6; ++id) ASSERT_TRUE(Add(id, 12).ok());
  Drain();
  for (engine::RequestId id = 1; id <= 6; ++id) {
    ASSERT_EQ(tokens_[id].size(), 12u) << id;
    for (int64_t i = 0; i < 12; ++i) {
      EXPECT_EQ(tokens_[id][size_t(i)], FakeModelToken(id, PromptLen(id) + i, 0));
    }
    EXPECT_EQ(reasons_[id], engine::FinishReason::kLength);
  }
  EXPECT_GT(engine_->scheduler().stats().num_accepted_drafts, 0);
}

TEST_F(EngineCoreTest, ExecutorErrorFailsOnlyTheStep) {
  ASSERT_TRUE(Add(1, 5).ok());
  fake_->FailNextRun();
  Result<std::vector<engine::RequestOutput>> outputs = engine_->Step();
  ASSERT_TRUE(outputs.ok());
  ASSERT_EQ(outputs->size(), 1u);
  EXPECT_EQ((*outputs)[0].finish, engine::FinishReason::kError);
  ASSERT_TRUE(Add(2, 5).ok());
  Drain();
  EXPECT_EQ(reasons_[2], engine::FinishReason::kLength);
  EXPECT_EQ(tokens_[2].size(), 5u);
}

TEST_F(EngineCoreTest, AbortIsReportedOnce) {
  ASSERT_TRUE(Add(1, 50).ok());
  ASSERT_TRUE(engine_->Step().ok());
  ASSERT_TRUE(engine_->Abort(1).ok());
  EXPECT_EQ(engine_->Abort(1).code(), StatusCode::kNotFound);
  Drain();
  EXPECT_EQ(reasons_[1], engine::FinishReason::kAbort);
}

}  // namespace
}  // namespace dsv4::testing
