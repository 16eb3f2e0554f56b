// Token selection from logits: sampling one row and verifying speculative
// drafts (the sampling layer: penalties, temperature, min_p/top_k/top_p,
// seeded streams, logprobs, rejection-sampling verification).
//
// Determinism: a request's random stream is counter-based.  The draws that
// choose output token i depend only on (SamplerState::seed, i), never on the
// batch, the step, speculation or preemption: a seeded request produces the
// same tokens however it is scheduled, and the output index alone resumes
// the stream after a recompute.
//
// Thread safety: a Sampler holds scratch; one per engine thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "engine/request.h"
#include "engine/sampling_params.h"

namespace dsv4::sampling {

// Per-request random stream (see above: a seed is all the state there is).
struct SamplerState {
  uint64_t seed = 0;

  // SamplingParams::seed when set, else `request_seed` (derived by the runner
  // from the request id, so unseeded requests differ from each other).
  static SamplerState ForRequest(const engine::SamplingParams& params, uint64_t request_seed) {
    return SamplerState{params.seed.value_or(request_seed)};
  }
};

// What the penalties see: the request's prompt and the outputs before the
// token being chosen (output.size() is that token's output index).
struct TokenHistory {
  std::span<const int32_t> prompt;
  std::span<const int32_t> output;
};

struct VerifyResult {
  // Committed tokens: the accepted drafts, then one target token (the
  // correction at the first rejection, or the bonus after the last draft).
  std::vector<int32_t> tokens;  // [num_accepted + 1]
  int32_t num_accepted = 0;
};

class Sampler {
 public:
  explicit Sampler(int64_t vocab);
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  int64_t vocab() const { return vocab_; }

  // Params must pass ValidateSamplingParams (engine/sampling_params.h).
  // Chooses output token history.output.size() from logits [vocab] (FP32,
  // unmodified by the call).  Greedy: argmax after penalties, lowest id on
  // ties.  logprob (optional) receives the chosen token's logprob and the
  // top params.logprobs alternatives.
  int32_t Sample(const float* logits, const engine::SamplingParams& params,
                 const SamplerState& state, const TokenHistory& history,
                 engine::TokenLogprob* logprob);

  // Speculative verification.  target_logits [drafts.size() + 1, vocab]: row
  // j scores the token after drafts[0..j) (row 0: after the tail).
  // draft_probs [drafts.size(), vocab]: the proposer's distribution for each
  // draft, or nullptr for deterministic (argmax) drafts, i.e. point masses.
  // Greedy params: accept while drafts[j] == the row's greedy choice, then
  // commit that choice (the linear-chain rule, docs/sampling.md §4), so greedy
  // output equals greedy output without speculation.  Sampled params:
  // rejection sampling (accept drafts[j] with probability min(1, p/q); on
  // rejection draw from norm(max(0, p - q)); after all accepted draw the
  // bonus from the last row), which leaves the output distribution that of
  // plain sampling.  Row j is processed with history.output extended by
  // drafts[0..j).  logprobs (optional) receives one entry per committed
  // token.
  VerifyResult Verify(const float* target_logits, std::span<const int32_t> drafts,
                      const float* draft_probs, const engine::SamplingParams& params,
                      const SamplerState& state, const TokenHistory& history,
                      std::vector<engine::TokenLogprob>* logprobs);

 private:
  struct Scratch;
  int64_t vocab_;
  std::unique_ptr<Scratch> scratch_;
};

}  // namespace dsv4::sampling
