// The one step contract between scheduler and executor (architecture
// decision 1): the scheduler emits a StepPlan, the executor returns a
// StepResult, nothing else crosses.  Plain integers: the runner layer maps a
// plan onto the model's ForwardBatch (positions, per-group slot mappings,
// draft rows) and the device-side pools.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "cache/cache_manager.h"
#include "engine/request.h"

namespace dsv4::engine {

// Token id of a draft row in ScheduledRequest::token_ids: the scheduler only
// reserves the position; the runner fills in the draft its MTP state holds.
inline constexpr int32_t kDraftToken = -1;

// One request's rows in a step: positions [start_pos, start_pos + num_tokens),
// a prefill chunk or one decode row, followed by num_draft reserved draft rows.
struct ScheduledRequest {
  RequestId id = 0;
  int32_t partition = 0;    // DP rank; its page ids and slot are local to it
  int32_t slot = 0;         // per-request runner state (MTP tail/draft, sampler)
  uint32_t generation = 0;  // of the slot; a runner ignores state of another generation
  // First step of this (slot, generation): the runner (re)initialises the
  // slot's state.  Also true after preemption, which recomputes from 0.
  bool is_new = false;
  // Set when is_new (a new request carries its parameters once): how the
  // runner samples, and which of the tokens the slot will see are prompt
  // (penalties treat prompt and outputs differently).
  SamplingParams sampling;
  int64_t num_prompt_tokens = 0;
  int64_t start_pos = 0;           // == computed tokens of the request
  std::vector<int32_t> token_ids;  // [num_tokens]; the last num_draft are kDraftToken
  int32_t num_draft = 0;
  // Rows a tiled prefill kernel runs: the real rows rounded up to the prefill
  // tile (pad rows are the runner's business and never write a cache).
  // Equal to num_tokens() for a decode row (one real row, the tail, plus drafts).
  int64_t num_padded_tokens = 0;
  // Sample after the last real row (and verify the drafts).  False for a
  // prefill chunk that does not reach the end of the known tokens.
  bool needs_logits = false;
  // [num_groups] the request's pages after this step's allocation.  Positions
  // in a ring's hole (kNoPage) are not stored: slot mapping -1.
  std::vector<cache::BlockTable> block_tables;
  // [num_groups] pages newly mapped for this request in this step, to clear
  // before the step writes them (a previous owner's data is in them).
  cache::FreshPages fresh_pages;

  // One tail row (+ drafts) of a request past its terminal prefill; false
  // for prefill chunks (including a recompute after preemption).
  bool decode = false;

  // Prefix caching (docs/engine.md §7.2).  restore_snapshot >= 0 (with
  // is_new): positions [0, start_pos) are a cache hit; the runner restores the
  // slot's rolling state from that snapshot id of the partition (the pages of
  // those positions are the first start_pos / block entries of the block
  // tables), and prefix_token_ids are their tokens (sampling history).
  int32_t restore_snapshot = -1;
  std::vector<int32_t> prefix_token_ids;
  // save_snapshot >= 0: after the step, when the request's computed positions
  // end exactly at save_at (a page boundary: every real row and accepted
  // draft), the runner saves the slot's rolling state into that snapshot id.
  int32_t save_snapshot = -1;
  int64_t save_at = 0;

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  int64_t num_real_tokens() const { return num_tokens() - num_draft; }
};

// A runner slot given up since the previous plan (finish, abort, preemption,
// failure).  The runner drops the slot's state before running the plan; the
// same slot may reappear in this plan with a newer generation.
struct ReleasedSlot {
  RequestId id = 0;
  int32_t partition = 0;
  int32_t slot = 0;
  uint32_t generation = 0;
};

// A decision the scheduler took beyond handing out rows, in the order taken.
// Informational: the executor ignores it; the engine traces it at the verbose
// profile level (docs/profiling.md "verbose level") and tests read it.
struct SchedulerEvent {
  enum class Kind {
    kPreempt,        // `id` lost its pages so that `cause` could run
    kChunkShrunk,    // `id`'s prefill chunk cut from `wanted` to `got` rows to fit the pages
    kDraftsDropped,  // `id` decodes with `got` of the `wanted` draft rows (pages or budget)
  };
  Kind kind = Kind::kPreempt;
  RequestId id = 0;
  RequestId cause = 0;  // kPreempt only
  int64_t wanted = 0;   // kPreempt: the victim's computed tokens, now to recompute
  int64_t got = 0;
};

struct StepPlan {
  uint64_t step_id = 0;
  std::vector<ScheduledRequest> requests;  // oldest arrival first
  std::vector<ReleasedSlot> released;
  std::vector<SchedulerEvent> events;  // preemptions, shrunk chunks, dropped drafts (few per step)
  int64_t num_tokens = 0;              // Σ num_tokens over requests (<= --max-num-batched-tokens)

  bool empty() const { return requests.empty() && released.empty(); }
};

struct RequestResult {
  RequestId id = 0;
  uint32_t generation = 0;  // echoed from the plan
  // Committed tokens: none for a prefill chunk without logits; otherwise the
  // accepted drafts plus one target token (1 .. num_draft + 1 tokens).
  std::vector<int32_t> tokens;
  int32_t num_accepted_drafts = 0;  // == tokens.size() - 1 when tokens is non-empty
  // The draft tokens the step verified (the plan's num_draft of them when
  // tokens is non-empty; the first num_accepted_drafts equal tokens).
  std::vector<int32_t> drafts;
  // One per token in `tokens` when the request asked for logprobs, else none.
  std::vector<TokenLogprob> logprobs;
  // Non-OK: this request's step failed (e.g. its logits were not finite);
  // it finishes with kError and this status, the plan's other requests go on.
  Status error;
};

struct StepResult {
  uint64_t step_id = 0;
  std::vector<RequestResult> requests;
};

}  // namespace dsv4::engine
