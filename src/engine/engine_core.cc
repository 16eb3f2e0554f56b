#include "engine/engine_core.h"

namespace dsv4 {

Result<std::vector<RequestOutput>> EngineCore::Step(StepRecord* record) {
  const StepPlan plan = scheduler_->Schedule();
  Result<StepResult> result = plan.empty() ? StepResult{plan.step_id, {}} : executor_->Run(plan);
  if (record != nullptr) {
    record->plan = plan;
    record->result = result.ok() ? *result : StepResult{plan.step_id, {}};
  }
  if (!result.ok()) {
    scheduler_->FailStep(plan, result.status());
  } else {
    DSV4_RETURN_IF_ERROR(scheduler_->Commit(plan, *result));
  }
  return scheduler_->TakeOutputs();
}

}  // namespace dsv4
