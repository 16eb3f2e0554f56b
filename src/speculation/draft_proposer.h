// Speculative draft proposers (seed 002's DraftProposer): per-sequence state
// keyed by the model cache slot, drafts for the next step, and an update
// after each verified step.  The proposer owns its state and its cache (the
// MTP proposer: the model's MTP window cache); the runner only reads drafts
// and reports what the main model verified.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "engine/request.h"
#include "engine/sampling_params.h"
#include "model/forward_batch.h"
#include "sampling/sampler.h"
#include "tensor/numeric.h"

namespace dsv4::speculation {

// How the sequence's tokens are sampled: a drafter that draws like the
// target (MtpProposer's coupled drafts) needs the params, the request's
// random stream and where the prompt ends (penalties, output indices).
struct DraftSampling {
  engine::SamplingParams params;  // greedy by default
  sampling::SamplerState state;
  int64_t num_prompt = 0;
};

// One sequence's outcome in a step, in terms the proposer needs.
struct DraftUpdate {
  int64_t slot = 0;        // model cache slot
  int64_t start_pos = 0;   // position of the step's first row
  int64_t row_offset = 0;  // that row in the main batch (and its streams)
  // True tokens at positions [start_pos, start_pos + num_true_rows) (the
  // real rows and the accepted drafts, whose main-model results now stand),
  // followed by the token committed after them when `committed`.
  std::vector<int32_t> tokens;
  int64_t num_true_rows = 0;
  // A token was sampled after the true rows: propose drafts that follow it.
  bool committed = false;
  // Every token of the sequence known after the step (prompt first, the
  // committed token last); valid during AfterVerify only.
  std::span<const int32_t> history;
};

class DraftProposer {
 public:
  virtual ~DraftProposer() = default;

  // Most drafts one step can carry (K).
  virtual int32_t max_drafts() const = 0;
  // A fresh sequence (request `id`, sampled as `sampling` says) starts in
  // `slot` at position 0.
  virtual void AllocateState(int64_t slot, engine::RequestId id, const DraftSampling& sampling) = 0;
  // The sequence in `slot` is gone; its state must not leak into the next.
  virtual void FreeState(int64_t slot) = 0;
  // Prefix-cache hit (docs/engine.md §7.2): the fresh sequence in `slot`
  // (AllocateState'd) starts at `position` > 0, its proposer cache restored
  // with the model cache's slot; `pending` holds the main model's streams of
  // row position - 1, whose next token the sequence's first step supplies.
  // A proposer that cannot resume refuses (the request then fails).
  virtual Status Resume(int64_t slot, int64_t position, std::span<const bf16> pending) {
    (void)slot;
    (void)pending;
    return FailedPrecondition("this draft proposer cannot resume at position {} (prefix cache)",
                              position);
  }
  // Drafts for the positions after the slot's last committed token
  // (max_drafts() of them once a token was committed, else none).
  virtual std::span<const int32_t> Propose(int64_t slot) const = 0;
  // After the main forward of `batch` (streams [batch.num_tokens(), hc, D]:
  // the main model's pre-head streams), for the sequences in `updates`, which
  // may leave out sequences the proposer need not follow.  Drafts are
  // proposed for every update with `committed`.
  virtual Status AfterVerify(const model::ForwardBatch& batch, const bf16* streams,
                             std::span<const DraftUpdate> updates) = 0;
};

}  // namespace dsv4::speculation
