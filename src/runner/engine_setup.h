// Assembling an engine core from a loaded model: the cache the model declares
// (Model::DeclareCache), pools sized from a byte budget (CreateCache), the
// scheduler, and the ModelExecutor.  Shared by the engine thread (local_engine.h), the
// offline runner (offline.h) and tests.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "base/thread_pool.h"
#include "checkpoint/model_config.h"
#include "engine/cache_layout.h"
#include "engine/engine_core.h"
#include "engine/scheduler.h"
#include "model/model.h"
#include "runner/draft_proposer.h"
#include "runner/engine_options.h"
#include "runner/model_executor.h"

namespace dsv4 {

// The scheduler flags of `options`.  The CPU forward has no prefill tile
// (any number of rows per call), so chunks are not padded: tile 1.
SchedulerConfig SchedulerConfigFor(const EngineOptions& options);

struct EngineParts {
  std::unique_ptr<ModelExecutor> executor;
  std::unique_ptr<EngineCore> core;  // uses *executor
  CapacityPlan plan;
  std::string description;  // capacity log line
};

// Builds scheduler, cache manager (budget_bytes for all partitions) and
// executor for `model`.  `proposer` replaces the MTP proposer (tests).
Result<EngineParts> BuildEngine(const Model& model, ThreadPool* pool, const EngineOptions& options,
                                int64_t budget_bytes,
                                std::unique_ptr<DraftProposer> proposer = nullptr);

}  // namespace dsv4
