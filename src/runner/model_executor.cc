#include "runner/model_executor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "base/logging.h"
#include "profile/profile.h"
#include "speculation/mtp_proposer.h"

namespace dsv4::runner {

namespace {

// Seed of an unseeded request: a mix of its id, so two requests differ.
uint64_t RequestSeed(engine::RequestId id) {
  uint64_t z = static_cast<uint64_t>(id) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Index of the first NaN or +-Inf among x[0, n), or -1.  The exponent test
// on the bits vectorises (no branch per element); the search for the index
// runs only when something is wrong.
int64_t FirstNonFinite(const float* x, int64_t n) {
  uint32_t any = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, 4);
    any |= static_cast<uint32_t>((u & 0x7f800000u) == 0x7f800000u);
  }
  if (any == 0) return -1;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) return i;
  }
  return -1;
}

}  // namespace

Result<std::unique_ptr<ModelExecutor>> ModelExecutor::Create(
    const model::Model& model, ThreadPool* pool, const ModelExecutorOptions& options,
    std::unique_ptr<speculation::DraftProposer> proposer) {
  const int32_t k = options.num_speculative_tokens;
  if (options.num_partitions < 1 || options.slots_per_partition < 1 || k < 0) {
    return InvalidArgument("executor needs partitions >= 1, slots >= 1, K >= 0 (got {}, {}, {})",
                           options.num_partitions, options.slots_per_partition, k);
  }
  if (options.snapshots_per_partition < 0 ||
      (options.snapshots_per_partition > 0 && options.page_tokens <= 0)) {
    return InvalidArgument("prefix-cache snapshots need external pages (got {} snapshots)",
                           options.snapshots_per_partition);
  }
  if (k > 0 && proposer == nullptr && !model.has_mtp()) {
    return FailedPrecondition("--speculative K = {} needs the checkpoint's MTP layer", k);
  }
  if (options.only_partition >= options.num_partitions) {
    return InvalidArgument("partition {} of {}", options.only_partition, options.num_partitions);
  }
  const model::CacheOptions cache_options = CacheOptionsFor(model, k);
  const int64_t held = options.only_partition >= 0 ? 1 : options.num_partitions;
  const int64_t num_slots = held * options.slots_per_partition;
  std::unique_ptr<model::ModelCache> cache;
  if (options.page_tokens > 0) {
    model::CachePools pools;
    pools.page_tokens = options.page_tokens;
    for (cache::Dsv4Group g : model::kPooledGroups) {
      const int64_t per = options.pages_per_partition[static_cast<size_t>(g)];
      if (per < 0 || per * held > std::numeric_limits<int32_t>::max()) {
        return InvalidArgument("{} pages per partition do not fit 32-bit page ids", per);
      }
      pools.num_pages[static_cast<size_t>(g)] = per * held;
    }
    DSV4_ASSIGN_OR_RETURN(cache, model.NewCache(num_slots, cache_options, pools));
  } else {
    cache = model.NewCache(num_slots, cache_options);
  }
  std::unique_ptr<ModelExecutor> ex(new ModelExecutor(model, pool, options, std::move(cache)));
  if (k > 0) {
    ex->proposer_ = proposer != nullptr ? std::move(proposer)
                                        : std::make_unique<speculation::MtpProposer>(
                                              model, *ex->cache_, pool, k, &ex->ws_);
  }
  return ex;
}

model::CacheOptions ModelExecutor::CacheOptionsFor(const model::Model& model, int32_t k) {
  // Ring slack K on every layer: a step's rejected drafts are rewound.  The
  // MTP window also re-runs its K - 1 chained draft rows.
  model::CacheOptions o;
  if (k > 0) {
    o.ring_capacity = model.config().sliding_window + k;
    o.mtp_ring_capacity = model.config().sliding_window + k;
  }
  o.include_mtp = k > 0;
  return o;
}

ModelExecutor::ModelExecutor(const model::Model& model, ThreadPool* pool,
                             const ModelExecutorOptions& options,
                             std::unique_ptr<model::ModelCache> cache)
    : model_(model),
      pool_(pool),
      options_(options),
      k_(options.num_speculative_tokens),
      vocab_(model.config().vocab_size),
      cache_(std::move(cache)),

      slots_(static_cast<size_t>(cache_->num_slots())),
      snapshots_(static_cast<size_t>(held_partitions() * options.snapshots_per_partition)) {
  const int num_samplers = pool != nullptr ? pool->num_threads() : 1;
  for (int t = 0; t < num_samplers; ++t) {
    samplers_.push_back(std::make_unique<sampling::Sampler>(model.config().vocab_size));
  }
}

int64_t ModelExecutor::held_partitions() const {
  return options_.only_partition >= 0 ? 1 : options_.num_partitions;
}

int64_t ModelExecutor::num_live_slots() const {
  int64_t n = 0;
  for (const SlotState& st : slots_) n += st.live ? 1 : 0;
  return n;
}

// A prefix-cache hit's first step: the slot's rolling state from the
// snapshot, the shared pages as its tables, the proposer at the boundary.
Status ModelExecutor::Restore(const engine::ScheduledRequest& e, int64_t idx, const Bound& b,
                              SlotState& st) {
  const int64_t per = options_.snapshots_per_partition;
  if (e.restore_snapshot >= per || options_.page_tokens <= 0) {
    return InvalidArgument("restore from snapshot {} of {}", e.restore_snapshot, per);
  }
  const Snapshot& snap =
      snapshots_[static_cast<size_t>(HeldIndex(e.partition) * per + e.restore_snapshot)];
  const int64_t at = e.start_pos;
  if (snap.slot.num_tokens() != at || static_cast<int64_t>(e.prefix_token_ids.size()) != at ||
      at % options_.page_tokens != 0) {
    return FailedPrecondition(
        "restore at {} from snapshot {} of {} tokens with {} prefix tokens (page {})", at,
        e.restore_snapshot, snap.slot.num_tokens(), e.prefix_token_ids.size(),
        options_.page_tokens);
  }
  // The hit's pages: the first at / page of each pooled table.
  std::array<std::span<const int32_t>, cache::kNumDsv4Groups> tables{};
  const auto num_pages = static_cast<size_t>(at / options_.page_tokens);
  for (cache::Dsv4Group g : model::kPooledGroups) {
    const auto& t = b.tables[static_cast<size_t>(g)];
    if (t.size() < num_pages) {
      return InvalidArgument("restore at {}: group {} table of {} pages", at, int{g}, t.size());
    }
    tables[static_cast<size_t>(g)] = std::span<const int32_t>(t).first(num_pages);
  }
  DSV4_RETURN_IF_ERROR(cache_->RestoreSlot(idx, snap.slot, tables));
  st.tokens = e.prefix_token_ids;
  if (proposer_ != nullptr) DSV4_RETURN_IF_ERROR(proposer_->Resume(idx, at, snap.pending));
  return Status::Ok();
}

void ModelExecutor::SaveSnapshots(const std::vector<Bound>& bound,
                                  const engine::StepResult& result) {
  const int64_t per = options_.snapshots_per_partition;
  for (size_t i = 0; i < bound.size(); ++i) {
    const engine::ScheduledRequest& e = *bound[i].entry;
    const engine::RequestResult& r = result.requests[i];
    if (e.save_snapshot < 0 || e.save_snapshot >= per || !r.error.ok()) continue;
    // Only a step whose every row stands leaves the slot exactly at save_at.
    const int64_t computed = e.start_pos + e.num_real_tokens() + r.num_accepted_drafts;
    if (computed != e.save_at || r.num_accepted_drafts != e.num_draft) continue;
    Snapshot& snap =
        snapshots_[static_cast<size_t>(HeldIndex(e.partition) * per + e.save_snapshot)];
    cache_->SaveSlot(bound[i].slot, &snap.slot);
    snap.pending.clear();
    if (proposer_ != nullptr) {
      // The MTP row before the boundary waits for the hit's next token: keep
      // its main streams (the proposer restarts from there, Resume).
      const int64_t width = model_.stream_width();
      const bf16* row =
          streams_.data() + (bound[i].row_offset + e.save_at - 1 - e.start_pos) * width;
      snap.pending.assign(row, row + width);
    }
  }
}

// A release of another generation refers to a previous occupant: ignored.
void ModelExecutor::Release(const engine::ReleasedSlot& r) {
  const int64_t idx = HeldIndex(r.partition) * options_.slots_per_partition + r.slot;
  if (r.partition < 0 || r.partition >= options_.num_partitions || r.slot < 0 ||
      r.slot >= options_.slots_per_partition) {
    DSV4_LOG_WARN("runner: release of slot ({}, {}) out of range", r.partition, r.slot);
    return;
  }
  SlotState& st = slots_[static_cast<size_t>(idx)];
  if (!st.live || st.generation != r.generation || st.id != r.id) return;
  st.live = false;
  st.tokens.clear();
  st.tokens.shrink_to_fit();
  if (proposer_ != nullptr) proposer_->FreeState(idx);
}

// Binds a plan entry to its slot (resetting it when new), checks that it
// continues what the slot holds, records its new tokens and picks drafts.
Status ModelExecutor::Bind(const engine::ScheduledRequest& e, Bound* b) {
  if (e.partition < 0 || e.partition >= options_.num_partitions || e.slot < 0 ||
      e.slot >= options_.slots_per_partition) {
    return InvalidArgument("slot ({}, {}) out of range", e.partition, e.slot);
  }
  const int64_t idx = HeldIndex(e.partition) * options_.slots_per_partition + e.slot;
  SlotState& st = slots_[static_cast<size_t>(idx)];
  if (e.is_new) {
    cache_->Reset(idx);
    st = SlotState{};
    st.live = true;
    st.id = e.id;
    st.generation = e.generation;
    st.sampling = e.sampling;
    st.rng = sampling::SamplerState::ForRequest(e.sampling, RequestSeed(e.id));
    st.num_prompt = e.num_prompt_tokens;
    if (proposer_ != nullptr) {
      proposer_->AllocateState(idx, e.id, {e.sampling, st.rng, e.num_prompt_tokens});
    }
    if (e.restore_snapshot >= 0) {
      if (options_.page_tokens > 0) DSV4_RETURN_IF_ERROR(BindPages(e, b));
      DSV4_RETURN_IF_ERROR(Restore(e, idx, *b, st));
    }
  } else if (!st.live || st.generation != e.generation || st.id != e.id) {
    return FailedPrecondition("stale step: slot holds request {} generation {}, plan has {} gen {}",
                              st.id, st.generation, e.id, e.generation);
  }
  const int64_t s = e.start_pos;
  const int64_t n = e.num_real_tokens();
  const auto known = static_cast<int64_t>(st.tokens.size());
  if (n < 1 || s > known || !cache_->layer(0).CanContinueAt(idx, s)) {
    return FailedPrecondition("rows [{}, {}) do not continue the slot ({} tokens known, {} cached)",
                              s, s + n, known, cache_->NumCachedTokens(idx));
  }
  for (int64_t i = 0; i < n; ++i) {
    const int32_t t = e.token_ids[static_cast<size_t>(i)];
    if (t < 0 || t >= vocab_) return InvalidArgument("token id {} outside the vocabulary", t);
    if (s + i < known && st.tokens[static_cast<size_t>(s + i)] != t) {
      return FailedPrecondition("token {} at position {} differs from the committed {}", t, s + i,
                                st.tokens[static_cast<size_t>(s + i)]);
    }
  }
  if (options_.page_tokens > 0) DSV4_RETURN_IF_ERROR(BindPages(e, b));
  for (int64_t i = known - s; i < n; ++i) st.tokens.push_back(e.token_ids[static_cast<size_t>(i)]);
  b->entry = &e;
  b->slot = idx;
  b->drafts.clear();
  if (e.num_draft > 0) {
    if (proposer_ == nullptr) return FailedPrecondition("draft rows without a draft proposer");
    const std::span<const int32_t> p = proposer_->Propose(idx);
    // A missing draft is verified like any other (token 0); the scheduler
    // only reserves drafts after a logits step, so this does not happen.
    for (int32_t j = 0; j < e.num_draft; ++j) {
      b->drafts.push_back(static_cast<size_t>(j) < p.size() ? p[static_cast<size_t>(j)] : 0);
    }
  }
  return Status::Ok();
}

// The entry's pages of the full-history groups as pool page ids.
Status ModelExecutor::BindPages(const engine::ScheduledRequest& e, Bound* b) const {
  if (static_cast<int>(e.block_tables.size()) != cache::kNumDsv4Groups ||
      static_cast<int>(e.fresh_pages.size()) != cache::kNumDsv4Groups) {
    return InvalidArgument("plan entry has {} block tables and {} fresh lists, need {}",
                           e.block_tables.size(), e.fresh_pages.size(), int{cache::kNumDsv4Groups});
  }
  for (cache::Dsv4Group group : model::kPooledGroups) {
    const auto gs = static_cast<size_t>(group);
    const int64_t per = options_.pages_per_partition[gs];
    const int64_t base = per * HeldIndex(e.partition);
    const cache::BlockTable& table = e.block_tables[gs];
    if (table.first_page != 0 && !table.pages.empty()) {
      return InvalidArgument("full-history table of group {} starts at page {}", int{group},
                             table.first_page);
    }
    auto translate = [&](const std::vector<int32_t>& local, std::vector<int32_t>* out) -> Status {
      out->clear();
      for (int32_t p : local) {
        if (p < 0 || p >= per) {
          return InvalidArgument("group {}: page {} outside the partition's [0, {})", int{group}, p,
                                 per);
        }
        out->push_back(static_cast<int32_t>(base + p));
      }
      return Status::Ok();
    };
    DSV4_RETURN_IF_ERROR(translate(table.pages, &b->tables[gs]));
    DSV4_RETURN_IF_ERROR(translate(e.fresh_pages[gs], &b->fresh[gs]));
  }
  return Status::Ok();
}

// Samples (or verifies) one entry's logit rows.  Reads only the entry's own
// slot and writes only *out, so entries may run on different threads, each
// with its own sampler.
void ModelExecutor::SampleEntry(const Bound& b, const float* logits, sampling::Sampler& sampler,
                                Sampled* out) const {
  const engine::ScheduledRequest& e = *b.entry;
  // A corrupt-but-well-formed checkpoint (a NaN norm weight) yields NaN
  // logits, which every sampler would silently turn into token 0: fail the
  // request instead (docs/engine.md).  One pass over the entry's rows, a few
  // microseconds per 100k-entry row.
  const int64_t rows = 1 + static_cast<int64_t>(b.drafts.size());
  if (const int64_t bad = FirstNonFinite(logits, rows * vocab_); bad >= 0) {
    out->error = DataLoss(
        "step {}: the logits of request {} at position {} are not finite (logit {} of row {} is "
        "{}): the model's weights or activations hold NaN/Inf (a corrupt checkpoint?)",
        step_id_, e.id, e.start_pos + e.num_real_tokens() - 1, bad % vocab_, bad / vocab_,
        logits[bad]);
    return;
  }
  const SlotState& st = slots_[static_cast<size_t>(b.slot)];
  const int64_t end = e.start_pos + e.num_real_tokens();
  std::vector<engine::TokenLogprob>* lp = st.sampling.logprobs >= 0 ? &out->logprobs : nullptr;
  const std::span<const int32_t> all(st.tokens);
  const auto num_prompt = static_cast<size_t>(std::min<int64_t>(st.num_prompt, end));
  const sampling::TokenHistory history{all.first(num_prompt),
                                       all.subspan(num_prompt, end - num_prompt)};
  if (b.drafts.empty()) {
    engine::TokenLogprob one;
    out->tokens = {sampler.Sample(logits, st.sampling, st.rng, history, lp ? &one : nullptr)};
    if (lp != nullptr) lp->push_back(std::move(one));
    out->num_accepted = 0;
    return;
  }
  sampling::VerifyResult v =
      sampler.Verify(logits, b.drafts, nullptr, st.sampling, st.rng, history, lp);
  out->tokens = std::move(v.tokens);
  out->num_accepted = v.num_accepted;
}

engine::RequestResult ModelExecutor::Commit(const Bound& b, Sampled sampled,
                                            speculation::DraftUpdate* u) {
  if (!sampled.error.ok()) {
    // Nothing committed (the scheduler ends the request); the proposer sees
    // an uncommitted entry, as for a prefill chunk without logits.
    engine::RequestResult r = Commit(b, Sampled{}, u, /*needs_logits=*/false);
    r.error = std::move(sampled.error);
    return r;
  }
  return Commit(b, std::move(sampled), u, b.entry->needs_logits);
}

engine::RequestResult ModelExecutor::Commit(const Bound& b, Sampled sampled,
                                            speculation::DraftUpdate* u, bool needs_logits) {
  const engine::ScheduledRequest& e = *b.entry;
  SlotState& st = slots_[static_cast<size_t>(b.slot)];
  engine::RequestResult r;
  r.id = e.id;
  r.generation = e.generation;
  const int64_t s = e.start_pos;
  const int64_t n = e.num_real_tokens();
  u->slot = b.slot;
  u->start_pos = s;
  u->row_offset = b.row_offset;
  u->tokens.assign(st.tokens.begin() + s, st.tokens.begin() + s + n);
  u->num_true_rows = n;
  u->committed = false;
  u->history = st.tokens;
  if (!needs_logits) return r;

  r.logprobs = std::move(sampled.logprobs);
  r.drafts = b.drafts;
  r.tokens = std::move(sampled.tokens);
  r.num_accepted_drafts = sampled.num_accepted;
  const int32_t a = r.num_accepted_drafts;
  u->tokens.insert(u->tokens.end(), r.tokens.begin(), r.tokens.end());
  u->num_true_rows = n + a;
  u->committed = true;
  st.tokens.insert(st.tokens.end(), r.tokens.begin(), r.tokens.end());
  u->history = st.tokens;  // after the insert (which may reallocate); AfterVerify reads it
  return r;
}

// Every entry with logits sampled over the pool: worker t takes entries t,
// t + T, ... with sampler t (per-request random streams make the result
// independent of which thread samples what).
std::vector<ModelExecutor::Sampled> ModelExecutor::SampleAll(const std::vector<Bound>& bound) {
  std::vector<Sampled> sampled(bound.size());
  std::vector<size_t> pending;  // entries with logit rows
  for (size_t i = 0; i < bound.size(); ++i) {
    if (bound[i].entry->needs_logits) pending.push_back(i);
  }
  const auto num_workers =
      static_cast<int64_t>(std::min(samplers_.size(), std::max<size_t>(pending.size(), 1)));
  ParallelFor(pool_, num_workers, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      for (size_t j = static_cast<size_t>(t); j < pending.size();
           j += static_cast<size_t>(num_workers)) {
        const Bound& b = bound[pending[j]];
        SampleEntry(b, logits_.data() + b.first_logit * vocab_, *samplers_[static_cast<size_t>(t)],
                    &sampled[pending[j]]);
      }
    }
  });
  return sampled;
}

Result<engine::StepResult> ModelExecutor::Run(const engine::StepPlan& plan) {
  Result<engine::StepResult> r = RunHeld(plan);
  // Every rank, whatever its rows did, joins the exchanges the others run.
  model_.FinishDataParallelStep(ws_, pool_);
  return r;
}

Result<engine::StepResult> ModelExecutor::RunHeld(const engine::StepPlan& plan) {
  step_id_ = plan.step_id;
  std::vector<Bound> bound;
  model::ForwardBatch batch;
  profile::Span bind(profile::kE2e, "runner", "bind");
  const auto held = [&](int32_t partition) {
    return options_.only_partition < 0 || partition == options_.only_partition;
  };
  for (const engine::ReleasedSlot& r : plan.released) {
    if (held(r.partition)) Release(r);
  }
  for (const engine::ScheduledRequest& e : plan.requests) {
    if (!held(e.partition)) continue;  // another rank's partition
    Bound b;
    const Status s = Bind(e, &b);
    if (!s.ok()) {  // left out of the result: the scheduler ends it with kError
      DSV4_LOG_WARN("runner: request {} left out of step {}: {}", e.id, plan.step_id, s.ToString());
      continue;
    }
    const int64_t n = e.num_real_tokens();
    std::vector<int32_t> ids(e.token_ids.begin(), e.token_ids.begin() + n);
    ids.insert(ids.end(), b.drafts.begin(), b.drafts.end());
    b.row_offset = batch.num_tokens();
    batch.Add(b.slot, e.start_pos, ids);
    if (e.needs_logits) {
      b.first_logit = static_cast<int64_t>(batch.logit_rows.size());
      for (int64_t r = n - 1; r < static_cast<int64_t>(ids.size()); ++r) {
        batch.logit_rows.push_back(b.row_offset + r);
      }
    }
    bound.push_back(std::move(b));
  }
  // The spans point into `bound`, which no longer moves.
  for (size_t i = 0; i < bound.size(); ++i) {
    for (size_t g = 0; g < cache::kNumDsv4Groups; ++g) {
      batch.seqs[i].pages.tables[g] = bound[i].tables[g];
      batch.seqs[i].pages.fresh[g] = bound[i].fresh[g];
    }
  }
  bind.End();
  engine::StepResult result;
  result.step_id = plan.step_id;
  if (bound.empty()) return result;

  logits_.resize(batch.logit_rows.size() * static_cast<size_t>(vocab_));
  model::ForwardOutputs out;
  out.logits = logits_.data();
  if (proposer_ != nullptr) {
    streams_.resize(static_cast<size_t>(batch.num_tokens() * model_.stream_width()));
    out.streams = streams_.data();
  }
  {
    profile::Span fwd(profile::kE2e, "runner", "forward");
    if (fwd) {
      fwd.Arg("rows", batch.num_tokens())
          .Arg("sequences", static_cast<int64_t>(batch.seqs.size()))
          .Arg("logit_rows", static_cast<int64_t>(batch.logit_rows.size()));
    }
    DSV4_RETURN_IF_ERROR(model_.Forward(batch, *cache_, out, ws_, pool_));
  }

  std::vector<speculation::DraftUpdate> updates(bound.size());
  {
    // Sampling, draft verification and the per-request commit of the result.
    profile::Span sv(profile::kE2e, "runner", "sample_verify");
    if (sv) sv.Arg("logit_rows", static_cast<int64_t>(batch.logit_rows.size()));
    std::vector<Sampled> sampled = SampleAll(bound);
    for (size_t i = 0; i < bound.size(); ++i) {
      result.requests.push_back(Commit(bound[i], std::move(sampled[i]), &updates[i]));
    }
  }
  if (proposer_ != nullptr) {
    profile::Span draft(profile::kE2e, "runner", "draft");
    DSV4_RETURN_IF_ERROR(proposer_->AfterVerify(batch, streams_.data(), updates));
  }
  if (!snapshots_.empty()) SaveSnapshots(bound, result);
  return result;
}

}  // namespace dsv4::runner
