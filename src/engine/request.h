// Requests as the engine sees them: token ids in, token ids out (the engine
// never sees a string; text/ and server/ own encoding and stop strings).
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "engine/sampling_params.h"

namespace dsv4 {

using RequestId = int64_t;

struct Request {
  RequestId id = 0;
  std::vector<int32_t> prompt;          // [num_prompt_tokens], non-empty
  int64_t max_tokens = 16;              // output tokens at most (>= 1)
  std::vector<int32_t> stop_token_ids;  // finishing tokens (EOS unless ignored); kept in the output
  // Draft positions per decode step at most; -1 means the engine's K.  0
  // turns speculation off for this request (e.g. sampled requests while only
  // greedy verification exists).
  int32_t max_draft_tokens = -1;
  SamplingParams sampling;  // for the runner's sampler; the scheduler only forwards it
};

enum class FinishReason : uint8_t {
  kNone = 0,  // still running
  kStop,      // produced a stop token
  kLength,    // reached max_tokens or --max-model-len
  kAbort,     // aborted by the caller
  kError,     // its step failed; `error` says why
};

const char* FinishReasonName(FinishReason reason);

// Produced by Commit, Abort and failed steps, in order; a request's last
// output has finish != kNone.
struct RequestOutput {
  RequestId id = 0;
  std::vector<int32_t> new_tokens;  // committed this step (after stop/length truncation)
  FinishReason finish = FinishReason::kNone;
  Status error;  // set with kError
};

}  // namespace dsv4
