// The engine thread: concurrent Submit/Abort from several threads, every
// request gets exactly one final output, greedy outputs equal the
// single-threaded core's, Shutdown aborts what is in flight, RunOffline.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "engine/offline.h"
#include "launch/engine_setup.h"
#include "runner_test_util.h"

namespace dsv4::testing {
namespace {

// Thread-safe record of one engine's outputs.
struct Sink {
  std::mutex mu;
  std::condition_variable cv;
  std::map<engine::RequestId, Finished> done;  // GUARDED_BY(mu)
  std::map<engine::RequestId, int> num_final;  // GUARDED_BY(mu)
  int64_t num_final_total = 0;                 // GUARDED_BY(mu)

  engine::AsyncEngine::OutputCallback Callback() {
    return [this](const engine::GenerationOutput& g) {
      std::lock_guard<std::mutex> lock(mu);
      Finished& f = done[g.id];
      f.tokens.insert(f.tokens.end(), g.new_tokens.begin(), g.new_tokens.end());
      if (g.finish != engine::FinishReason::kNone) {
        f.reason = g.finish;
        ++num_final[g.id];
        ++num_final_total;
        cv.notify_all();
      }
    };
  }
  void WaitFor(int64_t n) {
    std::unique_lock<std::mutex> lock(mu);
    const bool ok =
        cv.wait_for(lock, std::chrono::seconds(120), [&] { return num_final_total >= n; });
    EXPECT_TRUE(ok) << "timed out with " << num_final_total << " of " << n << " finished";
  }
};

engine::GenerationRequest Gen(int64_t i, int64_t max_tokens) {
  engine::GenerationRequest g;
  g.prompt = TestPrompt(i, TinyModel().config().vocab_size);
  g.max_tokens = max_tokens;
  g.sampling.ignore_eos = true;  // the comparison below has no stop tokens
  return g;
}

TEST(ModelEngineTest, ConcurrentSubmitAndAbortFromManyThreads) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 6;
  launch::EngineOptions o = TestOptions(2);
  o.threads = 2;
  auto engine = launch::StartLocalEngine(TinyModel(), o, 256 << 20);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  EXPECT_TRUE((*engine)->Ready());
  Sink sink;
  std::mutex ids_mu;
  std::map<engine::RequestId, int64_t> prompt_of;  // id -> prompt index
  std::set<engine::RequestId> aborted;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int j = 0; j < kPerThread; ++j) {
        const int64_t idx = t * kPerThread + j;
        Result<engine::RequestId> id = (*engine)->Submit(Gen(idx, 6 + idx % 7), sink.Callback());
        ASSERT_TRUE(id.ok()) << id.status().ToString();
        {
          std::lock_guard<std::mutex> lock(ids_mu);
          prompt_of[*id] = idx;
          if (j % 3 == 1) aborted.insert(*id);
        }
        if (j % 3 == 1) {
          if (t % 2 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5 * t));
          (*engine)->Abort(*id);
        }
        (*engine)->Abort(987654321);  // unknown ids are ignored
      }
    });
  }
  for (auto& th : threads) th.join();
  sink.WaitFor(kThreads * kPerThread);
  // Single-threaded reference for the requests that were not aborted.
  std::vector<engine::Request> reqs;
  for (const auto& [id, idx] : prompt_of) {
    engine::Request r;
    r.id = id;
    engine::GenerationRequest g = Gen(idx, 6 + idx % 7);
    r.prompt = g.prompt;
    r.max_tokens = g.max_tokens;
    reqs.push_back(r);
  }
  const auto want = RunToCompletion(TestOptions(0), reqs);
  std::lock_guard<std::mutex> lock(sink.mu);
  for (const auto& [id, idx] : prompt_of) {
    EXPECT_EQ(sink.num_final[id], 1) << "request " << id;
    const Finished& f = sink.done[id];
    if (aborted.count(id) != 0) {
      EXPECT_TRUE(f.reason == engine::FinishReason::kAbort ||
                  f.reason == engine::FinishReason::kLength)
          << id;
      // Whatever came before the abort is a prefix of the true output.
      const auto& w = want.at(id).tokens;
      ASSERT_LE(f.tokens.size(), w.size());
      EXPECT_TRUE(std::equal(f.tokens.begin(), f.tokens.end(), w.begin())) << id;
    } else {
      EXPECT_EQ(f.reason, engine::FinishReason::kLength) << id;
      EXPECT_EQ(f.tokens, want.at(id).tokens) << id;
    }
  }
  // Everything released once idle.
  for (int i = 0; i < 100 && (*engine)->Stats().cache_usage > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const engine::EngineStats s = (*engine)->Stats();
  EXPECT_EQ(s.num_running, 0);
  EXPECT_EQ(s.num_waiting, 0);
  EXPECT_EQ(s.cache_usage, 0.0);
  EXPECT_GT(s.spec_num_draft_tokens, 0);
  EXPECT_EQ(s.spec_accepted_per_pos.size(), 2u);
}

TEST(ModelEngineTest, ShutdownAbortsInFlight) {
  launch::EngineOptions o = TestOptions(1);
  o.threads = 1;
  auto engine = launch::StartLocalEngine(TinyModel(), o, 256 << 20);
  ASSERT_TRUE(engine.ok());
  Sink sink;
  for (int i = 0; i < 6; ++i)
    ASSERT_TRUE((*engine)->Submit(Gen(i + 20, 200), sink.Callback()).ok());
  // Shut down mid-decode (and once more right away, before anything ran).
  for (int i = 0; i < 2000 && (*engine)->Stats().generation_tokens_total == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GT((*engine)->Stats().generation_tokens_total, 0);
  (*engine)->Shutdown();
  EXPECT_FALSE((*engine)->Ready());
  std::lock_guard<std::mutex> lock(sink.mu);
  EXPECT_EQ(sink.num_final_total, 6);
  for (const auto& [id, f] : sink.done) EXPECT_EQ(f.reason, engine::FinishReason::kAbort) << id;
  EXPECT_FALSE((*engine)->Submit(Gen(0, 4), sink.Callback()).ok());
  auto quick = launch::StartLocalEngine(TinyModel(), o, 256 << 20);
  ASSERT_TRUE(quick.ok());
  Sink sink2;
  ASSERT_TRUE((*quick)->Submit(Gen(3, 200), sink2.Callback()).ok());
  quick->reset();
  EXPECT_EQ(sink2.num_final_total, 1);
}

TEST(ModelEngineTest, SubmitValidates) {
  launch::EngineOptions o = TestOptions(0);
  o.max_waiting = 2;
  o.threads = 1;
  auto engine = launch::StartLocalEngine(TinyModel(), o, 256 << 20);
  ASSERT_TRUE(engine.ok());
  Sink sink;
  engine::GenerationRequest empty;
  EXPECT_EQ((*engine)->Submit(empty, sink.Callback()).status().code(),
            StatusCode::kInvalidArgument);
  engine::GenerationRequest bad_id = Gen(1, 4);
  bad_id.prompt[0] = 5000;
  EXPECT_EQ((*engine)->Submit(bad_id, sink.Callback()).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((*engine)->Submit(Gen(1, 600), sink.Callback()).status().code(),
            StatusCode::kInvalidArgument);  // over max_model_len
  engine::GenerationRequest sampled = Gen(1, 4);
  sampled.sampling.temperature = -1;
  EXPECT_EQ((*engine)->Submit(sampled, sink.Callback()).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(ModelEngineTest, RunOfflineReportsOutputsAndAcceptance) {
  launch::EngineOptions o = TestOptions(3);
  o.threads = 2;
  auto engine = launch::StartLocalEngine(TinyModel(), o, 256 << 20);
  ASSERT_TRUE(engine.ok());
  std::vector<engine::GenerationRequest> reqs;
  for (int i = 0; i < 6; ++i) {
    reqs.push_back(Gen(i + 30, 8));
    reqs.back().sampling.logprobs = 2;
  }
  Result<engine::OfflineReport> r = engine::RunOffline(**engine, reqs);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->outputs.size(), 6u);
  EXPECT_EQ(r->generated_tokens, 48);
  for (const engine::OfflineOutput& out : r->outputs) {
    EXPECT_EQ(out.finish, engine::FinishReason::kLength);
    ASSERT_EQ(out.logprobs.size(), out.tokens.size());
    for (size_t i = 0; i < out.tokens.size(); ++i) {
      EXPECT_EQ(out.logprobs[i].token, out.tokens[i]);
      ASSERT_EQ(out.logprobs[i].top.size(), 2u);
      EXPECT_EQ(out.logprobs[i].top[0].first, out.tokens[i]);  // greedy: the top token
      EXPECT_LE(out.logprobs[i].logprob, 0.0f);
    }
  }
  EXPECT_GT(r->spec_draft_tokens, 0);
  EXPECT_EQ(r->spec_accepted_per_pos.size(), 3u);
  EXPECT_GE(r->mean_accepted_length, 1.0);
  EXPECT_GT(r->generated_tokens_per_second(), 0);
}

}  // namespace
}  // namespace dsv4::testing
