#include "engine/offline.h"

#include <chrono>

#include "base/mutex.h"

namespace dsv4::engine {

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Outputs arrive on the engine thread; the caller waits on `done`.
struct Collector {
  Mutex mu;
  CondVar cv;
  std::vector<OfflineOutput> outputs GUARDED_BY(mu);
  std::vector<bool> got_first GUARDED_BY(mu);
  size_t num_finished GUARDED_BY(mu) = 0;
  Clock::time_point start;
};

}  // namespace

Result<OfflineReport> RunOffline(AsyncEngine& engine, std::vector<GenerationRequest> requests) {
  Collector c;
  {
    MutexLock lock(&c.mu);
    c.outputs.resize(requests.size());
    c.got_first.assign(requests.size(), false);
    for (OfflineOutput& o : c.outputs) o.id = -1;
  }
  const EngineStats before = engine.Stats();
  c.start = Clock::now();
  std::vector<RequestId> ids;
  for (size_t i = 0; i < requests.size(); ++i) {
    auto on_output = [&c, i](const GenerationOutput& g) {
      const Clock::time_point now = Clock::now();
      MutexLock lock(&c.mu);
      OfflineOutput& o = c.outputs[i];
      o.tokens.insert(o.tokens.end(), g.new_tokens.begin(), g.new_tokens.end());
      o.logprobs.insert(o.logprobs.end(), g.logprobs.begin(), g.logprobs.end());
      o.num_draft_tokens += g.num_draft_tokens;
      o.num_accepted_tokens += g.num_accepted_tokens;
      o.num_cached_tokens = g.num_cached_tokens;
      if (!g.new_tokens.empty() && !c.got_first[i]) {
        c.got_first[i] = true;
        o.first_token_seconds = Seconds(c.start, now);
      }
      if (g.finish != FinishReason::kNone) {
        o.finish = g.finish;
        o.error = g.error;
        o.total_seconds = Seconds(c.start, now);
        ++c.num_finished;
        c.cv.SignalAll();
      }
    };
    Result<RequestId> id = engine.Submit(std::move(requests[i]), on_output);
    if (!id.ok()) {
      for (RequestId done : ids) engine.Abort(done);
      MutexLock lock(&c.mu);
      c.cv.Wait(&c.mu, [&]() REQUIRES(c.mu) { return c.num_finished == ids.size(); });
      return id.status().WithPrefix(fmt::format("request {}", i));
    }
    ids.push_back(*id);
    MutexLock lock(&c.mu);
    c.outputs[i].id = *id;
  }
  OfflineReport r;
  {
    MutexLock lock(&c.mu);
    c.cv.Wait(&c.mu, [&]() REQUIRES(c.mu) { return c.num_finished == c.outputs.size(); });
    r.outputs = std::move(c.outputs);
  }
  r.wall_seconds = Seconds(c.start, Clock::now());
  const EngineStats after = engine.Stats();
  double first = 0;
  for (const OfflineOutput& o : r.outputs) {
    r.generated_tokens += static_cast<int64_t>(o.tokens.size());
    first += o.first_token_seconds;
  }
  r.prompt_tokens = after.prompt_tokens_total - before.prompt_tokens_total;
  if (!r.outputs.empty())
    r.mean_first_token_seconds = first / static_cast<double>(r.outputs.size());
  r.spec_verify_steps = after.spec_num_drafts - before.spec_num_drafts;
  r.spec_draft_tokens = after.spec_num_draft_tokens - before.spec_num_draft_tokens;
  r.spec_accepted_tokens = after.spec_num_accepted_tokens - before.spec_num_accepted_tokens;
  r.spec_accepted_per_pos = after.spec_accepted_per_pos;
  for (size_t i = 0; i < r.spec_accepted_per_pos.size(); ++i) {
    if (i < before.spec_accepted_per_pos.size()) {
      r.spec_accepted_per_pos[i] -= before.spec_accepted_per_pos[i];
    }
  }
  if (r.spec_verify_steps > 0) {
    r.mean_accepted_length = static_cast<double>(r.spec_accepted_tokens + r.spec_verify_steps) /
                             static_cast<double>(r.spec_verify_steps);
  }
  return r;
}

}  // namespace dsv4::engine
