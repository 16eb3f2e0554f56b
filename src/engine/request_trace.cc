#include "engine/request_trace.h"

#include "profile/profile.h"

namespace dsv4::engine {
namespace {

constexpr const char* kCat = "request";

const char* PhaseName(int phase) {
  static constexpr const char* kNames[] = {"queued", "prefill", "decode"};
  return kNames[phase];
}

}  // namespace

void RequestTracer::OnSubmitted(const Request& request, int64_t submit_ns) {
  if (!profile::Enabled(profile::kE2e)) return;
  const auto id = static_cast<uint64_t>(request.id);
  profile::AsyncBegin(profile::kE2e, kCat, "request", id, submit_ns,
                      {{"id", request.id},
                       {"prompt_tokens", static_cast<int64_t>(request.prompt.size())},
                       {"max_tokens", request.max_tokens}});
  profile::AsyncBegin(profile::kE2e, kCat, "queued", id, submit_ns);
  live_[request.id] = Live{profile::CurrentSession()};
}

void RequestTracer::EndPhase(RequestId id, const Live& live, int64_t ts) {
  const auto track = static_cast<uint64_t>(id);
  switch (live.phase) {
    case Phase::kQueued:
      profile::AsyncEnd(profile::kE2e, kCat, "queued", track, ts);
      break;
    case Phase::kPrefill:
      profile::AsyncEnd(profile::kE2e, kCat, "prefill", track, ts,
                        {{"chunks", live.prefill_chunks}});
      break;
    case Phase::kDecode:
      profile::AsyncEnd(profile::kE2e, kCat, "decode", track, ts,
                        {{"steps", live.decode_steps}, {"tokens", live.output_tokens}});
      break;
  }
}

void RequestTracer::OnStep(const StepPlan& plan, int64_t begin_ns, int64_t end_ns) {
  if (live_.empty()) return;
  const uint32_t session = profile::CurrentSession();
  for (const ScheduledRequest& e : plan.requests) {
    auto it = live_.find(e.id);
    if (it == live_.end()) continue;
    Live& live = it->second;
    if (live.session != session) {  // begun in an earlier session (or profiling is off)
      live_.erase(it);
      continue;
    }
    const auto track = static_cast<uint64_t>(e.id);
    // A request preempted by recompute comes back is_new from position 0.
    const bool restart = e.is_new && live.phase != Phase::kQueued;
    if (restart) ++live.preemptions;
    const Phase phase = e.decode ? Phase::kDecode : Phase::kPrefill;
    if (phase != live.phase || restart) {
      EndPhase(e.id, live, begin_ns);
      live.phase = phase;
      profile::AsyncBegin(profile::kE2e, kCat, PhaseName(static_cast<int>(phase)), track, begin_ns);
    }
    if (phase == Phase::kPrefill) {
      ++live.prefill_chunks;
      profile::AsyncBegin(
          profile::kE2e, kCat, "chunk", track, begin_ns,
          {{"rows", e.num_real_tokens()}, {"start_pos", e.start_pos}, {"step", plan.step_id}});
      profile::AsyncEnd(profile::kE2e, kCat, "chunk", track, end_ns);
    } else {
      ++live.decode_steps;
    }
  }
}

void RequestTracer::OnOutputs(const std::vector<RequestOutput>& outputs, int64_t now_ns) {
  if (live_.empty()) return;
  const uint32_t session = profile::CurrentSession();
  for (const RequestOutput& o : outputs) {
    auto it = live_.find(o.id);
    if (it == live_.end()) continue;
    Live& live = it->second;
    live.output_tokens += static_cast<int64_t>(o.new_tokens.size());
    if (o.finish == FinishReason::kNone) continue;
    if (live.session == session) {
      EndPhase(o.id, live, now_ns);
      profile::AsyncEnd(profile::kE2e, kCat, "request", static_cast<uint64_t>(o.id), now_ns,
                        {{"output_tokens", live.output_tokens},
                         {"prefill_chunks", live.prefill_chunks},
                         {"decode_steps", live.decode_steps},
                         {"preemptions", live.preemptions}},
                        "finish_reason", FinishReasonName(o.finish));
    }
    live_.erase(it);
  }
}

}  // namespace dsv4::engine
