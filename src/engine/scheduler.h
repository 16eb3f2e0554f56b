// Continuous-batching scheduler: one token budget per step, no prefill or
// decode phase (architecture decision 1).  Each running request's computed
// count chases its token count plus reserved draft positions; prefill chunks
// and decode rows share a step.
//
// Policy (docs/engine.md has the reasoning):
//   - Running requests are visited oldest arrival first.  A decode row costs
//     1 + K tokens; a prefill chunk is cut to the per-request extent
//     min(8192, budget, --long-prefill-token-threshold, --max-model-len) and
//     to what the budget leaves after reserving the rows of later decoders
//     (so a long prompt never stalls decoding), and non-final chunks are cut
//     to whole prefill tiles.
//   - Cache pages (all groups, including draft positions across page
//     boundaries) are reserved before dispatch.  When they do not fit:
//     drop the drafts, then shrink a prefill chunk, then preempt.
//   - Preemption is by recompute.  Victim: a running request on the same
//     partition that arrived later than the one in need and is not yet in
//     this step, the cheapest to recompute (fewest computed tokens), newest on
//     ties.  The oldest request can therefore always progress, so nothing
//     livelocks; a victim keeps its arrival order and outputs and is not
//     re-admitted in the same Schedule call.
//   - Admission in arrival order to the least-loaded partition (fewest held
//     tokens, rotating ties) that has a slot and the pages for the whole
//     first chunk (a running request may shrink its chunk; a new one is not
//     admitted into scraps only to be preempted again); a request that
//     does not fit is skipped (no head-of-line blocking) until the oldest
//     waiting request has been skipped --max-admission-skips times, after
//     which admission waits for it (no starvation of large requests).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "cache/cache_manager.h"
#include "engine/request.h"
#include "engine/slot_pool.h"
#include "engine/step.h"

namespace dsv4::engine {

struct SchedulerConfig {
  int64_t max_num_batched_tokens = 8192;     // token budget of one step (drafts included)
  int64_t max_num_seqs = 256;                // running requests at most
  int64_t long_prefill_token_threshold = 0;  // per-request chunk cap; 0 = none of its own
  int64_t max_model_len = 0;                 // positions per request
  int64_t max_prefill_extent = 8192;         // kernel ceiling of one request's chunk
  int64_t prefill_tile = 128;                // kernel tile; chunks are padded to it
  int32_t num_speculative_tokens = 0;        // K draft positions per decode step
  int32_t num_partitions = 1;                // --dp
  int32_t max_admission_skips = 16;          // bypasses of the oldest waiting request
  // Runner slots per partition (per-slot ring storage bounds how many
  // requests a partition can run); 0 = max_num_seqs (any partition may then
  // hold every running request).
  int64_t slots_per_partition = 0;

  Status Validate() const;
  // min(max_prefill_extent, max_num_batched_tokens, threshold, max_model_len).
  int64_t PrefillExtent() const;
  int64_t SlotsPerPartition() const {
    return slots_per_partition > 0 ? slots_per_partition : max_num_seqs;
  }
};

struct SchedulerStats {
  int64_t num_steps = 0;
  int64_t num_preemptions = 0;
  int64_t num_draft_tokens = 0;  // draft positions dispatched
  int64_t num_accepted_drafts = 0;
  // Prefix caching (vLLM's counters, in tokens): tokens looked up at
  // admission and tokens found.
  int64_t prefix_cache_queries = 0;
  int64_t prefix_cache_hits = 0;
};

class Scheduler {
 public:
  // `cache` must have config.num_partitions partitions.
  static Result<std::unique_ptr<Scheduler>> Create(const SchedulerConfig& config,
                                                   cache::CacheManager cache);

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request.  InvalidArgument for an empty prompt, a negative token
  // id, max_tokens < 1, a prompt that leaves no room under --max-model-len,
  // or an id already in use.
  Status AddRequest(Request request);
  // Ends a waiting or running request at any point, releasing its pages and
  // slot exactly once; its final output (kAbort) comes with the next
  // TakeOutputs.  May be called between Schedule and Commit: the step's result
  // for it is then ignored.  NotFound if the id is not live.
  Status Abort(RequestId id);

  // The next step.  REQUIRES: the previous plan was committed or failed.
  StepPlan Schedule();
  // Applies a result.  Results whose (id, generation) is no longer live are
  // ignored; a malformed result for one request ends only that request
  // (kError).  Fails only when the result belongs to another step.
  Status Commit(const StepPlan& plan, const StepResult& result);
  // The executor failed the step: every request still live in it ends with
  // kError (the others are untouched).
  void FailStep(const StepPlan& plan, const Status& error);

  std::vector<RequestOutput> TakeOutputs();

  bool HasUnfinished() const { return !seqs_.empty(); }
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  const SchedulerConfig& config() const { return config_; }
  const SchedulerStats& stats() const { return stats_; }
  const cache::CacheManager& cache() const { return cache_; }
  // Cache pages, slots and request bookkeeping agree (tests, debug builds).
  Status CheckInvariants() const;

 private:
  enum class SeqStatus : uint8_t { kWaiting, kRunning };
  struct Seq {
    Request request;
    std::vector<int32_t> tokens;  // prompt + committed outputs
    int64_t num_prompt = 0;
    int64_t num_computed = 0;
    int64_t arrival = 0;
    SeqStatus status = SeqStatus::kWaiting;
    int32_t partition = -1;
    SlotHandle slot;
    bool slot_is_new = false;      // next plan entry is the slot's first
    bool has_draft_state = false;  // a logits step ran since (re)admission
    int32_t admission_skips = 0;
    uint64_t scheduled_step = 0;  // plan id + 1 of the last plan it is in
    uint64_t preempted_step = 0;  // plan id + 1 of the Schedule that preempted it
    // Prefix caching (docs/engine.md §7.2).
    int64_t num_cached = -1;         // hit at the first admission (-1: not admitted yet)
    int32_t restore_snapshot = -1;   // the next (first) plan entry restores this id
    int64_t snapshot_valid = 0;      // the working snapshot holds the state at this position
    int64_t snapshot_published = 0;  // pages and snapshot published up to here

    int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
    int64_t num_output() const { return num_tokens() - num_prompt; }
  };

  Scheduler(const SchedulerConfig& config, cache::CacheManager cache);

  int32_t DraftBudget(const Seq& seq) const;
  bool IsDecoding(const Seq& seq) const;
  int64_t ChunkSize(const Seq& seq, int64_t budget) const;
  int64_t LargestFittingChunk(int32_t partition, const Seq& seq, int64_t chunk) const;
  bool ScheduleRunning(Seq& seq, int64_t budget, StepPlan* plan);
  Seq* PickVictim(const Seq& needy);
  // Records a kPreempt event in `plan` naming `needy` as the cause.
  void Preempt(Seq& victim, const Seq& needy, StepPlan* plan);
  void AdmitWaiting(StepPlan* plan, int64_t* budget);
  // Prefix caching: adopts the longest hit among partitions with a free slot
  // and returns its partition with *chunk set, or -1 (nothing adopted) when
  // there is no hit or its first chunk does not fit.
  int32_t AdmitWithHit(Seq& seq, int64_t budget, const std::vector<int64_t>& load, int64_t* chunk);
  // Whether a running request is still computing pages `seq` shares (a page
  // or more before both boundaries L, published when it reaches its L):
  // admitting `seq` now would compute them twice (n > 1 choices, identical
  // prompts, a new system prompt).
  bool AwaitsSharedPrefix(const Seq& seq) const;
  // Snapshots in use (prefix caching with rolling-state snapshots).
  bool Snapshots() const { return cache_.prefix_caching() && cache_.uses_snapshots(); }
  // The prompt's snapshot boundary L = AlignDown(tokens - 1, page) (0: none).
  int64_t PrefixBoundary(const Seq& seq) const;
  // Publishes what a leaving request computed: pages up to its valid
  // snapshot (or, without snapshots, every committed full page).
  void PublishOnExit(Seq& seq);
  int32_t PickPartition(const Seq& seq, int64_t chunk, const std::vector<int64_t>& load);
  void Emit(Seq& seq, int64_t num_real, int32_t num_draft, StepPlan* plan);
  void ApplyResult(Seq& seq, const ScheduledRequest& entry, const RequestResult& result);
  Status CheckResult(const ScheduledRequest& entry, const RequestResult& result) const;
  // Ends seq with `out` (its id is set here) and frees its pages and slot.
  void Finish(Seq& seq, RequestOutput out);
  void ReleaseResources(Seq& seq);
  Seq* FindLive(const ScheduledRequest& entry);

  SchedulerConfig config_;
  cache::CacheManager cache_;
  std::vector<SlotPool> slots_;  // [num_partitions]
  std::unordered_map<RequestId, Seq> seqs_;
  std::map<int64_t, RequestId> waiting_;  // by arrival
  std::map<int64_t, RequestId> running_;  // by arrival
  std::vector<ReleasedSlot> released_;    // for the next plan
  std::vector<RequestOutput> outputs_;
  int64_t next_arrival_ = 0;
  uint64_t next_step_id_ = 0;
  uint64_t current_step_ = 0;  // plan id + 1 while a plan is being built or in flight
  bool in_flight_ = false;
  int32_t partition_cursor_ = 0;  // rotating tie-break of PickPartition
  SchedulerStats stats_;
};

}  // namespace dsv4::engine
