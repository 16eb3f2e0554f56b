// The engine thread (engine/local_engine.h) over the fake executor: no model,
// so the threading contract is tested alone (and under TSan): submissions
// from several threads, outputs in order per request, abort, shutdown with
// work in flight, submission checks and the waiting-queue bound.
#include "engine/local_engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "harness.h"

namespace dsv4::testing {
namespace {

constexpr int64_t kVocab = 50000;

// Every prompt is the same (so threads can build requests before they know
// the id the engine assigns); outputs differ by id (FakeModelToken).
constexpr int64_t kPromptLen = 5;
int32_t PromptToken(int64_t pos) { return 2 + static_cast<int32_t>(pos * 3); }

// Runs plans on `inner` once opened: holds the engine thread inside its
// first step so that submissions pile up deterministically.
class GatedExecutor : public engine::Executor {
 public:
  explicit GatedExecutor(std::unique_ptr<engine::Executor> inner) : inner_(std::move(inner)) {}
  Result<engine::StepResult> Run(const engine::StepPlan& plan) override {
    {
      MutexLock lock(&mu_);
      cv_.Wait(&mu_, [&]() REQUIRES(mu_) { return open_; });
    }
    return inner_->Run(plan);
  }
  void Open() {
    MutexLock lock(&mu_);
    open_ = true;
    cv_.SignalAll();
  }

 private:
  std::unique_ptr<engine::Executor> inner_;
  Mutex mu_;
  CondVar cv_;
  bool open_ GUARDED_BY(mu_) = false;
};

// Outputs as callers see them: appended on the engine thread, read by the test.
class Collector {
 public:
  engine::AsyncEngine::OutputCallback Callback() {
    return [this](const engine::GenerationOutput& o) {
      MutexLock lock(&mu_);
      Seen& s = seen_[o.id];
      EXPECT_EQ(s.finish, engine::FinishReason::kNone) << "output after the final one for " << o.id;
      s.tokens.insert(s.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      s.finish = o.finish;
      s.drafts += o.num_draft_tokens;
      s.accepted += o.num_accepted_tokens;
      if (o.finish != engine::FinishReason::kNone) {
        ++num_finished_;
        cv_.SignalAll();
      }
    };
  }
  void WaitFinished(int64_t n) {
    MutexLock lock(&mu_);
    cv_.Wait(&mu_, [&]() REQUIRES(mu_) { return num_finished_ >= n; });
  }
  struct Seen {
    std::vector<int32_t> tokens;
    engine::FinishReason finish = engine::FinishReason::kNone;
    int64_t drafts = 0;
    int64_t accepted = 0;
  };
  std::map<engine::RequestId, Seen> seen() {
    MutexLock lock(&mu_);
    return seen_;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  std::map<engine::RequestId, Seen> seen_ GUARDED_BY(mu_);
  int64_t num_finished_ GUARDED_BY(mu_) = 0;
};

class LocalEngineTest : public ::testing::Test {
 protected:
  void Start(int64_t max_waiting = 1024, bool gated = false) {
    engine::SchedulerConfig c;
    c.max_num_batched_tokens = 64;
    c.max_num_seqs = 4;
    c.max_model_len = 128;
    c.prefill_tile = kTinyBlock;
    c.num_speculative_tokens = 2;
    Result<std::unique_ptr<engine::Scheduler>> scheduler =
        engine::Scheduler::Create(c, TinyCache(1, 64, 64));
    ASSERT_TRUE(scheduler.ok()) << scheduler.status().ToString();
    auto fake = std::make_unique<FakeExecutor>(
        (*scheduler)->cache(),
        [](engine::RequestId id, int64_t pos) {
          return pos < kPromptLen ? PromptToken(pos) : FakeModelToken(id, pos, 0);
        },
        60);
    fake_ = fake.get();
    engine::LocalEngineParts parts;
    if (gated) {
      auto gate = std::make_unique<GatedExecutor>(std::move(fake));
      gate_ = gate.get();
      parts.executor = std::move(gate);
    } else {
      parts.executor = std::move(fake);
    }
    parts.core =
        std::make_unique<engine::EngineCore>(std::move(scheduler).value(), parts.executor.get());
    engine::LocalEngineConfig config;
    config.vocab_size = kVocab;
    config.eos_token_id = -1;  // the fake's tokens run to max_tokens
    config.max_model_len = 128;
    config.max_waiting = max_waiting;
    Result<std::unique_ptr<engine::LocalEngine>> engine =
        engine::LocalEngine::Start(std::move(config), std::move(parts));
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    engine_ = std::move(engine).value();
  }
  static engine::GenerationRequest MakeRequest(int64_t max_tokens) {
    engine::GenerationRequest r;
    for (int64_t p = 0; p < kPromptLen; ++p) r.prompt.push_back(PromptToken(p));
    r.max_tokens = max_tokens;
    return r;
  }
  void StopAndCheckContract() {
    engine_->Shutdown();  // joins: the fake is only read after this
    EXPECT_TRUE(fake_->errors().empty()) << fake_->errors().front();
    EXPECT_EQ(fake_->num_live_slots(), 0);
  }

  Collector out_;
  FakeExecutor* fake_ = nullptr;   // owned by engine_
  GatedExecutor* gate_ = nullptr;  // owned by engine_ when gated
  std::unique_ptr<engine::LocalEngine> engine_;
};

TEST_F(LocalEngineTest, ConcurrentSubmittersEachGetTheirWholeOutput) {
  Start();
  ASSERT_TRUE(engine_->Ready());
  constexpr int kThreads = 4;
  constexpr int kPerThread = 5;
  // A request's tokens depend on its id, which the engine assigns: each
  // submitter records the ids it got, and every id's output is checked.
  Mutex mu;
  std::vector<engine::RequestId> ids;
  std::vector<std::thread> submitters;
  for (int t = 0; t < kThreads; ++t) {
    submitters.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) {
        Result<engine::RequestId> id = engine_->Submit(MakeRequest(9), out_.Callback());
        ASSERT_TRUE(id.ok()) << id.status().ToString();
        MutexLock lock(&mu);
        ids.push_back(*id);
      }
    });
  }
  for (std::thread& t : submitters) t.join();
  out_.WaitFinished(kThreads * kPerThread);
  const std::map<engine::RequestId, Collector::Seen> seen = out_.seen();
  ASSERT_EQ(seen.size(), static_cast<size_t>(kThreads * kPerThread));
  for (const auto& [id, s] : seen) {
    EXPECT_EQ(s.finish, engine::FinishReason::kLength) << id;
    ASSERT_EQ(s.tokens.size(), 9u) << id;
    for (int64_t i = 0; i < 9; ++i) {
      EXPECT_EQ(s.tokens[size_t(i)], FakeModelToken(id, kPromptLen + i, 0)) << id << " " << i;
    }
  }
  {
    MutexLock lock(&mu);
    std::sort(ids.begin(), ids.end());
    EXPECT_EQ(std::adjacent_find(ids.begin(), ids.end()), ids.end()) << "an id given twice";
  }
  // Stats follow the step that delivered the outputs: read them once the
  // thread has stopped.
  StopAndCheckContract();
  const engine::EngineStats stats = engine_->Stats();
  EXPECT_EQ(stats.generation_tokens_total, 9 * kThreads * kPerThread);
  EXPECT_EQ(stats.prompt_tokens_total, kPromptLen * kThreads * kPerThread);
  EXPECT_EQ(stats.num_running, 0);
  EXPECT_EQ(stats.num_waiting, 0);
}

TEST_F(LocalEngineTest, OutputsMatchTheModelAndCountSpeculation) {
  Start();
  constexpr engine::RequestId kN = 6;
  for (engine::RequestId id = 1; id <= kN; ++id) {
    Result<engine::RequestId> got = engine_->Submit(MakeRequest(12), out_.Callback());
    ASSERT_TRUE(got.ok());
    ASSERT_EQ(*got, id);  // ids are assigned in submission order from 1
  }
  out_.WaitFinished(kN);
  int64_t drafts = 0;
  int64_t accepted = 0;
  for (const auto& [id, s] : out_.seen()) {
    ASSERT_EQ(s.tokens.size(), 12u) << id;
    for (int64_t i = 0; i < 12; ++i) {
      EXPECT_EQ(s.tokens[size_t(i)], FakeModelToken(id, kPromptLen + i, 0)) << id << " " << i;
    }
    drafts += s.drafts;
    accepted += s.accepted;
  }
  StopAndCheckContract();
  const engine::EngineStats stats = engine_->Stats();
  EXPECT_GT(drafts, 0);
  EXPECT_EQ(stats.spec_num_draft_tokens, drafts);  // one set of counters, summed from outputs
  EXPECT_EQ(stats.spec_num_accepted_tokens, accepted);
}

TEST_F(LocalEngineTest, AbortEndsOneRequestWhileOthersCarryOn) {
  Start(1024, /*gated=*/true);
  ASSERT_EQ(*engine_->Submit(MakeRequest(100), out_.Callback()), 1);
  ASSERT_EQ(*engine_->Submit(MakeRequest(6), out_.Callback()), 2);
  engine_->Abort(1);   // seen at the latest after the (held) first step
  engine_->Abort(77);  // unknown ids are ignored
  gate_->Open();
  out_.WaitFinished(2);
  const auto seen = out_.seen();
  EXPECT_EQ(seen.at(1).finish, engine::FinishReason::kAbort);
  EXPECT_EQ(seen.at(2).finish, engine::FinishReason::kLength);
  EXPECT_EQ(seen.at(2).tokens.size(), 6u);
  StopAndCheckContract();
}

TEST_F(LocalEngineTest, ShutdownAbortsEveryRequestInFlight) {
  Start(1024, /*gated=*/true);
  ASSERT_EQ(*engine_->Submit(MakeRequest(100), out_.Callback()), 1);
  ASSERT_EQ(*engine_->Submit(MakeRequest(100), out_.Callback()), 2);
  std::thread stopper([&] { engine_->Shutdown(); });
  // Once Submit answers Unavailable the stop is recorded; requests that got
  // in before it are in flight too.
  int64_t submitted = 2;
  while (true) {
    Result<engine::RequestId> probe = engine_->Submit(MakeRequest(100), out_.Callback());
    if (probe.ok()) {
      ++submitted;
    } else if (probe.status().code() == StatusCode::kUnavailable) {
      break;
    } else {  // the queue is full before the stopper ran: wait for it
      EXPECT_EQ(probe.status().code(), StatusCode::kResourceExhausted);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  gate_->Open();  // one step runs, then the loop sees the stop
  stopper.join();
  out_.WaitFinished(submitted);
  for (const auto& [id, s] : out_.seen()) EXPECT_EQ(s.finish, engine::FinishReason::kAbort) << id;
  EXPECT_FALSE(engine_->Ready());
  StopAndCheckContract();  // a second Shutdown is a no-op
}

TEST_F(LocalEngineTest, SubmitRefusesMalformedRequestsOnTheCallersThread) {
  Start();
  auto code = [&](engine::GenerationRequest r) {
    return engine_->Submit(std::move(r), out_.Callback()).status().code();
  };
  engine::GenerationRequest empty;
  EXPECT_EQ(code(empty), StatusCode::kInvalidArgument);
  engine::GenerationRequest out_of_vocab = MakeRequest(4);
  out_of_vocab.prompt.push_back(static_cast<int32_t>(kVocab));
  EXPECT_EQ(code(out_of_vocab), StatusCode::kInvalidArgument);
  engine::GenerationRequest bad_stop = MakeRequest(4);
  bad_stop.stop_token_ids = {-1};
  EXPECT_EQ(code(bad_stop), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(MakeRequest(0)), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(MakeRequest(124)), StatusCode::kInvalidArgument);  // 5 + 124 > 128
  engine::GenerationRequest bad_sampling = MakeRequest(4);
  bad_sampling.sampling.top_p = 0;
  EXPECT_EQ(code(bad_sampling), StatusCode::kInvalidArgument);
  engine::GenerationRequest min_over_max = MakeRequest(4);
  min_over_max.sampling.min_tokens = 5;
  EXPECT_EQ(code(min_over_max), StatusCode::kInvalidArgument);
  // Nothing was queued: the next request gets id 1.
  EXPECT_EQ(*engine_->Submit(MakeRequest(4), out_.Callback()), 1);
  out_.WaitFinished(1);
  StopAndCheckContract();
}

TEST_F(LocalEngineTest, WaitingQueueBoundRefusesWithResourceExhausted) {
  Start(/*max_waiting=*/2, /*gated=*/true);
  // The engine thread is held in its first step, so later requests stay
  // queued: the third queued one is refused.
  int accepted = 0;
  StatusCode refused = StatusCode::kOk;
  for (int i = 0; i < 10 && refused == StatusCode::kOk; ++i) {
    Result<engine::RequestId> id = engine_->Submit(MakeRequest(6), out_.Callback());
    if (id.ok()) {
      ++accepted;
    } else {
      refused = id.status().code();
    }
  }
  EXPECT_EQ(refused, StatusCode::kResourceExhausted);
  EXPECT_GE(accepted, 2);
  // The bound counts requests queued ahead of the core; the held first step
  // took at most the 2 that were queued when it drained.
  EXPECT_LE(accepted, 4);
  gate_->Open();
  out_.WaitFinished(accepted);  // everything accepted still completes
  for (const auto& [id, s] : out_.seen()) EXPECT_EQ(s.finish, engine::FinishReason::kLength) << id;
  StopAndCheckContract();
}

}  // namespace
}  // namespace dsv4::testing
