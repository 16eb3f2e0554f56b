// The production Executor: one StepPlan becomes one main-model forward over
// every request's rows (prefill chunks and decode rows of many requests mixed
// in one ForwardBatch), then sampling or draft verification per request,
// then the draft proposer's update.
//
// Slots: the scheduler's (partition, slot) maps to model cache slot
// partition * slots_per_partition + slot.  Rings and compressor states are
// per slot (the plan prices them per slot).  With page_tokens > 0 (the
// engine) the growing rows live in fixed pools addressed by the plan: each
// entry's block tables of cmp_c4, cmp_c128 and idx become the slice's page
// tables and its fresh pages are zeroed before the forward writes; partition
// p's page g is pool page p * pages_per_partition + g (one pool per layer for
// all partitions).  Without page_tokens (tests that drive the executor with
// hand-made plans) the cache manages its own pages and block tables are
// ignored (docs/engine.md "Runner and MTP").
//
// Rollback of rejected drafts: the main cache rings hold window + K rows, so
// the next step simply starts at the first unaccepted position and the model
// rewinds every layer (model.h CacheOptions).
//
// Thread safety: none; the engine thread owns it.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/thread_pool.h"
#include "engine/async_engine.h"
#include "engine/executor.h"
#include "model/model.h"
#include "model/model_cache.h"
#include "model/workspace.h"
#include "sampling/sampler.h"
#include "speculation/draft_proposer.h"

namespace dsv4::runner {

struct ModelExecutorOptions {
  int32_t num_partitions = 1;          // --dp
  int32_t slots_per_partition = 1;     // the scheduler's slots per partition
  int32_t num_speculative_tokens = 0;  // K; > 0 needs the model's MTP layer (or a proposer)
  // Pages of the pooled groups: 0 = self-managed cache; else the scheduler's
  // block size, with pages_per_partition[g] pages of group g in every
  // partition (the capacity plan's num_pages; only kPooledGroups are read).
  int64_t page_tokens = 0;
  std::array<int64_t, cache::kNumDsv4Groups> pages_per_partition{};
  // Prefix caching: rolling-state snapshot buffers per partition (the cache
  // manager's snapshot ids; docs/engine.md §7.2).  0 = none.
  int64_t snapshots_per_partition = 0;
  // DP attention across ranks (docs/scale-out.md): >= 0 runs only that
  // partition's entries and releases, holding one partition's slots, pages
  // and snapshots (its slot s is cache slot s, its page g pool page g); -1
  // runs every partition.  With a data-parallel model (Model::
  // data_parallel) every Run ends with Model::FinishDataParallelStep, rows
  // or not, so the ranks' MoE exchanges pair up.
  int32_t only_partition = -1;
};

class ModelExecutor : public engine::Executor {
 public:
  // model and pool (may be null: inline) outlive the executor.  With K > 0
  // and no `proposer`, the model's MTP layer proposes (FailedPrecondition if
  // the model has none); a given proposer (tests) replaces it.
  static Result<std::unique_ptr<ModelExecutor>> Create(
      const model::Model& model, ThreadPool* pool, const ModelExecutorOptions& options,
      std::unique_ptr<speculation::DraftProposer> proposer = nullptr);
  // The model cache options of K speculative tokens: rings of window + K rows
  // (rollback), the MTP block's cache only when K > 0.
  static model::CacheOptions CacheOptionsFor(const model::Model& model,
                                             int32_t num_speculative_tokens);

  ModelExecutor(const ModelExecutor&) = delete;
  ModelExecutor& operator=(const ModelExecutor&) = delete;

  Result<engine::StepResult> Run(const engine::StepPlan& plan) override;

  int64_t num_cache_slots() const { return cache_->num_slots(); }
  // The model cache (bytes, pools and tables for setup checks and tests).
  const model::ModelCache& cache() const { return *cache_; }
  // Slots holding a live request's state (0 once every request has ended
  // and its release reached the executor).
  int64_t num_live_slots() const;
  int32_t num_speculative_tokens() const { return k_; }
  // Prefix-cache snapshot buffers and the bytes they may hold (each a slot's
  // rolling state; allocated when first saved).
  int64_t num_snapshots() const { return static_cast<int64_t>(snapshots_.size()); }
  int64_t snapshot_capacity_bytes() const {
    return num_snapshots() * static_cast<int64_t>(cache_->FixedBytesPerSlot());
  }

 private:
  struct SlotState {
    bool live = false;
    engine::RequestId id = 0;
    uint32_t generation = 0;
    engine::SamplingParams sampling;
    sampling::SamplerState rng;
    int64_t num_prompt = 0;
    std::vector<int32_t> tokens;  // every token known so far: inputs seen, then sampled
  };
  // One plan entry bound to its cache slot.
  struct Bound {
    const engine::ScheduledRequest* entry = nullptr;
    int64_t slot = 0;
    int64_t row_offset = 0;
    int64_t first_logit = 0;  // index into the logits rows when entry->needs_logits
    std::vector<int32_t> drafts;
    // External pages: pool page ids of the entry's block tables and fresh
    // pages, per pooled group (SlicePages points into them).
    std::array<std::vector<int32_t>, cache::kNumDsv4Groups> tables;
    std::array<std::vector<int32_t>, cache::kNumDsv4Groups> fresh;
  };

  ModelExecutor(const model::Model& model, ThreadPool* pool, const ModelExecutorOptions& options,
                std::unique_ptr<model::ModelCache> cache);
  // Partitions this executor holds (1 with only_partition) and a plan
  // partition's index among them.
  int64_t held_partitions() const;
  int64_t HeldIndex(int32_t partition) const {
    return options_.only_partition >= 0 ? 0 : partition;
  }
  Result<engine::StepResult> RunHeld(const engine::StepPlan& plan);
  void Release(const engine::ReleasedSlot& r);
  // Prefix-cache hit: the new slot `idx` becomes the snapshot's sequence on
  // the entry's first pages (b->tables), with the proposer resumed there.
  Status Restore(const engine::ScheduledRequest& e, int64_t idx, const Bound& b, SlotState& st);
  // After the step: saves the snapshot of every entry whose computed
  // positions end at its save_at.
  void SaveSnapshots(const std::vector<Bound>& bound, const engine::StepResult& result);
  Status Bind(const engine::ScheduledRequest& e, Bound* b);
  Status BindPages(const engine::ScheduledRequest& e, Bound* b) const;
  // What sampling one entry's logit rows gave.
  struct Sampled {
    std::vector<int32_t> tokens;  // accepted drafts + one target token
    int32_t num_accepted = 0;
    std::vector<engine::TokenLogprob> logprobs;  // one per token when requested
    Status error;  // non-finite logits: nothing sampled, the request fails
  };
  void SampleEntry(const Bound& b, const float* logits, sampling::Sampler& sampler,
                   Sampled* out) const;
  std::vector<Sampled> SampleAll(const std::vector<Bound>& bound);
  // A failed sample (sampled.error) commits nothing and carries the error.
  engine::RequestResult Commit(const Bound& b, Sampled sampled, speculation::DraftUpdate* update);
  engine::RequestResult Commit(const Bound& b, Sampled sampled, speculation::DraftUpdate* update,
                               bool needs_logits);

  const model::Model& model_;
  ThreadPool* pool_;
  ModelExecutorOptions options_;
  int32_t k_;
  int64_t vocab_;
  uint64_t step_id_ = 0;  // of the plan Run is executing (error messages)
  std::unique_ptr<model::ModelCache> cache_;
  std::unique_ptr<speculation::DraftProposer> proposer_;  // null when K = 0
  // One per pool thread (each holds [vocab] scratch): entries sample in
  // parallel after the forward.
  std::vector<std::unique_ptr<sampling::Sampler>> samplers_;
  std::vector<SlotState> slots_;  // [num cache slots]
  // Prefix caching: one snapshot per id, [partition * snapshots_per_partition
  // + id]: the model slot's rolling state plus, with a proposer, the main
  // streams of the row before the boundary (the MTP's pending row).
  struct Snapshot {
    model::SlotSnapshot slot;
    std::vector<bf16> pending;  // [hc, D] when proposing, else empty
  };
  std::vector<Snapshot> snapshots_;
  model::Workspace ws_;
  std::vector<float> logits_;  // [logit rows, vocab]
  std::vector<bf16> streams_;  // [rows, hc, D] when proposing
};

}  // namespace dsv4::runner
