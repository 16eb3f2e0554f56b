#include "fake_engine.h"

#include <algorithm>

namespace dsv4::server::testing {

FakeEngine::FakeEngine(FakeEngineOptions options) : opt_(options), thread_([this] { Loop(); }) {}

FakeEngine::~FakeEngine() { Shutdown(); }

int32_t FakeEngine::TokenAt(const std::vector<int32_t>& prompt, int64_t i,
                            const FakeEngineOptions& o) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : prompt) h = (h ^ static_cast<uint64_t>(t)) * 1099511628211ull;
  h = (h ^ static_cast<uint64_t>(i)) * 1099511628211ull;
  return o.vocab_lo + static_cast<int32_t>(h % static_cast<uint64_t>(o.vocab_hi - o.vocab_lo));
}

Result<engine::RequestId> FakeEngine::Submit(engine::GenerationRequest request,
                                             OutputCallback on_output) {
  if (request.prompt.empty()) return InvalidArgument("empty prompt");
  if (static_cast<int64_t>(request.prompt.size()) + request.max_tokens > opt_.max_model_len) {
    return InvalidArgument("prompt + max_tokens over max_model_len");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) return Status(StatusCode::kUnavailable, "engine stopped");
  if (static_cast<int64_t>(waiting_.size()) >= opt_.max_waiting) {
    return ResourceExhausted("waiting queue full ({})", opt_.max_waiting);
  }
  const engine::RequestId id = next_id_++;
  waiting_.push_back({id, Live{std::move(request), std::move(on_output)}});
  cv_.notify_one();
  return id;
}

void FakeEngine::Abort(engine::RequestId id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = running_.find(id); it != running_.end()) it->second.abort = true;
  for (auto& [wid, live] : waiting_) {
    if (wid == id) live.abort = true;
  }
}

engine::EngineStats FakeEngine::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  engine::EngineStats s;
  s.num_running = static_cast<int64_t>(running_.size());
  s.num_waiting = static_cast<int64_t>(waiting_.size());
  s.cache_usage = static_cast<double>(running_.size()) / static_cast<double>(opt_.max_running);
  s.prompt_tokens_total = prompt_total_;
  s.generation_tokens_total = gen_total_;
  s.spec_accepted_per_pos = {0};
  s.prefix_cache_queries = prefix_queries_;
  s.prefix_cache_hits = prefix_hits_;
  return s;
}

void FakeEngine::set_paused(bool paused) {
  std::lock_guard<std::mutex> lock(mu_);
  paused_ = paused;
  cv_.notify_one();
}

void FakeEngine::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
    cv_.notify_one();
  }
  thread_.join();
  ready_ = false;
}

// One step under the lock; callbacks run after it is released.
void FakeEngine::Step(std::vector<std::pair<OutputCallback, engine::GenerationOutput>>* outputs) {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (it->second.abort) {
      engine::GenerationOutput out;
      out.id = it->first;
      out.finish = engine::FinishReason::kAbort;
      ++num_aborted_;
      outputs->push_back({it->second.on_output, out});
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
  while (!waiting_.empty() && static_cast<int64_t>(running_.size()) < opt_.max_running) {
    prompt_total_ += static_cast<int64_t>(waiting_.front().second.request.prompt.size());
    if (opt_.prefix_page > 0) {
      Live& w = waiting_.front().second;
      const std::vector<int32_t>& p = w.request.prompt;
      int64_t best = 0;
      for (const std::vector<int32_t>& q : seen_prompts_) {
        const auto n = static_cast<int64_t>(std::min(p.size(), q.size()));
        int64_t i = 0;
        while (i < n && p[static_cast<size_t>(i)] == q[static_cast<size_t>(i)]) ++i;
        best = std::max(best, i);
      }
      best = std::min<int64_t>(best, static_cast<int64_t>(p.size()) - 1);
      w.cached = best / opt_.prefix_page * opt_.prefix_page;
      prefix_queries_ += static_cast<int64_t>(p.size());
      prefix_hits_ += w.cached;
      seen_prompts_.push_back(p);
    }
    running_.emplace(waiting_.front().first, std::move(waiting_.front().second));
    waiting_.pop_front();
  }
  for (auto it = running_.begin(); it != running_.end();) {
    Live& live = it->second;
    engine::GenerationOutput out;
    out.id = it->first;
    out.num_cached_tokens = live.cached;
    if (live.abort || stop_) {
      out.finish = engine::FinishReason::kAbort;
      ++num_aborted_;
    } else {
      const int32_t tok = TokenAt(live.request.prompt, live.produced++, opt_);
      out.new_tokens.push_back(tok);
      ++gen_total_;
      if (live.request.sampling.logprobs >= 0) {
        engine::TokenLogprob lp;
        lp.token = tok;
        lp.logprob = -0.5f;
        for (int32_t k = 0; k < live.request.sampling.logprobs; ++k)
          lp.top.push_back({tok + k, -0.5f - static_cast<float>(k)});
        out.logprobs.push_back(lp);
      }
      const auto& stops = live.request.stop_token_ids;
      const bool stop = std::find(stops.begin(), stops.end(), tok) != stops.end() ||
                        (tok == opt_.eos_id && !live.request.sampling.ignore_eos);
      if (stop)
        out.finish = engine::FinishReason::kStop;
      else if (live.produced >= live.request.max_tokens)
        out.finish = engine::FinishReason::kLength;
    }
    outputs->push_back({live.on_output, out});
    it = out.finish != engine::FinishReason::kNone ? running_.erase(it) : std::next(it);
  }
}

void FakeEngine::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || (!paused_ && (!running_.empty() || !waiting_.empty())); });
    std::vector<std::pair<OutputCallback, engine::GenerationOutput>> outputs;
    Step(&outputs);
    const bool done = stop_ && running_.empty() && waiting_.empty();
    lock.unlock();
    for (auto& [cb, out] : outputs) cb(out);
    std::this_thread::sleep_for(opt_.step_time);
    lock.lock();
    if (done) return;
  }
}

}  // namespace dsv4::server::testing
