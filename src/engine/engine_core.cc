#include "engine/engine_core.h"

#include "profile/profile.h"

namespace dsv4::engine {
namespace {

// The step span's batch arguments (docs/profiling.md "e2e level").
void StepArgs(const StepPlan& plan, profile::Span* step) {
  int64_t prefill = 0, decode = 0, drafts = 0;
  for (const ScheduledRequest& e : plan.requests) {
    (e.decode ? decode : prefill) += e.num_real_tokens();
    drafts += e.num_draft;
  }
  step->Arg("step", plan.step_id)
      .Arg("requests", static_cast<int64_t>(plan.requests.size()))
      .Arg("prefill_rows", prefill)
      .Arg("decode_rows", decode)
      .Arg("drafts", drafts);
}

void TraceEvent(const SchedulerEvent& ev) {
  switch (ev.kind) {
    case SchedulerEvent::Kind::kPreempt:
      profile::Instant(profile::kVerbose, "scheduler", "preempt",
                       {{"id", ev.id}, {"for", ev.cause}, {"recompute_tokens", ev.wanted}});
      break;
    case SchedulerEvent::Kind::kChunkShrunk:
      profile::Instant(profile::kVerbose, "scheduler", "chunk_shrunk",
                       {{"id", ev.id}, {"wanted", ev.wanted}, {"rows", ev.got}});
      break;
    case SchedulerEvent::Kind::kDraftsDropped:
      profile::Instant(profile::kVerbose, "scheduler", "drafts_dropped",
                       {{"id", ev.id}, {"wanted", ev.wanted}, {"drafts", ev.got}});
      break;
  }
}

// Verbose level: what the scheduler decided this step (admissions,
// restarts after preemption, released slots, preemptions, shrunk chunks,
// dropped drafts) and the pages it moved.
void TraceDecisions(const StepPlan& plan, const Scheduler& scheduler) {
  int64_t fresh = 0;
  for (const ScheduledRequest& e : plan.requests) {
    for (const auto& pages : e.fresh_pages) fresh += static_cast<int64_t>(pages.size());
    if (e.is_new) {
      profile::Instant(profile::kVerbose, "scheduler", e.start_pos == 0 ? "admit" : "resume",
                       {{"id", e.id},
                        {"partition", e.partition},
                        {"slot", e.slot},
                        {"rows", e.num_real_tokens()}});
    }
  }
  for (const ReleasedSlot& r : plan.released) {
    profile::Instant(profile::kVerbose, "scheduler", "release",
                     {{"id", r.id}, {"partition", r.partition}, {"slot", r.slot}});
  }
  for (const SchedulerEvent& ev : plan.events) TraceEvent(ev);
  const cache::CacheManager& cache = scheduler.cache();
  int64_t used = 0;
  for (int g = 0; g < cache.num_groups(); ++g) {
    for (int32_t p = 0; p < cache.num_partitions(); ++p) {
      used += cache.num_pages(g) - cache.num_free_pages(p, g);
    }
  }
  profile::Counter(profile::kVerbose, "scheduler", "requests",
                   {{"running", scheduler.num_running()}, {"waiting", scheduler.num_waiting()}});
  profile::Counter(profile::kVerbose, "cache", "pages",
                   {{"in_use", used}, {"fresh_this_step", fresh}});
}

}  // namespace

Result<std::vector<RequestOutput>> EngineCore::Step(StepRecord* record) {
  profile::Span step(profile::kE2e, "engine", "step");
  StepPlan plan;
  {
    profile::Span s(profile::kE2e, "engine", "schedule");
    plan = scheduler_->Schedule();
  }
  if (step) StepArgs(plan, &step);
  const int64_t exec_begin = step ? profile::NowNs() : 0;
  Result<StepResult> result = StepResult{plan.step_id, {}};
  if (!plan.empty()) {
    profile::Span s(profile::kE2e, "engine", "execute");
    result = executor_->Run(plan);
  }
  if (step) tracer_.OnStep(plan, exec_begin, profile::NowNs());
  if (record != nullptr) {
    record->plan = plan;
    record->result = result.ok() ? *result : StepResult{plan.step_id, {}};
  }
  {
    profile::Span s(profile::kE2e, "engine", "commit");
    if (!result.ok()) {
      scheduler_->FailStep(plan, result.status());
    } else {
      DSV4_RETURN_IF_ERROR(scheduler_->Commit(plan, *result));
    }
  }
  std::vector<RequestOutput> outputs = scheduler_->TakeOutputs();
  if (profile::Enabled(profile::kVerbose)) TraceDecisions(plan, *scheduler_);
  if (step) {
    int64_t accepted = 0;
    if (result.ok()) {
      for (const RequestResult& r : result->requests) accepted += r.num_accepted_drafts;
    }
    step.Arg("accepted", accepted);
  }
  if (tracer_.num_tracked() > 0) tracer_.OnOutputs(outputs, profile::NowNs());
  return outputs;
}

}  // namespace dsv4::engine
