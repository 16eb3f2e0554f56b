// The composition root: the one place that knows every layer.  From a model
// directory and the engine flags it loads the model, sizes the cache from the
// memory budget, assembles the engine core (the cache the model declares,
// Model::DeclareCache; pools sized from a byte budget, CreateCache; the
// scheduler; the ModelExecutor with its sampler and draft proposer) and
// starts the engine thread (engine/local_engine.h) over it.  `dsv4 generate`,
// `serve`, `bench` and the tests start engines here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "base/thread_pool.h"
#include "checkpoint/model_config.h"
#include "dist/communicator.h"
#include "engine/cache_layout.h"
#include "engine/engine_core.h"
#include "engine/local_engine.h"
#include "engine/scheduler.h"
#include "launch/engine_options.h"
#include "model/model.h"
#include "runner/model_executor.h"
#include "speculation/draft_proposer.h"

namespace dsv4::launch {

// The scheduler flags of `options`.  The CPU forward has no prefill tile
// (any number of rows per call), so chunks are not padded: tile 1.
engine::SchedulerConfig SchedulerConfigFor(const EngineOptions& options);

// Prefix caching: snapshot buffers per runner slot (one working per running
// request + one published; docs/engine.md §7.2).
inline constexpr int64_t kSnapshotsPerSlot = 2;
// The prefix hashes' salt: the model's shape and weight bytes and the cache
// options (block size, K, per-slot state bytes).
uint64_t PrefixCacheSalt(const model::Model& model, const EngineOptions& options,
                         int64_t slot_bytes);

struct EngineParts {
  std::unique_ptr<runner::ModelExecutor> executor;
  // Rank 0 of several (BuildEngine's broadcast_plans): what the core calls,
  // sending each plan to the other ranks before running it on *executor.
  std::unique_ptr<engine::Executor> front;
  std::unique_ptr<engine::EngineCore> core;  // uses *executor
  cache::CapacityPlan plan;
  std::string description;  // capacity log line
};

// Builds scheduler, cache manager (budget_bytes for all partitions) and
// executor for `model`.  `proposer` replaces the MTP proposer (tests).
// `broadcast_plans` (rank 0 of an expert-parallel run, launch/ranks.h): the
// core runs parts.front, which sends every plan to the other ranks first.
// `only_partition` >= 0 (DP attention across ranks): the executor holds and
// runs that partition only, and rank 0's front gathers every rank's results.
Result<EngineParts> BuildEngine(const model::Model& model, ThreadPool* pool,
                                const EngineOptions& options, int64_t budget_bytes,
                                std::unique_ptr<speculation::DraftProposer> proposer = nullptr,
                                dist::Communicator* broadcast_plans = nullptr,
                                int32_t only_partition = -1);

// Loads options.model_dir, sizes the cache pools from the memory budget
// (--kv-cache-memory, else --memory-utilization of RAM after the weights are
// mapped) and starts the engine thread.
Result<std::unique_ptr<engine::AsyncEngine>> CreateLocalEngine(const EngineOptions& options);

// An engine thread over an already loaded model (not owned: it outlives the
// engine) with budget_bytes of cache.  `proposer` replaces the MTP proposer
// (tests).
Result<std::unique_ptr<engine::LocalEngine>> StartLocalEngine(
    const model::Model& model, const EngineOptions& options, int64_t budget_bytes,
    std::unique_ptr<speculation::DraftProposer> proposer = nullptr);

}  // namespace dsv4::launch
