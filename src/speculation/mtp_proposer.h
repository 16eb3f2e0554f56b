// Drafts from the model's MTP layer (docs/model.md "MTP block and alignment",
// docs/engine.md §8.3).
//
// The MTP row at position q consumes (h_q, token_{q+1}) and predicts
// token_{q+2}.  Per slot the proposer keeps the MTP window true up to the
// last committed position: after every step it runs the MTP layer on the
// rows whose main-model results now stand (prefill chunks, the tail and the
// accepted drafts), all sequences in one ForwardMtp call; the last row's
// choice is draft 1 (greedy requests: the argmax; sampled requests: a coupled
// draft, CoupledDraft in sampling/token_distribution.h, which keeps seeded
// output identical to plain sampling and lifts acceptance to the overlap of
// the MTP and target laws).  Drafts 2..K chain the layer on itself: row P + j - 2
// takes the MTP block's own output streams and draft j - 1.  Chained rows
// are speculative; the next step rewinds the MTP cache over them (hence an
// MTP ring of window + K).  A prefill chunk whose next token is unknown
// leaves its last row's main streams pending until the next chunk (or the
// sampled token) supplies that token.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/thread_pool.h"
#include "model/model.h"
#include "model/model_cache.h"
#include "model/workspace.h"
#include "sampling/token_distribution.h"
#include "speculation/draft_proposer.h"

namespace dsv4::speculation {

class MtpProposer : public DraftProposer {
 public:
  // REQUIRES: model.has_mtp(), cache.has_mtp(), its MTP ring holds at least
  // window + k - 1 rows, k >= 1.  model, cache, pool and ws outlive the
  // proposer; the caller resets the cache slot before AllocateState.  `ws`
  // is the caller's forward workspace (the executor's: its main forward and
  // the MTP forwards never overlap, and one set of scratch buffers stays
  // warmer in the caches than two); null = the proposer's own.
  MtpProposer(const model::Model& model, model::ModelCache& cache, ThreadPool* pool, int32_t k,
              model::Workspace* ws = nullptr);

  int32_t max_drafts() const override { return k_; }
  void AllocateState(int64_t slot, engine::RequestId id, const DraftSampling& sampling) override;
  void FreeState(int64_t slot) override;
  Status Resume(int64_t slot, int64_t position, std::span<const bf16> pending) override;
  std::span<const int32_t> Propose(int64_t slot) const override;
  Status AfterVerify(const model::ForwardBatch& batch, const bf16* streams,
                     std::span<const DraftUpdate> updates) override;

 private:
  struct SlotState {
    bool live = false;
    int64_t mtp_pos = 0;          // MTP rows [0, mtp_pos) hold true inputs
    bool has_pending = false;     // main streams of position mtp_pos wait for its next token
    std::vector<bf16> pending;    // [hc, D]
    std::vector<int32_t> drafts;  // [k] after a commit, else empty
    DraftSampling sampling;
  };

  // Appends update u's true MTP rows to batch/h; false when it has none.
  Status AddTrueRows(const DraftUpdate& u, const bf16* streams, model::ForwardBatch* batch,
                     std::vector<bf16>* h);
  // Drafts 2..k for `slots` (draft 1 set), from the MTP streams of each
  // slot's last row in `last_streams` [slots.size(), hc, D]; `history[i]` is
  // slot i's DraftUpdate::history.
  Status Chain(const std::vector<int64_t>& slots,
               const std::vector<std::span<const int32_t>>& history,
               std::vector<bf16> last_streams);
  // Per-thread scratch of PickDraft.
  struct DraftScratch {
    explicit DraftScratch(int64_t vocab) : dist(vocab) {}
    sampling::TokenDistribution dist;  // [vocab]
    std::vector<int32_t> output;       // history's outputs + drafts so far
  };
  // The next draft of `slot` from MTP logits [vocab]: it follows `history`
  // (the known tokens) and the slot's drafts so far.
  int32_t PickDraft(int64_t slot, std::span<const int32_t> history, const float* logits,
                    DraftScratch& scratch) const;
  // Appends each slot's next draft; logits [slots.size(), vocab].
  void AppendDrafts(const std::vector<int64_t>& slots,
                    const std::vector<std::span<const int32_t>>& history, const float* logits);

  const model::Model& model_;
  model::ModelCache& cache_;
  ThreadPool* pool_;
  int32_t k_;
  int64_t width_;  // hc * D
  int64_t vocab_;
  std::vector<SlotState> slots_;  // [cache.num_slots()]
  model::Workspace own_ws_;
  model::Workspace& ws_;                                // own_ws_ or the caller's
  std::vector<std::unique_ptr<DraftScratch>> scratch_;  // one per pool thread
};

}  // namespace dsv4::speculation
