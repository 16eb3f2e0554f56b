#include "engine/scheduler.h"

#include <algorithm>
#include <unordered_map>

#include "base/logging.h"

namespace dsv4::engine {
namespace {

RequestOutput ErrorOutput(Status error) {
  RequestOutput out;
  out.finish = FinishReason::kError;
  out.error = std::move(error);
  return out;
}

}  // namespace

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kError:
      return "error";
  }
  return "?";
}

Status SchedulerConfig::Validate() const {
  if (max_num_batched_tokens <= 0) {
    return InvalidArgument("--max-num-batched-tokens must be positive, got {}",
                           max_num_batched_tokens);
  }
  if (max_num_seqs <= 0)
    return InvalidArgument("--max-num-seqs must be positive, got {}", max_num_seqs);
  if (max_model_len < 2)
    return InvalidArgument("--max-model-len must be at least 2, got {}", max_model_len);
  if (long_prefill_token_threshold < 0) {
    return InvalidArgument("--long-prefill-token-threshold must be >= 0, got {}",
                           long_prefill_token_threshold);
  }
  if (max_prefill_extent <= 0 || prefill_tile <= 0) {
    return InvalidArgument("prefill extent and tile must be positive, got {} and {}",
                           max_prefill_extent, prefill_tile);
  }
  if (num_speculative_tokens < 0) {
    return InvalidArgument("num_speculative_tokens must be >= 0, got {}", num_speculative_tokens);
  }
  if (max_num_batched_tokens < 1 + num_speculative_tokens) {
    return InvalidArgument(
        "--max-num-batched-tokens {} cannot hold one decode row with {} draft tokens",
        max_num_batched_tokens, num_speculative_tokens);
  }
  if (num_partitions <= 0) return InvalidArgument("--dp must be positive, got {}", num_partitions);
  if (slots_per_partition < 0) {
    return InvalidArgument("slots per partition must be >= 0, got {}", slots_per_partition);
  }
  if (PrefillExtent() < std::min(prefill_tile, max_model_len)) {
    return InvalidArgument(
        "prefill extent {} (the least of {}, --max-num-batched-tokens, "
        "--long-prefill-token-threshold and --max-model-len) is below the prefill tile {}",
        PrefillExtent(), max_prefill_extent, prefill_tile);
  }
  if (max_admission_skips < 0) {
    return InvalidArgument("max_admission_skips must be >= 0, got {}", max_admission_skips);
  }
  return Status::Ok();
}

int64_t SchedulerConfig::PrefillExtent() const {
  int64_t extent = std::min({max_prefill_extent, max_num_batched_tokens, max_model_len});
  if (long_prefill_token_threshold > 0) extent = std::min(extent, long_prefill_token_threshold);
  return extent;
}

Result<std::unique_ptr<Scheduler>> Scheduler::Create(const SchedulerConfig& config,
                                                     cache::CacheManager cache) {
  DSV4_RETURN_IF_ERROR(config.Validate());
  if (cache.num_partitions() != config.num_partitions) {
    return InvalidArgument("scheduler: --dp {} but the cache has {} partitions",
                           config.num_partitions, cache.num_partitions());
  }
  return std::unique_ptr<Scheduler>(new Scheduler(config, std::move(cache)));
}

Scheduler::Scheduler(const SchedulerConfig& config, cache::CacheManager cache)
    : config_(config), cache_(std::move(cache)) {
  for (int32_t p = 0; p < config_.num_partitions; ++p) {
    slots_.emplace_back(static_cast<int32_t>(config_.SlotsPerPartition()));
  }
}

Status Scheduler::AddRequest(Request request) {
  const RequestId id = request.id;
  if (seqs_.count(id) != 0) return InvalidArgument("request {}: id already in use", id);
  if (request.prompt.empty()) return InvalidArgument("request {}: empty prompt", id);
  for (int32_t t : request.prompt) {
    if (t < 0) return InvalidArgument("request {}: negative token id {} in prompt", id, t);
  }
  if (request.max_tokens < 1) {
    return InvalidArgument("request {}: max_tokens must be >= 1, got {}", id, request.max_tokens);
  }
  const int64_t num_prompt = static_cast<int64_t>(request.prompt.size());
  if (num_prompt >= config_.max_model_len) {
    return InvalidArgument(
        "request {}: prompt of {} tokens leaves no room under --max-model-len {}", id, num_prompt,
        config_.max_model_len);
  }
  Seq seq;
  seq.tokens = request.prompt;
  seq.num_prompt = num_prompt;
  seq.arrival = next_arrival_++;
  seq.request = std::move(request);
  waiting_.emplace(seq.arrival, id);
  seqs_.emplace(id, std::move(seq));
  return Status::Ok();
}

Status Scheduler::Abort(RequestId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return NotFound("request {} is not live", id);
  Seq& seq = it->second;
  // A request in the plan in flight may still be written (its snapshot
  // buffer too): only one at rest publishes.
  if (!(in_flight_ && seq.scheduled_step == current_step_)) PublishOnExit(seq);
  RequestOutput out;
  out.finish = FinishReason::kAbort;
  Finish(seq, std::move(out));
  return Status::Ok();
}

bool Scheduler::IsDecoding(const Seq& seq) const {
  return seq.has_draft_state && seq.num_computed == seq.num_tokens() - 1;
}

int32_t Scheduler::DraftBudget(const Seq& seq) const {
  if (!IsDecoding(seq)) return 0;
  int64_t k = config_.num_speculative_tokens;
  if (seq.request.max_draft_tokens >= 0) k = std::min<int64_t>(k, seq.request.max_draft_tokens);
  // Positions stay below max_model_len; drafts beyond the last output token
  // the request may still produce are never accepted.
  k = std::min(k, config_.max_model_len - seq.num_tokens());
  k = std::min(k, seq.request.max_tokens - seq.num_output() - 1);
  if (Snapshots()) {
    // A step ends exactly on the next page boundary rather than crossing it,
    // so the state there can be snapshotted (docs/engine.md §7.2).
    const int64_t page = cache_.prefix_page_tokens();
    k = std::min(k, (seq.num_computed / page + 1) * page - seq.num_computed - 1);
  }
  return static_cast<int32_t>(std::max<int64_t>(k, 0));
}

int64_t Scheduler::ChunkSize(const Seq& seq, int64_t budget) const {
  const int64_t remaining = seq.num_tokens() - seq.num_computed;
  int64_t n = std::min({remaining, config_.PrefillExtent(), budget});
  // Non-final chunks are whole tiles, so every chunk starts on a tile: no
  // padding except in the final chunk, and ring pages sized for tile-aligned
  // chunk starts suffice (PeakPagesPerRequest).  0 = wait for a larger budget.
  if (n < remaining) n -= n % config_.prefill_tile;
  // Prefix caching: a chunk ends at the prompt's boundary L, whose state is
  // snapshotted and published for later hits.
  const int64_t l = PrefixBoundary(seq);
  if (l > seq.num_computed && l < seq.num_computed + n && l > seq.snapshot_valid) {
    const int64_t cut = l - seq.num_computed;
    if (cut % config_.prefill_tile == 0) n = cut;
  }
  return n;
}

int64_t Scheduler::PrefixBoundary(const Seq& seq) const {
  if (!Snapshots()) return 0;
  const int64_t page = cache_.prefix_page_tokens();
  return (seq.num_tokens() - 1) / page * page;
}

int64_t Scheduler::LargestFittingChunk(int32_t partition, const Seq& seq, int64_t chunk) const {
  const RequestId id = seq.request.id;
  const int64_t c = seq.num_computed;
  if (cache_.CanAllocate(partition, id, {c, c + chunk, 0})) return chunk;
  const int64_t tile = config_.prefill_tile;
  for (int64_t n = (chunk - 1) / tile * tile; n >= tile; n -= tile) {
    if (cache_.CanAllocate(partition, id, {c, c + n, 0})) return n;
  }
  return 0;
}

Scheduler::Seq* Scheduler::PickVictim(const Seq& needy) {
  Seq* best = nullptr;
  for (auto it = running_.rbegin(); it != running_.rend() && it->first > needy.arrival; ++it) {
    Seq& cand = seqs_.at(it->second);
    if (cand.partition != needy.partition || cand.scheduled_step == current_step_) continue;
    // Newest first, so a strict comparison keeps the newest on ties.
    if (best == nullptr || cand.num_computed < best->num_computed) best = &cand;
  }
  return best;
}

void Scheduler::Preempt(Seq& victim, const Seq& needy, StepPlan* plan) {
  plan->events.push_back({SchedulerEvent::Kind::kPreempt, victim.request.id, needy.request.id,
                          victim.num_computed, 0});
  PublishOnExit(victim);  // its pages stay hittable, by itself when readmitted too
  ReleaseResources(victim);
  victim.snapshot_valid = 0;
  victim.snapshot_published = 0;
  victim.num_computed = 0;
  victim.has_draft_state = false;
  victim.status = SeqStatus::kWaiting;
  victim.preempted_step = current_step_;
  waiting_.emplace(victim.arrival, victim.request.id);
  ++stats_.num_preemptions;
}

void Scheduler::Emit(Seq& seq, int64_t num_real, int32_t num_draft, StepPlan* plan) {
  const int64_t c = seq.num_computed;
  ScheduledRequest e;
  e.id = seq.request.id;
  e.partition = seq.partition;
  e.slot = seq.slot.slot;
  e.generation = seq.slot.generation;
  e.is_new = seq.slot_is_new;
  if (e.is_new) {
    e.sampling = seq.request.sampling;
    e.num_prompt_tokens = seq.num_prompt;
  }
  e.start_pos = c;
  e.token_ids.assign(seq.tokens.begin() + c, seq.tokens.begin() + c + num_real);
  e.token_ids.insert(e.token_ids.end(), static_cast<size_t>(num_draft), kDraftToken);
  e.num_draft = num_draft;
  e.decode = IsDecoding(seq);
  e.needs_logits = c + num_real == seq.num_tokens();
  const int64_t tile = config_.prefill_tile;
  e.num_padded_tokens = e.decode ? num_real + num_draft : (num_real + tile - 1) / tile * tile;
  cache_.Allocate(seq.partition, e.id, {c, c + num_real + num_draft, num_draft}, &e.fresh_pages);
  e.block_tables = cache_.Tables(e.id);
  if (e.is_new && seq.restore_snapshot >= 0) {
    e.restore_snapshot = seq.restore_snapshot;
    e.prefix_token_ids.assign(seq.tokens.begin(), seq.tokens.begin() + c);
  }
  seq.restore_snapshot = -1;
  // A step that ends on a page boundary past the last snapshot saves one
  // there (kept only if the step's every row stands, ApplyResult).
  const int64_t end = c + num_real + num_draft;
  if (Snapshots() && end % cache_.prefix_page_tokens() == 0 && end > seq.snapshot_valid &&
      (cache_.HasWorkingSnapshot(e.id) || cache_.CanTakeSnapshot(seq.partition))) {
    e.save_snapshot = cache_.TakeSnapshot(e.id, end);
    e.save_at = end;
  }
  seq.slot_is_new = false;
  seq.scheduled_step = current_step_;
  plan->num_tokens += num_real + num_draft;
  stats_.num_draft_tokens += num_draft;
  plan->requests.push_back(std::move(e));
}

// Whether the request got rows in this step.
bool Scheduler::ScheduleRunning(Seq& seq, int64_t budget, StepPlan* plan) {
  const int64_t c = seq.num_computed;
  const RequestId id = seq.request.id;
  if (IsDecoding(seq)) {
    const int32_t wanted = DraftBudget(seq);
    int32_t k = static_cast<int32_t>(std::min<int64_t>(wanted, budget - 1));
    while (!cache_.CanAllocate(seq.partition, id, {c, c + 1 + k, k})) {
      if (k > 0) {
        k = 0;  // speculation never costs anyone their pages
        continue;
      }
      Seq* victim = PickVictim(seq);
      if (victim == nullptr) return false;
      Preempt(*victim, seq, plan);
    }
    if (k < wanted)
      plan->events.push_back({SchedulerEvent::Kind::kDraftsDropped, id, 0, wanted, k});
    Emit(seq, 1, k, plan);
    return true;
  }
  const int64_t chunk = ChunkSize(seq, budget);
  if (chunk <= 0) return false;
  int64_t n = 0;
  while ((n = LargestFittingChunk(seq.partition, seq, chunk)) == 0) {
    Seq* victim = PickVictim(seq);
    if (victim == nullptr) return false;
    Preempt(*victim, seq, plan);
  }
  if (n < chunk) plan->events.push_back({SchedulerEvent::Kind::kChunkShrunk, id, 0, chunk, n});
  Emit(seq, n, 0, plan);
  return true;
}

int32_t Scheduler::PickPartition(const Seq& seq, int64_t chunk, const std::vector<int64_t>& load) {
  const int32_t num_partitions = config_.num_partitions;
  const cache::StepSpan first{0, chunk, 0};
  int32_t best = -1;
  for (int32_t i = 0; i < num_partitions; ++i) {
    const int32_t p = (partition_cursor_ + i) % num_partitions;
    if (slots_[size_t(p)].num_free() == 0) continue;
    if (best >= 0 && load[size_t(p)] >= load[size_t(best)]) continue;
    if (cache_.CanAllocate(p, seq.request.id, first)) best = p;
  }
  if (best >= 0) partition_cursor_ = (best + 1) % num_partitions;
  return best;
}

int32_t Scheduler::AdmitWithHit(Seq& seq, int64_t budget, const std::vector<int64_t>& load,
                                int64_t* chunk) {
  if (!cache_.prefix_caching()) return -1;
  const int32_t num_partitions = config_.num_partitions;
  int32_t best = -1;
  cache::CacheManager::PrefixMatch match;
  for (int32_t i = 0; i < num_partitions; ++i) {
    const int32_t p = (partition_cursor_ + i) % num_partitions;
    if (slots_[size_t(p)].num_free() == 0) continue;
    // At least one token is computed: a hit must produce logits.
    cache::CacheManager::PrefixMatch m = cache_.MatchPrefix(p, seq.tokens, seq.num_tokens() - 1);
    if (m.num_tokens == 0) continue;
    if (best < 0 || m.num_tokens > match.num_tokens ||
        (m.num_tokens == match.num_tokens && load[size_t(p)] < load[size_t(best)])) {
      best = p;
      match = std::move(m);
    }
  }
  if (best < 0) return -1;
  const RequestId id = seq.request.id;
  cache_.AdoptPrefix(best, id, match);
  seq.num_computed = match.num_tokens;
  const int64_t n = ChunkSize(seq, budget);
  if (n > 0 && cache_.CanAllocate(best, id, {seq.num_computed, seq.num_computed + n, 0})) {
    *chunk = n;
    seq.restore_snapshot = match.snapshot;
    partition_cursor_ = (best + 1) % num_partitions;
    return best;
  }
  cache_.Free(id);  // the pages go back to the cache as they were
  seq.num_computed = 0;
  return -1;
}

bool Scheduler::AwaitsSharedPrefix(const Seq& seq) const {
  const int64_t page = cache_.prefix_page_tokens();
  const int64_t mine = PrefixBoundary(seq);
  if (mine == 0) return false;
  for (const auto& [arrival, rid] : running_) {
    const Seq& r = seqs_.at(rid);
    const int64_t theirs = PrefixBoundary(r);
    const int64_t common = std::min(mine, theirs) / page * page;
    // Only while r still computes the shared pages (it publishes them, with
    // its snapshot, when it reaches its L): one past them (it hit them, or
    // computed them and is on its way to its L) is not waited for, so a
    // prefix many prompts share (a system prompt) holds admission back only
    // while a writer computes it; a request admitted between r passing the
    // shared pages and r reaching its L computes them again.  Cheap checks
    // first: few running requests are that early in their prefill.
    if (common == 0 || r.num_computed >= common || r.snapshot_published >= theirs) continue;
    if (std::equal(seq.tokens.begin(), seq.tokens.begin() + common, r.tokens.begin())) return true;
  }
  return false;
}

void Scheduler::AdmitWaiting(StepPlan* plan, int64_t* budget) {
  std::vector<int64_t> load(size_t(config_.num_partitions), 0);  // held tokens per partition
  for (const auto& [arrival, id] : running_) {
    const Seq& seq = seqs_.at(id);
    load[size_t(seq.partition)] += seq.num_tokens();
  }
  bool head = true;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    Seq& seq = seqs_.at(it->second);
    ++it;  // admission erases seq's entry
    if (num_running() >= config_.max_num_seqs || *budget <= 0) break;
    if (seq.preempted_step == current_step_) continue;
    if (Snapshots() && AwaitsSharedPrefix(seq)) {
      head = false;
      continue;
    }
    int64_t chunk = 0;
    int32_t p = AdmitWithHit(seq, *budget, load, &chunk);
    if (p < 0) {
      chunk = ChunkSize(seq, *budget);
      if (chunk <= 0) {  // needs a larger budget than this step has left
        head = false;
        continue;
      }
      // The whole first chunk must fit (no shrinking on admission: a request
      // admitted into scraps would only be preempted again).
      p = PickPartition(seq, chunk, load);
    }
    if (p < 0) {
      ++seq.admission_skips;
      // Past its limit the oldest waiting request stops everyone behind it, so
      // pages freed by finishing requests go to it.
      if (head && seq.admission_skips > config_.max_admission_skips) break;
      head = false;
      continue;
    }
    head = false;
    waiting_.erase(seq.arrival);
    running_.emplace(seq.arrival, seq.request.id);
    seq.status = SeqStatus::kRunning;
    seq.partition = p;
    seq.slot = slots_[size_t(p)].Acquire();
    seq.slot_is_new = true;
    seq.admission_skips = 0;
    if (cache_.prefix_caching()) {
      stats_.prefix_cache_queries += seq.num_tokens();
      stats_.prefix_cache_hits += seq.num_computed;
      if (seq.num_cached < 0) seq.num_cached = seq.num_computed;
    }
    Emit(seq, chunk, 0, plan);
    *budget -= chunk;
    load[size_t(p)] += seq.num_tokens();
  }
}

StepPlan Scheduler::Schedule() {
  DSV4_CHECK_MSG(!in_flight_, "Schedule called before the previous plan was committed");
  StepPlan plan;
  plan.step_id = next_step_id_++;
  current_step_ = plan.step_id + 1;
  in_flight_ = true;
  ++stats_.num_steps;
  // Rows later decoders need: tail rows (reserved from earlier decoders'
  // drafts) and full rows (reserved from prefill chunks).
  std::vector<RequestId> order;
  for (const auto& [arrival, id] : running_) order.push_back(id);
  std::vector<int64_t> tails_after(order.size() + 1, 0), rows_after(order.size() + 1, 0);
  for (size_t i = order.size(); i-- > 0;) {
    const Seq& seq = seqs_.at(order[i]);
    const bool decoding = IsDecoding(seq);
    tails_after[i] = tails_after[i + 1] + (decoding ? 1 : 0);
    rows_after[i] = rows_after[i + 1] + (decoding ? 1 + DraftBudget(seq) : 0);
  }
  int64_t budget = config_.max_num_batched_tokens;
  for (size_t i = 0; i < order.size() && budget > 0; ++i) {
    auto it = seqs_.find(order[i]);
    if (it == seqs_.end() || it->second.status != SeqStatus::kRunning) continue;  // preempted
    Seq& seq = it->second;
    const int64_t reserve = IsDecoding(seq) ? tails_after[i + 1] : rows_after[i + 1];
    const int64_t avail = budget - reserve;
    if (avail <= 0) continue;
    const int64_t before = plan.num_tokens;
    if (ScheduleRunning(seq, avail, &plan)) budget -= plan.num_tokens - before;
  }
  AdmitWaiting(&plan, &budget);
  plan.released = std::move(released_);
  released_.clear();
  return plan;
}

Scheduler::Seq* Scheduler::FindLive(const ScheduledRequest& entry) {
  auto it = seqs_.find(entry.id);
  if (it == seqs_.end()) return nullptr;
  Seq& seq = it->second;
  if (seq.status != SeqStatus::kRunning || seq.partition != entry.partition ||
      seq.slot.slot != entry.slot || seq.slot.generation != entry.generation) {
    return nullptr;
  }
  return &seq;
}

Status Scheduler::CheckResult(const ScheduledRequest& e, const RequestResult& r) const {
  if (!r.error.ok()) return r.error;
  if (r.generation != e.generation) {
    return Internal("request {}: result for generation {} but the plan has {}", e.id, r.generation,
                    e.generation);
  }
  const int64_t n = static_cast<int64_t>(r.tokens.size());
  if (!e.needs_logits) {
    if (n != 0 || r.num_accepted_drafts != 0) {
      return Internal("request {}: {} tokens committed for a chunk without logits", e.id, n);
    }
    return Status::Ok();
  }
  if (n < 1 || n > 1 + e.num_draft || r.num_accepted_drafts != n - 1) {
    return Internal("request {}: {} tokens with {} accepted drafts for {} draft rows", e.id, n,
                    r.num_accepted_drafts, e.num_draft);
  }
  for (int32_t t : r.tokens) {
    if (t < 0) return Internal("request {}: negative token id {}", e.id, t);
  }
  // Executors that do not report drafts or logprobs leave them empty.
  if (!r.drafts.empty() && static_cast<int32_t>(r.drafts.size()) != e.num_draft) {
    return Internal("request {}: {} drafts reported for {} draft rows", e.id, r.drafts.size(),
                    e.num_draft);
  }
  if (!r.logprobs.empty() && static_cast<int64_t>(r.logprobs.size()) != n) {
    return Internal("request {}: {} logprobs for {} tokens", e.id, r.logprobs.size(), n);
  }
  return Status::Ok();
}

void Scheduler::ApplyResult(Seq& seq, const ScheduledRequest& e, const RequestResult& r) {
  seq.num_computed = e.start_pos + e.num_real_tokens() + r.num_accepted_drafts;
  if (e.needs_logits) seq.has_draft_state = true;
  stats_.num_accepted_drafts += r.num_accepted_drafts;
  const auto& stops = seq.request.stop_token_ids;
  RequestOutput out;
  out.num_draft_tokens = e.needs_logits ? e.num_draft : 0;
  out.num_accepted_tokens = r.num_accepted_drafts;
  std::vector<int32_t>& appended = out.new_tokens;
  FinishReason finish = FinishReason::kNone;
  for (int32_t t : r.tokens) {
    seq.tokens.push_back(t);
    appended.push_back(t);
    // Tokens after a stop or past a limit are dropped with everything they
    // left in the cache (Finish frees it).
    if (std::find(stops.begin(), stops.end(), t) != stops.end()) {
      finish = FinishReason::kStop;
    } else if (seq.num_output() >= seq.request.max_tokens ||
               seq.num_tokens() >= config_.max_model_len) {
      finish = FinishReason::kLength;
    }
    if (finish != FinishReason::kNone) break;
  }
  // Tokens cut by a stop token or the length limit lose their logprobs.
  if (!r.logprobs.empty()) {
    out.logprobs.assign(r.logprobs.begin(),
                        r.logprobs.begin() + static_cast<std::ptrdiff_t>(appended.size()));
  }
  out.num_cached_tokens = std::max<int64_t>(seq.num_cached, 0);
  // The runner saved the snapshot iff every row of the step stands.
  if (e.save_snapshot >= 0 && seq.num_computed == e.save_at && e.save_at <= seq.num_tokens()) {
    seq.snapshot_valid = e.save_at;
  }
  if (finish != FinishReason::kNone) {
    out.finish = finish;
    if (cache_.prefix_caching()) {
      cache_.Commit(seq.request.id, seq.num_computed);
      PublishOnExit(seq);
    }
    Finish(seq, std::move(out));
    return;
  }
  cache_.Commit(seq.request.id, seq.num_computed);
  // A prefill boundary (L) is published at once: a request with the same
  // prompt may hit it while this one decodes.  Decode boundaries wait for
  // the exit (one working snapshot per request, not one per page).
  if (!e.decode && seq.snapshot_valid == e.save_at && e.save_snapshot >= 0) PublishOnExit(seq);
  if (!appended.empty()) {
    out.id = seq.request.id;
    outputs_.push_back(std::move(out));
  }
}

Status Scheduler::Commit(const StepPlan& plan, const StepResult& result) {
  DSV4_CHECK_MSG(in_flight_, "Commit without a scheduled plan");
  if (result.step_id != plan.step_id) {
    const Status error =
        Internal("step result {} does not belong to plan {}", result.step_id, plan.step_id);
    FailStep(plan, error);
    return error;
  }
  in_flight_ = false;
  std::unordered_map<RequestId, const RequestResult*> by_id;
  for (const RequestResult& r : result.requests) by_id.emplace(r.id, &r);
  for (const ScheduledRequest& e : plan.requests) {
    Seq* seq = FindLive(e);
    if (seq == nullptr) continue;  // aborted since: its pages and slot are already free
    auto it = by_id.find(e.id);
    Status ok = it == by_id.end() ? Internal("request {}: no result in step {}", e.id, plan.step_id)
                                  : CheckResult(e, *it->second);
    if (!ok.ok()) {
      Finish(*seq, ErrorOutput(ok));
      continue;
    }
    ApplyResult(*seq, e, *it->second);
  }
  return Status::Ok();
}

void Scheduler::FailStep(const StepPlan& plan, const Status& error) {
  in_flight_ = false;
  for (const ScheduledRequest& e : plan.requests) {
    Seq* seq = FindLive(e);
    if (seq != nullptr) Finish(*seq, ErrorOutput(error.WithPrefix("step failed")));
  }
}

void Scheduler::PublishOnExit(Seq& seq) {
  if (!cache_.prefix_caching() || seq.status != SeqStatus::kRunning) return;
  const RequestId id = seq.request.id;
  const int64_t page = cache_.prefix_page_tokens();
  if (!cache_.uses_snapshots()) {
    const int64_t n = std::min(seq.num_computed, seq.num_tokens()) / page;
    cache_.PublishPrefix(id, seq.tokens, n);
    return;
  }
  if (seq.snapshot_valid <= seq.snapshot_published || !cache_.HasWorkingSnapshot(id)) return;
  // The buffer holds the state at snapshot_valid (a later save that did not
  // happen only re-targeted the id).
  cache_.TakeSnapshot(id, seq.snapshot_valid);
  cache_.PublishPrefix(id, seq.tokens, seq.snapshot_valid / page, /*snapshot_at_end=*/true);
  seq.snapshot_published = seq.snapshot_valid;
}

void Scheduler::ReleaseResources(Seq& seq) {
  if (seq.status == SeqStatus::kWaiting) {
    waiting_.erase(seq.arrival);
    return;
  }
  cache_.Free(seq.request.id);
  slots_[size_t(seq.partition)].Release(seq.slot.slot);
  released_.push_back({seq.request.id, seq.partition, seq.slot.slot, seq.slot.generation});
  running_.erase(seq.arrival);
  seq.partition = -1;
  seq.slot = {};
}

void Scheduler::Finish(Seq& seq, RequestOutput out) {
  const RequestId id = seq.request.id;
  out.id = id;
  out.num_cached_tokens = std::max<int64_t>(seq.num_cached, 0);
  ReleaseResources(seq);
  outputs_.push_back(std::move(out));
  seqs_.erase(id);
}

std::vector<RequestOutput> Scheduler::TakeOutputs() {
  std::vector<RequestOutput> out;
  out.swap(outputs_);
  return out;
}

Status Scheduler::CheckInvariants() const {
  DSV4_RETURN_IF_ERROR(cache_.CheckInvariants());
  if (num_running() > config_.max_num_seqs) {
    return Internal("{} running requests exceed --max-num-seqs {}", num_running(),
                    config_.max_num_seqs);
  }
  if (cache_.num_owners() != num_running()) {
    return Internal("{} cache owners but {} running requests", cache_.num_owners(), num_running());
  }
  int64_t slots_in_use = 0;
  for (const SlotPool& pool : slots_) slots_in_use += pool.num_slots() - pool.num_free();
  if (slots_in_use != num_running()) {
    return Internal("{} slots in use but {} running requests", slots_in_use, num_running());
  }
  if (num_running() + num_waiting() != static_cast<int64_t>(seqs_.size())) {
    return Internal("request maps disagree: {} running + {} waiting != {}", num_running(),
                    num_waiting(), seqs_.size());
  }
  for (const auto& [id, seq] : seqs_) {
    if (seq.status == SeqStatus::kWaiting) {
      if (cache_.Holds(id) || seq.num_computed != 0) {
        return Internal("waiting request {} holds pages or computed tokens", id);
      }
      continue;
    }
    const SlotPool& pool = slots_[size_t(seq.partition)];
    if (!cache_.Holds(id) || cache_.PartitionOf(id) != seq.partition ||
        !pool.in_use(seq.slot.slot) || pool.generation(seq.slot.slot) != seq.slot.generation) {
      return Internal("running request {}: pages or slot do not match", id);
    }
    if (!in_flight_ && seq.num_computed >= seq.num_tokens()) {
      return Internal("running request {}: {} computed of {} tokens", id, seq.num_computed,
                      seq.num_tokens());
    }
  }
  return Status::Ok();
}

}  // namespace dsv4::engine
