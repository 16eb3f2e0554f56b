#include "engine/local_engine.h"

#include <utility>

#include "base/logging.h"
#include "engine/sampling_params.h"
#include "engine/stats_log.h"
#include "profile/profile.h"

namespace dsv4::engine {

Result<std::unique_ptr<LocalEngine>> LocalEngine::Start(LocalEngineConfig config,
                                                        LocalEngineParts parts) {
  if (parts.executor == nullptr || parts.core == nullptr) {
    return InvalidArgument("LocalEngine::Start needs an executor and an engine core");
  }
  std::unique_ptr<LocalEngine> engine(new LocalEngine(std::move(config), std::move(parts)));
  {
    MutexLock lock(&engine->mu_);
    engine->running_ = true;
  }
  engine->thread_ = std::thread([e = engine.get()] { e->Loop(); });
  return engine;
}

LocalEngine::LocalEngine(LocalEngineConfig config, LocalEngineParts parts)
    : config_(std::move(config)), parts_(std::move(parts)) {}

LocalEngine::~LocalEngine() {
  Shutdown();
  // parts_ go after the thread has stopped: the core first, then the
  // executor, then the resources it ran on (member order).
}

// Submit's checks, on the caller's thread (pure: reads only config_).
Status LocalEngine::Check(const Request& request) const {
  const int64_t vocab = config_.vocab_size;
  if (request.prompt.empty()) return InvalidArgument("the prompt is empty");
  for (int32_t t : request.prompt) {
    if (t < 0 || t >= vocab) return InvalidArgument("prompt token id {} outside [0, {})", t, vocab);
  }
  for (int32_t t : request.stop_token_ids) {
    if (t < 0 || t >= vocab) return InvalidArgument("stop token id {} outside [0, {})", t, vocab);
  }
  if (request.max_tokens < 1) return InvalidArgument("max_tokens {} < 1", request.max_tokens);
  if (request.sampling.min_tokens > request.max_tokens) {
    return InvalidArgument("min_tokens ({}) exceeds max_tokens ({})", request.sampling.min_tokens,
                           request.max_tokens);
  }
  const auto prompt_len = static_cast<int64_t>(request.prompt.size());
  if (prompt_len + request.max_tokens > config_.max_model_len) {
    return InvalidArgument("prompt ({} tokens) + max_tokens ({}) exceeds --max-model-len {}",
                           prompt_len, request.max_tokens, config_.max_model_len);
  }
  return ValidateSamplingParams(request.sampling, vocab);
}

Result<RequestId> LocalEngine::Submit(GenerationRequest request, OutputCallback on_output) {
  DSV4_RETURN_IF_ERROR(Check(request));
  Request r = std::move(request);  // GenerationRequest is the engine's Request
  if (!r.sampling.ignore_eos && config_.eos_token_id >= 0) {
    r.stop_token_ids.push_back(static_cast<int32_t>(config_.eos_token_id));
  }
  // min_tokens masks exactly the ids that would finish the request.
  r.sampling.min_tokens_stop_ids.clear();
  if (r.sampling.min_tokens > 0) r.sampling.min_tokens_stop_ids = r.stop_token_ids;
  const auto prompt_len = static_cast<int64_t>(r.prompt.size());
  const int64_t submit_ns = profile::Enabled(profile::kE2e) ? profile::NowNs() : 0;
  MutexLock lock(&mu_);
  if (stop_) return Status(StatusCode::kUnavailable, "the engine is shut down");
  const auto queued = static_cast<int64_t>(submitted_.size()) + num_queued_in_core_;
  if (queued >= config_.max_waiting) {
    return ResourceExhausted("{} requests are waiting (--max-waiting {})", queued,
                             config_.max_waiting);
  }
  r.id = next_id_++;
  const RequestId id = r.id;
  stats_.prompt_tokens_total += prompt_len;
  submitted_.push_back({std::move(r), std::move(on_output), submit_ns});
  cv_.Signal();
  return id;
}

void LocalEngine::Abort(RequestId id) {
  MutexLock lock(&mu_);
  aborts_.push_back(id);
  cv_.Signal();
}

EngineStats LocalEngine::Stats() const {
  MutexLock lock(&mu_);
  EngineStats s = stats_;
  s.num_waiting += static_cast<int64_t>(submitted_.size());
  return s;
}

bool LocalEngine::Ready() const {
  MutexLock lock(&mu_);
  return running_;
}

void LocalEngine::Shutdown() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    cv_.Signal();
  }
  if (thread_.joinable()) thread_.join();
}

bool LocalEngine::Drain(std::vector<Submitted>* submitted, std::vector<RequestId>* aborts) {
  const bool busy = parts_.core->HasUnfinished();
  MutexLock lock(&mu_);
  cv_.Wait(&mu_, [&]() REQUIRES(mu_) {
    return stop_ || busy || !submitted_.empty() || !aborts_.empty();
  });
  submitted->swap(submitted_);
  aborts->swap(aborts_);
  return !stop_;
}

// Engine thread: hands drained submissions to the core; one it refuses
// (e.g. a duplicate id) ends at once with its error.
void LocalEngine::Admit(std::vector<Submitted>* submitted) {
  for (Submitted& s : *submitted) {
    const RequestId id = s.request.id;
    // Traced from its submission (queue time included); a request refused
    // here shows as submitted and finished with "error".
    if (s.submit_ns > 0) parts_.core->tracer().OnSubmitted(s.request, s.submit_ns);
    const Status st = parts_.core->AddRequest(std::move(s.request));
    if (!st.ok()) {
      GenerationOutput out;
      out.id = id;
      out.finish = FinishReason::kError;
      out.error = st;
      parts_.core->tracer().OnOutputs({out}, profile::NowNs());
      s.on_output(out);
      continue;
    }
    live_.emplace(id, Live{std::move(s.on_output), {}});
  }
}

void LocalEngine::Loop() {
  profile::SetThreadName("engine");
  std::vector<Submitted> submitted;
  std::vector<RequestId> aborts;
  while (true) {
    submitted.clear();
    aborts.clear();
    const bool keep_running = Drain(&submitted, &aborts);
    Admit(&submitted);
    // Unknown or finished ids are ignored (NotFound).
    for (RequestId id : aborts) (void)parts_.core->Abort(id);
    if (!keep_running) break;
    Result<std::vector<RequestOutput>> outputs = parts_.core->Step();
    if (!outputs.ok()) {
      DSV4_LOG_ERROR("engine step: {}", outputs.status().ToString());
    } else {
      Deliver(*outputs);
    }
    UpdateStats();
    MaybeLogStats();
  }
  AbortAll();
  MutexLock lock(&mu_);
  running_ = false;
}

void LocalEngine::AbortAll() {
  std::vector<RequestId> live;
  for (const auto& [id, request] : live_) live.push_back(id);
  for (RequestId id : live) (void)parts_.core->Abort(id);
  // One more step delivers the kAbort outputs and releases the runner slots.
  Result<std::vector<RequestOutput>> outputs = parts_.core->Step();
  if (outputs.ok()) Deliver(*outputs);
  UpdateStats();
}

void LocalEngine::Deliver(const std::vector<RequestOutput>& outputs) {
  int64_t generated = 0;
  for (const RequestOutput& o : outputs) {
    auto it = live_.find(o.id);
    if (it == live_.end()) continue;
    Live& request = it->second;
    request.spec.Add(o);
    spec_.Add(o);
    generated += static_cast<int64_t>(o.new_tokens.size());
    request.on_output(o);
    if (o.finish == FinishReason::kNone) continue;
    const SpecStats& s = request.spec;
    if (s.num_draft_tokens > 0) {  // the reference's per-request acceptance line
      DSV4_LOG_DEBUG("MTP acceptance for request {}: accepted={} proposed={} rate={:.2f}%", o.id,
                     s.num_accepted_tokens, s.num_draft_tokens,
                     100.0 * static_cast<double>(s.num_accepted_tokens) /
                         static_cast<double>(s.num_draft_tokens));
    }
    live_.erase(it);
  }
  MutexLock lock(&mu_);
  stats_.generation_tokens_total += generated;
}

void LocalEngine::MaybeLogStats() {
  if (config_.log_stats_interval_s <= 0) return;
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - stats_logged_at_).count();
  if (seconds < config_.log_stats_interval_s) return;
  const EngineStats cur = Stats();
  if (std::optional<std::string> line = StatsLogLine(stats_logged_, cur, seconds)) {
    DSV4_LOG_INFO("{}", *line);
  }
  stats_logged_ = cur;
  stats_logged_at_ = now;
}

void LocalEngine::UpdateStats() {
  const Scheduler& sched = parts_.core->scheduler();
  const cache::CacheManager& cache = sched.cache();
  const cache::CapacityPlan& plan = config_.plan;
  // Bytes, not pages: ring groups are per-slot storage here (their pages are
  // bookkeeping priced at 0), so a running request's rings count through its
  // slot and the history groups through their pages.
  int64_t used = 0;
  bool per_slot_rings = true;
  for (int g = 0; g < cache.num_groups(); ++g) {
    const cache::CacheGroupSpec& spec = cache.group(g);
    if (spec.is_ring() && spec.page_bytes > 0) per_slot_rings = false;
    for (int32_t p = 0; p < cache.num_partitions(); ++p) {
      used += (cache.num_pages(g) - cache.num_free_pages(p, g)) * spec.page_bytes;
    }
  }
  if (per_slot_rings) used += sched.num_running() * plan.ring_bytes_per_request;
  const int64_t total = plan.total_bytes * cache.num_partitions();
  MutexLock lock(&mu_);
  stats_.num_running = sched.num_running();
  stats_.num_waiting = sched.num_waiting();
  num_queued_in_core_ = sched.num_waiting();
  stats_.cache_usage = total > 0 ? static_cast<double>(used) / static_cast<double>(total) : 0.0;
  stats_.spec_num_drafts = spec_.num_verify_steps;
  stats_.spec_num_draft_tokens = spec_.num_draft_tokens;
  stats_.spec_num_accepted_tokens = spec_.num_accepted_tokens;
  stats_.spec_accepted_per_pos = spec_.accepted_per_pos;
  stats_.prefix_cache_queries = sched.stats().prefix_cache_queries;
  stats_.prefix_cache_hits = sched.stats().prefix_cache_hits;
}

}  // namespace dsv4::engine
