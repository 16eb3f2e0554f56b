// The in-process AsyncEngine: one engine thread owns the model runner,
// scheduler and cache manager (architecture decision 5) and runs
// EngineCore::Step() while there is work, sleeping on a condition variable
// when idle.  Other threads Submit, Abort, read Stats and Shutdown; outputs
// reach them through callbacks run on the engine thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "engine/async_engine.h"
#include "model/model.h"
#include "runner/draft_proposer.h"
#include "runner/engine_options.h"
#include "runner/engine_setup.h"
#include "runner/sampler.h"

namespace dsv4 {

// Loads options.model_dir, sizes the cache pools from the memory budget
// (--kv-cache-memory, else --memory-utilization of RAM after the weights are
// mapped) and starts the engine thread.
Result<std::unique_ptr<AsyncEngine>> CreateLocalEngine(const EngineOptions& options);

class LocalEngine : public AsyncEngine {
 public:
  // An engine over an already loaded model (not owned; it outlives the
  // engine) with budget_bytes of cache.  `proposer` replaces the MTP proposer
  // (tests).  The engine thread runs on return.
  static Result<std::unique_ptr<LocalEngine>> Create(
      const Model& model, const EngineOptions& options, int64_t budget_bytes,
      std::unique_ptr<DraftProposer> proposer = nullptr);
  // Same, owning the model.
  static Result<std::unique_ptr<LocalEngine>> Create(std::unique_ptr<Model> model,
                                                     const EngineOptions& options,
                                                     int64_t budget_bytes);
  ~LocalEngine() override;  // Shutdown()

  Result<RequestId> Submit(GenerationRequest request, OutputCallback on_output) override;
  void Abort(RequestId id) override;
  EngineStats Stats() const override;
  bool Ready() const override;
  void Shutdown() override;

  // The capacity line logged at start-up.
  const std::string& capacity_description() const { return description_; }

 private:
  struct Submitted {
    Request request;
    OutputCallback on_output;
  };

  LocalEngine(const Model& model, const EngineOptions& options, EngineParts parts,
              std::unique_ptr<ThreadPool> pool);
  void Loop();
  // Engine thread: takes queued submissions and aborts into the core.
  bool Drain(std::vector<Submitted>* submitted, std::vector<RequestId>* aborts);
  void Deliver(const std::vector<RequestOutput>& outputs);
  void AbortAll();
  void UpdateStats();

  std::unique_ptr<Model> owned_model_;
  const Model& model_;
  const EngineOptions options_;
  std::unique_ptr<ThreadPool> pool_;
  const std::string description_;
  // Submit's parameter check, on the caller's thread: its own Sampler, so
  // callers never touch the engine thread's.  Validate is const and pure.
  const Sampler validator_;

  // A live request as the engine thread tracks it.
  struct Live {
    OutputCallback on_output;
    SpecStats spec;  // its speculation counters (logged when it ends)
  };

  // Engine thread only (no lock): the core and its executor, the live
  // requests, the global speculation counters.
  EngineParts parts_;
  std::unordered_map<RequestId, Live> live_;
  SpecStats spec_;

  // State below is protected by mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_;        // work arrived or stop requested
  std::vector<Submitted> submitted_;  // GUARDED_BY(mu_)
  std::vector<RequestId> aborts_;     // GUARDED_BY(mu_)
  RequestId next_id_ = 1;             // GUARDED_BY(mu_)
  bool stop_ = false;                 // GUARDED_BY(mu_)
  bool running_ = false;              // GUARDED_BY(mu_): the loop runs
  EngineStats stats_;                 // GUARDED_BY(mu_)
  int64_t num_queued_in_core_ = 0;    // GUARDED_BY(mu_): waiting in the scheduler

  std::thread thread_;  // started last, joined by Shutdown
};

}  // namespace dsv4
