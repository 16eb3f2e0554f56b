#include "runner_test_util.h"

#include <gtest/gtest.h>

#include "testing/golden.h"

namespace dsv4::testing {

const model::Model& TinyModel() {
  static const model::Model* model = [] {
    auto m = model::Model::Load(TestDataPath("golden/tiny-a"));
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return std::move(m).value().release();
  }();
  return *model;
}

ThreadPool* TestPool() {
  static ThreadPool* pool = new ThreadPool(2);
  return pool;
}

int64_t TestPromptLength(int64_t i) {
  // Mixed lengths: short ones, ones around the window and the 128 block.
  static const int64_t kLengths[] = {1, 3, 15, 16, 17, 31, 33, 64, 127, 128, 129, 140, 255, 260};
  const int64_t n = sizeof(kLengths) / sizeof(kLengths[0]);
  return i < n ? kLengths[i] : 1 + (i * 53) % 290;
}

std::vector<int32_t> TestPrompt(int64_t i, int64_t vocab) {
  std::vector<int32_t> p;
  const int64_t len = TestPromptLength(i);
  uint64_t x = 0x1234567ull + static_cast<uint64_t>(i) * 7919u;
  for (int64_t j = 0; j < len; ++j) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    p.push_back(static_cast<int32_t>((x >> 33) % static_cast<uint64_t>(vocab)));
  }
  return p;
}

launch::EngineOptions TestOptions(int32_t k) {
  launch::EngineOptions o;
  o.max_model_len = 512;
  o.max_num_seqs = 8;
  o.max_num_batched_tokens = 256;
  o.long_prefill_token_threshold = 96;
  o.block_size = 128;  // the least multiple of the HCA ratio; state pages hold 4 and 8 tokens
  o.num_speculative_tokens = k;
  return o;
}

std::map<engine::RequestId, Finished> RunToCompletion(
    const launch::EngineOptions& options, const std::vector<engine::Request>& requests,
    int64_t budget_bytes, int stagger, RunStats* stats,
    std::unique_ptr<speculation::DraftProposer> proposer) {
  std::map<engine::RequestId, Finished> done;
  Result<launch::EngineParts> parts =
      launch::BuildEngine(TinyModel(), TestPool(), options,
                          budget_bytes > 0 ? budget_bytes : (256 << 20), std::move(proposer));
  EXPECT_TRUE(parts.ok()) << parts.status().ToString();
  if (!parts.ok()) return done;
  engine::EngineCore& core = *parts->core;
  size_t next = 0;
  int64_t step = 0;
  while (next < requests.size() || core.HasUnfinished()) {
    while (next < requests.size() &&
           (stagger == 0 || step >= static_cast<int64_t>(next) * stagger)) {
      const Status s = core.AddRequest(requests[next++]);
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    Result<std::vector<engine::RequestOutput>> out = core.Step();
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    if (!out.ok()) break;
    ++step;
    for (engine::RequestOutput& o : *out) {
      Finished& f = done[o.id];
      EXPECT_EQ(f.reason, engine::FinishReason::kNone) << "output after finish, request " << o.id;
      f.tokens.insert(f.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      f.reason = o.finish;
      EXPECT_TRUE(o.error.ok()) << "request " << o.id << ": " << o.error.ToString();
      if (stats != nullptr) stats->spec.Add(o);
    }
    const Status inv = core.scheduler().CheckInvariants();
    EXPECT_TRUE(inv.ok()) << inv.ToString();
    if (step > 100000) {
      ADD_FAILURE() << "no progress";
      break;
    }
  }
  if (stats != nullptr) {
    stats->num_steps = step;
    stats->num_preemptions = core.scheduler().stats().num_preemptions;
  }
  return done;
}

}  // namespace dsv4::testing
