// What runs a StepPlan: the model runner in production, a fake in tests.
#pragma once

#include "base/status.h"
#include "engine/step.h"

namespace dsv4::engine {

class Executor {
 public:
  virtual ~Executor() = default;
  // Runs one plan: first drops the state of plan.released slots, then clears
  // every fresh page, then computes the rows and samples/verifies where
  // needs_logits.  Plans arrive in step order; an executor that overlaps
  // steps must still apply them in that order, because pages and slots named
  // free by one plan are reused by the next.  An error fails the requests of
  // this plan only; its lifecycle changes (released and new slots) still
  // take effect.
  virtual Result<StepResult> Run(const StepPlan& plan) = 0;
};

}  // namespace dsv4::engine
