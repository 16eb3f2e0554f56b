#include "speculation/mtp_proposer.h"

#include <algorithm>
#include <cstring>

#include "base/logging.h"

namespace dsv4::speculation {

MtpProposer::MtpProposer(const model::Model& model, model::ModelCache& cache, ThreadPool* pool,
                         int32_t k, model::Workspace* ws)
    : model_(model),
      cache_(cache),
      pool_(pool),
      k_(k),
      width_(model.stream_width()),
      vocab_(model.config().vocab_size),
      slots_(static_cast<size_t>(cache.num_slots())),
      ws_(ws != nullptr ? *ws : own_ws_) {
  const int num_scratch = pool != nullptr ? pool->num_threads() : 1;
  for (int t = 0; t < num_scratch; ++t) {
    scratch_.push_back(std::make_unique<DraftScratch>(model.config().vocab_size));
  }
  DSV4_CHECK(model.has_mtp() && cache.has_mtp() && k >= 1);
}

void MtpProposer::AllocateState(int64_t slot, engine::RequestId /*id*/,
                                const DraftSampling& sampling) {
  SlotState& st = slots_[static_cast<size_t>(slot)];
  st.live = true;
  st.sampling = sampling;
  st.mtp_pos = 0;
  st.has_pending = false;
  st.drafts.clear();
}

void MtpProposer::FreeState(int64_t slot) {
  SlotState& st = slots_[static_cast<size_t>(slot)];
  st.live = false;
  st.has_pending = false;
  st.drafts.clear();
}

// The MTP window of a hit at `position`: rows [0, position - 1) are true (the
// restored MTP cache; rows it holds past them are rewound by the next
// forward), row position - 1 waits for its next token, as after a prefill
// chunk that ended at `position`.
Status MtpProposer::Resume(int64_t slot, int64_t position, std::span<const bf16> pending) {
  SlotState& st = slots_[static_cast<size_t>(slot)];
  if (!st.live || position < 1 || static_cast<int64_t>(pending.size()) != width_ ||
      cache_.NumMtpCachedTokens(slot) < position - 1) {
    return FailedPrecondition(
        "MTP resume of slot {} at {}: live {}, {} pending values for {}, {} MTP rows cached", slot,
        position, st.live, pending.size(), width_, cache_.NumMtpCachedTokens(slot));
  }
  st.mtp_pos = position - 1;
  st.has_pending = true;
  st.pending.assign(pending.begin(), pending.end());
  st.drafts.clear();
  return Status::Ok();
}

std::span<const int32_t> MtpProposer::Propose(int64_t slot) const {
  const SlotState& st = slots_[static_cast<size_t>(slot)];
  return {st.drafts.data(), st.drafts.size()};
}

// Rows q in [mtp_pos, end): h_q is the pending row (q == start - 1) or the
// step's main streams; token_{q+1} comes from u.tokens.
Status MtpProposer::AddTrueRows(const DraftUpdate& u, const bf16* streams,
                                model::ForwardBatch* batch, std::vector<bf16>* h) {
  SlotState& st = slots_[static_cast<size_t>(u.slot)];
  const int64_t s = u.start_pos;
  const bool from_pending = st.has_pending && st.mtp_pos == s - 1;
  if (!st.live || !(from_pending || (!st.has_pending && st.mtp_pos == s))) {
    return Internal(
        "MTP state of slot {} (live {}, {} rows, pending {}) cannot follow a step at {}", u.slot,
        st.live, st.mtp_pos, st.has_pending, s);
  }
  const int64_t end = u.committed ? s + u.num_true_rows : s + u.num_true_rows - 1;
  const int64_t first = st.mtp_pos;
  std::vector<int32_t> ids;
  for (int64_t q = first; q < end; ++q) {
    ids.push_back(u.tokens[static_cast<size_t>(q + 1 - s)]);
    const bf16* src = q == s - 1 ? st.pending.data() : streams + (u.row_offset + q - s) * width_;
    h->insert(h->end(), src, src + width_);
  }
  // The last true row waits for its next token (a chunk without logits).
  if (!u.committed) {
    const bf16* last = streams + (u.row_offset + u.num_true_rows - 1) * width_;
    st.pending.assign(last, last + width_);
    st.has_pending = true;
    st.drafts.clear();
  } else {
    st.has_pending = false;
  }
  st.mtp_pos = std::max(first, end);
  if (ids.empty()) return Status::Ok();
  batch->Add(u.slot, first, ids);
  if (u.committed) batch->logit_rows.push_back(batch->num_tokens() - 1);
  return Status::Ok();
}

Status MtpProposer::AfterVerify(const model::ForwardBatch& /*batch*/, const bf16* streams,
                                std::span<const DraftUpdate> updates) {
  model::ForwardBatch mb;
  std::vector<bf16> h;  // [mb.num_tokens(), hc, D]
  std::vector<int64_t> proposing;
  std::vector<std::span<const int32_t>> history;  // [proposing.size()]
  for (const DraftUpdate& u : updates) {
    DSV4_RETURN_IF_ERROR(AddTrueRows(u, streams, &mb, &h));
    if (!u.committed) continue;
    proposing.push_back(u.slot);
    history.push_back(u.history);
  }
  if (mb.num_tokens() == 0) return Status::Ok();
  std::vector<float> logits(mb.logit_rows.size() * static_cast<size_t>(vocab_));
  std::vector<bf16> out_streams(static_cast<size_t>(mb.num_tokens() * width_));
  model::ForwardOutputs out;
  out.logits = logits.data();
  out.streams = out_streams.data();
  out.approx_logits = true;  // drafts are verified: their logits' last bits never matter
  DSV4_RETURN_IF_ERROR(model_.ForwardMtp(mb, h.data(), cache_, out, ws_, pool_));
  // [proposing.size(), hc, D]: the MTP block's output at each proposer's last row
  std::vector<bf16> last(proposing.size() * static_cast<size_t>(width_));
  for (size_t i = 0; i < proposing.size(); ++i) {
    const int64_t row = mb.logit_rows[i];
    slots_[static_cast<size_t>(proposing[i])].drafts.clear();
    std::memcpy(last.data() + static_cast<int64_t>(i) * width_, out_streams.data() + row * width_,
                static_cast<size_t>(width_) * sizeof(bf16));
  }
  AppendDrafts(proposing, history, logits.data());
  return Chain(proposing, history, std::move(last));
}

int32_t MtpProposer::PickDraft(int64_t slot, std::span<const int32_t> history, const float* logits,
                               DraftScratch& scratch) const {
  const SlotState& st = slots_[static_cast<size_t>(slot)];
  const auto num_prompt = static_cast<size_t>(
      std::clamp<int64_t>(st.sampling.num_prompt, 0, static_cast<int64_t>(history.size())));
  scratch.output.assign(history.begin() + static_cast<std::ptrdiff_t>(num_prompt), history.end());
  scratch.output.insert(scratch.output.end(), st.drafts.begin(), st.drafts.end());
  return sampling::CoupledDraft(scratch.dist, logits, st.sampling.params, st.sampling.state,
                                {history.first(num_prompt), scratch.output});
}

// Picks every slot's next draft over the pool (one vocabulary pass each for
// sampled requests): worker t takes slots t, t + T, ... with scratch t, then
// the drafts are appended in order.
void MtpProposer::AppendDrafts(const std::vector<int64_t>& slots,
                               const std::vector<std::span<const int32_t>>& history,
                               const float* logits) {
  std::vector<int32_t> drafts(slots.size());
  const auto num_workers =
      static_cast<int64_t>(std::min(scratch_.size(), std::max<size_t>(slots.size(), 1)));
  ParallelFor(pool_, num_workers, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      for (size_t i = static_cast<size_t>(t); i < slots.size();
           i += static_cast<size_t>(num_workers)) {
        drafts[i] = PickDraft(slots[i], history[i], logits + static_cast<int64_t>(i) * vocab_,
                              *scratch_[static_cast<size_t>(t)]);
      }
    }
  });
  for (size_t i = 0; i < slots.size(); ++i) {
    slots_[static_cast<size_t>(slots[i])].drafts.push_back(drafts[i]);
  }
}

// One ForwardMtp per extra draft, every proposing sequence one row: the
// chain is sequential per sequence but batched across sequences.
Status MtpProposer::Chain(const std::vector<int64_t>& slots,
                          const std::vector<std::span<const int32_t>>& history,
                          std::vector<bf16> last_streams) {
  if (slots.empty()) return Status::Ok();
  std::vector<float> logits(slots.size() * static_cast<size_t>(vocab_));
  std::vector<bf16> out_streams(last_streams.size());
  for (int32_t j = 1; j < k_; ++j) {
    model::ForwardBatch cb;
    for (int64_t slot : slots) {
      const SlotState& st = slots_[static_cast<size_t>(slot)];
      // Draft j sits at position mtp_pos + j; its row is one before.
      cb.Add(slot, st.mtp_pos + j - 1, {st.drafts.back()});
      cb.logit_rows.push_back(cb.num_tokens() - 1);
    }
    model::ForwardOutputs out;
    out.logits = logits.data();
    out.streams = out_streams.data();
    out.approx_logits = true;
    DSV4_RETURN_IF_ERROR(model_.ForwardMtp(cb, last_streams.data(), cache_, out, ws_, pool_));
    AppendDrafts(slots, history, logits.data());
    std::swap(last_streams, out_streams);
  }
  return Status::Ok();
}

}  // namespace dsv4::speculation
