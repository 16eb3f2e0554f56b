// Request lifetimes in the trace (docs/profiling.md "e2e level"): one async
// track per request id, category "request", holding nested slices
//   request ─┬─ queued              submit -> first step that runs it
//            ├─ prefill ── chunk*   one chunk slice per prefill step
//            └─ decode              first decode row -> finish
// and closed with the finish reason.  Engine thread only (EngineCore and
// LocalEngine call it); costs nothing while the e2e level is off.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "engine/request.h"
#include "engine/step.h"

namespace dsv4::engine {

class RequestTracer {
 public:
  // A request entered the engine (Submit) at `submit_ns` (profile::NowNs()).
  void OnSubmitted(const Request& request, int64_t submit_ns);
  // A step ran `plan` over [begin_ns, end_ns) (its execute part).
  void OnStep(const StepPlan& plan, int64_t begin_ns, int64_t end_ns);
  // Closes the tracks of requests that finished in `outputs`.
  void OnOutputs(const std::vector<RequestOutput>& outputs, int64_t now_ns);

  size_t num_tracked() const { return live_.size(); }

 private:
  enum class Phase : uint8_t { kQueued, kPrefill, kDecode };
  struct Live {
    uint32_t session = 0;  // the trace session that holds the track's begin
    Phase phase = Phase::kQueued;
    int64_t prefill_chunks = 0;
    int64_t decode_steps = 0;
    int64_t output_tokens = 0;
    int64_t preemptions = 0;
  };
  void EndPhase(RequestId id, const Live& live, int64_t ts);

  std::unordered_map<RequestId, Live> live_;
};

}  // namespace dsv4::engine
