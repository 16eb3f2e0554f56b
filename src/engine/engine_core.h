// The engine loop body: schedule -> run -> commit.  Owned and driven by the
// one engine thread (architecture decision 5); not thread-safe.
#pragma once

#include <memory>
#include <vector>

#include "base/status.h"
#include "engine/executor.h"
#include "engine/request_trace.h"
#include "engine/scheduler.h"

namespace dsv4::engine {

// One step as it crossed the step contract.
struct StepRecord {
  StepPlan plan;
  StepResult result;  // empty when the executor failed
};

class EngineCore {
 public:
  // `executor` must outlive the engine.
  EngineCore(std::unique_ptr<Scheduler> scheduler, Executor* executor)
      : scheduler_(std::move(scheduler)), executor_(executor) {}

  Status AddRequest(Request request) { return scheduler_->AddRequest(std::move(request)); }
  Status Abort(RequestId id) { return scheduler_->Abort(id); }
  // One step; returns every output produced since the previous call (new
  // tokens, finishes, aborts, failures).  An executor error fails only the
  // step's requests; an error is returned only for a broken step contract.
  // `record` (optional: tracing, tests) receives the step's plan and result.
  Result<std::vector<RequestOutput>> Step(StepRecord* record = nullptr);

  bool HasUnfinished() const { return scheduler_->HasUnfinished(); }
  const Scheduler& scheduler() const { return *scheduler_; }
  // Request lifetimes in the trace (e2e level): Step feeds it; the engine
  // thread reports submissions (LocalEngine::Admit).
  RequestTracer& tracer() { return tracer_; }

 private:
  std::unique_ptr<Scheduler> scheduler_;
  Executor* executor_;
  RequestTracer tracer_;
};

}  // namespace dsv4::engine
