// Shared pieces of the runner tests: the tiny-a model, prompts that cross
// the window, compression blocks and cache pages, and a driver that runs an
// EngineCore to completion.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "base/thread_pool.h"
#include "launch/engine_setup.h"
#include "model/model.h"

namespace dsv4::testing {

// tiny-a, loaded once per process (immutable, shared by all tests).
const model::Model& TinyModel();
ThreadPool* TestPool();

// Prompt i of a deterministic family: lengths 1..~300 (crossing the window
// of 16, the 4- and 128-token compression blocks and 16/32-token pages).
std::vector<int32_t> TestPrompt(int64_t i, int64_t vocab);
int64_t TestPromptLength(int64_t i);

// Small-engine defaults: block size 128 (tiny-a has ratio 128), max_model_len 512.
launch::EngineOptions TestOptions(int32_t k);

struct Finished {
  std::vector<int32_t> tokens;
  engine::FinishReason reason = engine::FinishReason::kNone;
};

struct RunStats {
  int64_t num_steps = 0;
  int64_t num_preemptions = 0;
  engine::SpecStats spec;
};

// Submits requests[i] (ids 1..n) `stagger` steps apart (0: all at once),
// steps until every request is finished, checks the scheduler's invariants
// after every step.  budget_bytes 0: generous.
std::map<engine::RequestId, Finished> RunToCompletion(
    const launch::EngineOptions& options, const std::vector<engine::Request>& requests,
    int64_t budget_bytes = 0, int stagger = 0, RunStats* stats = nullptr,
    std::unique_ptr<speculation::DraftProposer> proposer = nullptr);

}  // namespace dsv4::testing
