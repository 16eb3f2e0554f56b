// The in-process AsyncEngine: one engine thread owns the engine core (its
// scheduler and cache manager) and the executor (architecture decision 5)
// and runs EngineCore::Step() while there is work, sleeping on a condition
// variable when idle.  Other threads Submit, Abort, read Stats and Shutdown;
// outputs reach them through callbacks run on the engine thread.
//
// The engine thread knows the executor only through engine/executor.h: what
// runs the model (and the model, its thread pool) is assembled by the
// composition root (launch/engine_setup.h) and handed in.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "cache/capacity.h"
#include "engine/async_engine.h"
#include "engine/engine_core.h"
#include "engine/executor.h"

namespace dsv4::engine {

// What Submit checks a request against, and how the cache usage of Stats is
// priced.
struct LocalEngineConfig {
  int64_t vocab_size = 0;
  int64_t eos_token_id = -1;   // added to stop_token_ids unless ignore_eos
  int64_t max_model_len = 0;   // prompt + max_tokens at most
  int64_t max_waiting = 1024;  // queued requests beyond which Submit fails
  cache::CapacityPlan plan;    // the cache plan the core's pools follow
  std::string description;     // the capacity line logged at start-up
  // Seconds between the periodic statistics lines (stats_log.h); 0 = none.
  double log_stats_interval_s = 0;
};

// Everything the engine thread runs, in destruction order from last to
// first: `resources` (the model, thread pool, ... the executor uses) outlive
// the executor, which outlives the core that calls it.
struct LocalEngineParts {
  std::shared_ptr<void> resources;
  std::unique_ptr<Executor> executor;
  std::unique_ptr<EngineCore> core;  // calls *executor
};

class LocalEngine : public AsyncEngine {
 public:
  // Starts the engine thread; it runs on return.
  static Result<std::unique_ptr<LocalEngine>> Start(LocalEngineConfig config,
                                                    LocalEngineParts parts);
  ~LocalEngine() override;  // Shutdown()

  Result<RequestId> Submit(GenerationRequest request, OutputCallback on_output) override
      EXCLUDES(mu_);
  void Abort(RequestId id) override EXCLUDES(mu_);
  EngineStats Stats() const override EXCLUDES(mu_);
  bool Ready() const override EXCLUDES(mu_);
  void Shutdown() override EXCLUDES(mu_);

  const std::string& capacity_description() const { return config_.description; }

 private:
  struct Submitted {
    Request request;
    OutputCallback on_output;
    int64_t submit_ns = 0;  // profile::NowNs() at Submit while the e2e level is on
  };
  // A live request as the engine thread tracks it.
  struct Live {
    OutputCallback on_output;
    SpecStats spec;  // its speculation counters (logged when it ends)
  };

  LocalEngine(LocalEngineConfig config, LocalEngineParts parts);
  Status Check(const Request& request) const;
  void Loop() EXCLUDES(mu_);
  // Engine thread: waits for work, then takes queued submissions and aborts.
  // False when the engine must stop.
  bool Drain(std::vector<Submitted>* submitted, std::vector<RequestId>* aborts) EXCLUDES(mu_);
  void Admit(std::vector<Submitted>* submitted);
  void Deliver(const std::vector<RequestOutput>& outputs) EXCLUDES(mu_);
  void AbortAll() EXCLUDES(mu_);
  void UpdateStats() EXCLUDES(mu_);
  // Logs the periodic statistics line when the interval has passed.
  void MaybeLogStats() EXCLUDES(mu_);

  const LocalEngineConfig config_;

  // Engine thread only (no lock): the core and its executor, the live
  // requests, the global speculation counters.
  LocalEngineParts parts_;
  std::unordered_map<RequestId, Live> live_;
  SpecStats spec_;
  std::chrono::steady_clock::time_point stats_logged_at_ = std::chrono::steady_clock::now();
  EngineStats stats_logged_;  // the statistics of the previous line

  mutable Mutex mu_;
  CondVar cv_;  // work arrived or stop requested
  std::vector<Submitted> submitted_ GUARDED_BY(mu_);
  std::vector<RequestId> aborts_ GUARDED_BY(mu_);
  RequestId next_id_ GUARDED_BY(mu_) = 1;
  bool stop_ GUARDED_BY(mu_) = false;
  bool running_ GUARDED_BY(mu_) = false;  // the loop runs
  EngineStats stats_ GUARDED_BY(mu_);
  int64_t num_queued_in_core_ GUARDED_BY(mu_) = 0;  // waiting in the scheduler

  std::thread thread_;  // started last, joined by Shutdown
};

}  // namespace dsv4::engine
