// The engine as other threads see it (architecture decision 5): one engine
// thread owns scheduler, cache manager and runner; callers talk to it through
// this thread-safe interface.  Token ids only: JSON, chat encoding,
// detokenization, stop strings and output parsing stay on the caller's side.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/request.h"
#include "engine/sampling_params.h"

namespace dsv4::engine {

// What a caller submits: the engine's Request (Submit assigns the id and
// adds EOS to stop_token_ids unless sampling.ignore_eos; max_draft_tokens -1
// = the engine's K).
using GenerationRequest = Request;

// Delivered in order per request; the last one has finish != kNone.
using GenerationOutput = RequestOutput;

struct EngineStats {
  int64_t num_running = 0;
  int64_t num_waiting = 0;
  double cache_usage = 0;  // fraction of the cache pools' bytes in use, [0, 1]
  int64_t prompt_tokens_total = 0;
  int64_t generation_tokens_total = 0;
  int64_t spec_num_drafts = 0;  // verify steps that carried drafts
  int64_t spec_num_draft_tokens = 0;
  int64_t spec_num_accepted_tokens = 0;
  std::vector<int64_t> spec_accepted_per_pos;  // [K]
  // Prefix caching (vLLM's counters, in tokens): prompt tokens looked up at
  // admission and tokens found in the cache.
  int64_t prefix_cache_queries = 0;
  int64_t prefix_cache_hits = 0;
};

class AsyncEngine {
 public:
  using OutputCallback = std::function<void(const GenerationOutput&)>;
  virtual ~AsyncEngine() = default;

  // Queues a request.  on_output runs on the engine thread after every step
  // that produced something for it: it must be cheap and must not call back
  // into the engine (push to a queue and return).  Errors: InvalidArgument
  // for a malformed request (empty prompt, id >= vocab, prompt + max_tokens
  // over max_model_len), ResourceExhausted when the waiting queue is full.
  virtual Result<RequestId> Submit(GenerationRequest request, OutputCallback on_output) = 0;
  // Aborts a request at any point; its final output (kAbort) follows within
  // one engine step.  Unknown or finished ids are ignored.
  virtual void Abort(RequestId id) = 0;
  virtual EngineStats Stats() const = 0;
  // True once weights and caches are loaded and the loop runs.
  virtual bool Ready() const = 0;
  // Stops the loop; in-flight requests finish with kAbort.
  virtual void Shutdown() = 0;
};

}  // namespace dsv4::engine
