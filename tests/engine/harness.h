// Scheduler + fake executor wiring shared by the engine tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "engine/cache_layout.h"
#include "engine/scheduler.h"
#include "fake_executor.h"

namespace dsv4::testing {

// A tiny DeepSeek-V4-like model: pages of 16 tokens, window 16, ratios 4 and
// 16, state pages of 4 and 8 token slots.
engine::Dsv4CacheShapes TinyShapes();
inline constexpr int32_t kTinyBlock = 16;

// Pool sizes per group: rings get `ring_pages`, full-history groups
// `history_pages` each (cmp_c128 holds one page per 16 tokens as well).
cache::CacheManager TinyCache(int32_t partitions, int64_t ring_pages, int64_t history_pages);

struct Finished {
  std::vector<int32_t> tokens;  // every output token, in order
  engine::FinishReason reason = engine::FinishReason::kNone;
  Status error;
};

class Harness {
 public:
  Harness(const engine::SchedulerConfig& config, cache::CacheManager cache, int accept_percent = 70,
          int stop_per_mille = 0);

  // Prompt tokens are derived from the id; outputs are FakeModelToken.
  Status Add(engine::RequestId id, int64_t prompt_len, int64_t max_tokens, int32_t max_draft = -1,
             bool stop_on_fake_stop = false);
  int32_t TrueToken(engine::RequestId id, int64_t pos) const;
  // Output tokens the fake model yields for `id` given its limits, and why it
  // stops: the reference result every schedule must reproduce.
  Finished Expected(engine::RequestId id) const;

  // Schedule, run on the fake, commit; checks the contract and invariants.
  engine::StepPlan Step();
  void RunToCompletion(int64_t max_steps = 100000);

  engine::Scheduler& scheduler() { return *scheduler_; }
  FakeExecutor& fake() { return *fake_; }
  const std::map<engine::RequestId, Finished>& finished() const { return finished_; }
  const std::map<engine::RequestId, std::vector<int32_t>>& streamed() const { return streamed_; }
  void Collect(std::vector<engine::RequestOutput> outputs);

 private:
  struct Limits {
    int64_t prompt_len = 0;
    int64_t max_tokens = 0;
    bool stop = false;
  };
  std::unique_ptr<engine::Scheduler> scheduler_;
  std::unique_ptr<FakeExecutor> fake_;
  std::map<engine::RequestId, Limits> limits_;
  std::map<engine::RequestId, std::vector<int32_t>> streamed_;
  std::map<engine::RequestId, Finished> finished_;
  int stop_per_mille_;
};

}  // namespace dsv4::testing
