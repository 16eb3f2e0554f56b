// Offline generation: run a set of requests through an engine to completion
// and report outputs, timing and speculation statistics.  Shared by
// `dsv4 generate` (prints the outputs) and `dsv4 bench` (prints the numbers).
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "engine/async_engine.h"

namespace dsv4::engine {

struct OfflineOutput {
  RequestId id = 0;
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;
  FinishReason finish = FinishReason::kNone;
  Status error;
  double first_token_seconds = 0;  // from submission to the first token
  double total_seconds = 0;        // from submission to the final output
  int64_t num_draft_tokens = 0;
  int64_t num_accepted_tokens = 0;
  int64_t num_cached_tokens = 0;  // prompt tokens served from the prefix cache
};

struct OfflineReport {
  std::vector<OfflineOutput> outputs;  // in request order
  double wall_seconds = 0;
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  double mean_first_token_seconds = 0;
  // Speculation over the run (EngineStats differences): drafts proposed,
  // accepted, per draft position, and tokens committed per verify step.
  int64_t spec_verify_steps = 0;
  int64_t spec_draft_tokens = 0;
  int64_t spec_accepted_tokens = 0;
  std::vector<int64_t> spec_accepted_per_pos;
  double mean_accepted_length = 0;

  double generated_tokens_per_second() const {
    return wall_seconds > 0 ? static_cast<double>(generated_tokens) / wall_seconds : 0;
  }
};

// Submits every request at once and waits for all of them.  A request the
// engine refuses at submission fails the call (nothing else is submitted
// after it; those already submitted are aborted).
Result<OfflineReport> RunOffline(AsyncEngine& engine, std::vector<GenerationRequest> requests);

}  // namespace dsv4::engine
