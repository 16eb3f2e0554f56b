// A fake model for scheduler tests: it checks the step contract as a real
// runner depends on it and produces deterministic tokens.
//
// It keeps a simulated page store per (partition, group) in which every cell
// (one source position) records which request incarnation (id, generation)
// wrote which token at which position.  Each plan is checked for:
//   - released slots were live with that generation (released exactly once);
//   - a step on a slot has the slot's generation and resumes at the position
//     the previous step left; new slots start at position 0;
//   - the fed token ids are the request's true tokens (prompt, then outputs);
//   - every position a step reads (ring: [LiveFrom(start), start); full
//     history: [0, start)) is mapped and holds this incarnation's true token
//     (so a rejected draft, a stale page or a missing clear would be caught);
//   - every position whose later reads a commit can leave live is mapped,
//     including draft positions across page boundaries.
// Tokens: the true token at position p >= prompt length is
// FakeModelToken(id, p); drafts are right with probability accept_percent.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cache/cache_manager.h"
#include "engine/executor.h"

namespace dsv4::testing {

inline constexpr int32_t kFakeStopToken = 1;

// Deterministic output token of request `id` at position `pos`: in [2, 50000),
// or kFakeStopToken with probability stop_per_mille / 1000.
int32_t FakeModelToken(engine::RequestId id, int64_t pos, int stop_per_mille);

class FakeExecutor : public engine::Executor {
 public:
  // `true_token(id, pos)` is the request's token at `pos` (its prompt below
  // the prompt length, FakeModelToken above).
  FakeExecutor(const cache::CacheManager& cache,
               std::function<int32_t(engine::RequestId, int64_t)> true_token, int accept_percent);

  Result<engine::StepResult> Run(const engine::StepPlan& plan) override;

  // Contract violations seen so far (empty when all is well).
  const std::vector<std::string>& errors() const { return errors_; }
  int64_t num_live_slots() const { return static_cast<int64_t>(slots_.size()); }
  int64_t num_pages_cleared() const { return num_pages_cleared_; }
  // The next Run fails with an error (tests of failure isolation).
  void FailNextRun() { fail_next_ = true; }

 private:
  struct Cell {
    engine::RequestId id = -1;
    uint32_t generation = 0;
    int64_t pos = -1;
    int32_t token = -1;
  };
  struct SlotState {
    engine::RequestId id = 0;
    uint32_t generation = 0;
    int64_t next_pos = 0;
  };
  void Error(std::string message) { errors_.push_back(std::move(message)); }
  std::vector<Cell>& Page(int32_t partition, int g, int32_t page);
  Cell* CellAt(const engine::ScheduledRequest& e, int g, int64_t pos);
  void CheckReads(const engine::ScheduledRequest& e);
  void Write(const engine::ScheduledRequest& e, const std::vector<int32_t>& row_tokens);
  engine::RequestResult RunRequest(const engine::ScheduledRequest& e);

  const cache::CacheManager& cache_;
  std::function<int32_t(engine::RequestId, int64_t)> true_token_;
  int accept_percent_;
  // [partition][group] -> cells of all pages, [num_pages * tokens_per_page]
  std::vector<std::vector<std::vector<Cell>>> store_;
  std::map<std::pair<int32_t, int32_t>, SlotState> slots_;  // (partition, slot)
  std::vector<std::string> errors_;
  int64_t num_pages_cleared_ = 0;
  bool fail_next_ = false;
};

}  // namespace dsv4::testing
