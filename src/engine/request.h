// Requests as the engine sees them: token ids in, token ids out (the engine
// never sees a string; text/ and server/ own encoding and stop strings).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "base/status.h"
#include "engine/sampling_params.h"

namespace dsv4::engine {

using RequestId = int64_t;

// One output token's log-probabilities (when SamplingParams::logprobs >= 0).
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;  // of the sampled token: log-softmax of the raw logits (vLLM's default)
  std::vector<std::pair<int32_t, float>> top;  // top-N (token, logprob), descending
};

// A request as callers submit it (AsyncEngine::Submit, where it is also
// called GenerationRequest; Submit assigns `id`) and as the scheduler holds it.
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
// output has finish != kNone.  AsyncEngine delivers these as they are
// (GenerationOutput): everything a step produced for the request travels in
// its StepResult and from there in this output.
struct RequestOutput {
  RequestId id = 0;
  std::vector<int32_t> new_tokens;     // committed this step (after stop/length truncation)
  std::vector<TokenLogprob> logprobs;  // aligned with new_tokens when requested
  FinishReason finish = FinishReason::kNone;
  Status error;  // set with kError
  // Speculation in the step that produced new_tokens: drafts verified and
  // accepted (before stop/length truncation).
  int32_t num_draft_tokens = 0;
  int32_t num_accepted_tokens = 0;
  // Prompt tokens served from the prefix cache at the request's first
  // admission (usage.prompt_tokens_details.cached_tokens); the same in every
  // output of the request.
  int64_t num_cached_tokens = 0;
};

// Speculation counters (the reference's per-request and global acceptance
// lines), accumulated from outputs by whoever reports them.
struct SpecStats {
  int64_t num_verify_steps = 0;  // steps that carried drafts
  int64_t num_draft_tokens = 0;
  int64_t num_accepted_tokens = 0;
  std::vector<int64_t> accepted_per_pos;  // [K]: drafts accepted at draft index i

  void Add(int32_t num_draft, int32_t num_accepted) {
    if (num_draft <= 0) return;
    ++num_verify_steps;
    num_draft_tokens += num_draft;
    num_accepted_tokens += num_accepted;
    if (accepted_per_pos.size() < static_cast<size_t>(num_draft)) {
      accepted_per_pos.resize(static_cast<size_t>(num_draft), 0);
    }
    for (int32_t i = 0; i < num_accepted; ++i) ++accepted_per_pos[static_cast<size_t>(i)];
  }
  void Add(const RequestOutput& o) { Add(o.num_draft_tokens, o.num_accepted_tokens); }
  // Tokens committed per verify step (accepted + 1); 0 without verify steps.
  double MeanAcceptedLength() const {
    if (num_verify_steps == 0) return 0;
    return static_cast<double>(num_accepted_tokens + num_verify_steps) /
           static_cast<double>(num_verify_steps);
  }
};

}  // namespace dsv4::engine
