#include "server/generation.h"

#include <algorithm>

namespace dsv4::server {

Generation::Generation(engine::AsyncEngine& engine, const text::Tokenizer& tokenizer,
                       ParsedRequest request)
    : engine_(engine),
      tokenizer_(tokenizer),
      request_(std::move(request)),
      queue_(std::make_shared<Queue>()),
      start_(Clock::now()) {}

Generation::~Generation() { AbortAll(); }

std::optional<ApiError> Generation::Start() {
  const int n = request_.n;
  const int num_choices = static_cast<int>(request_.prompts.size()) * n;
  for (int c = 0; c < num_choices; ++c) {
    Result<std::unique_ptr<ChoiceDecoder>> d = ChoiceDecoder::Create(request_, tokenizer_);
    if (!d.ok()) return FromStatus(d.status());
    decoders_.push_back(std::move(*d));
  }
  for (int c = 0; c < num_choices; ++c) {
    engine::GenerationRequest g;
    g.prompt = request_.prompts[c / n];
    g.max_tokens = request_.max_tokens;
    g.stop_token_ids = request_.stop_token_ids;
    g.sampling = request_.sampling;
    // n > 1 with a seed: distinct but reproducible streams per choice.
    if (g.sampling.seed && c > 0) g.sampling.seed = *g.sampling.seed + static_cast<uint64_t>(c);
    std::shared_ptr<Queue> q = queue_;
    Result<engine::RequestId> id =
        engine_.Submit(std::move(g), [q, c](const engine::GenerationOutput& out) {
          {
            MutexLock lock(&q->mu);
            q->items.push_back({c, out});
          }
          q->cv.Signal();
        });
    if (!id.ok()) {
      AbortAll();
      return FromStatus(id.status());
    }
    ids_.push_back(*id);
    engine_done_.push_back(false);
    cached_.push_back(0);
  }
  return std::nullopt;
}

std::vector<std::pair<int, ChoiceDelta>> Generation::Poll(std::chrono::milliseconds timeout) {
  std::deque<Pending> items;
  {
    Queue& q = *queue_;
    MutexLock lock(&q.mu);
    q.cv.WaitUntil(&q.mu, Clock::now() + timeout,
                   [&]() REQUIRES(q.mu) { return !q.items.empty(); });
    items.swap(q.items);
  }
  std::vector<std::pair<int, ChoiceDelta>> deltas;
  for (Pending& p : items) {
    if (p.output.finish != engine::FinishReason::kNone) engine_done_[p.choice] = true;
    cached_[static_cast<size_t>(p.choice)] = p.output.num_cached_tokens;
    ChoiceDecoder& d = *decoders_[p.choice];
    if (d.finished()) continue;
    if (!p.output.new_tokens.empty() && p.choice == 0) {
      const Clock::time_point now = Clock::now();
      if (first_token_ == Clock::time_point{}) {
        first_token_ = now;
      } else {
        itl_s_.push_back(std::chrono::duration<double>(now - last_token_).count());
      }
      last_token_ = now;
    }
    ChoiceDelta delta = d.Push(p.output);
    if (d.needs_abort() && !engine_done_[p.choice]) engine_.Abort(ids_[p.choice]);
    deltas.emplace_back(p.choice, std::move(delta));
  }
  return deltas;
}

bool Generation::done() const {
  for (const auto& d : decoders_) {
    if (!d->finished()) return false;
  }
  return true;
}

void Generation::AbortAll() {
  for (size_t c = 0; c < ids_.size(); ++c) {
    if (!engine_done_[c]) engine_.Abort(ids_[c]);
  }
}

int64_t Generation::prompt_tokens() const {
  int64_t total = 0;
  for (const auto& p : request_.prompts) total += static_cast<int64_t>(p.size());
  return total;
}

int64_t Generation::completion_tokens() const {
  int64_t total = 0;
  for (const auto& d : decoders_) total += d->num_tokens();
  return total;
}

int64_t Generation::cached_tokens() const {
  int64_t total = 0;
  const size_t n = static_cast<size_t>(std::max(request_.n, 1));
  for (size_t c = 0; c < cached_.size(); c += n) total += cached_[c];
  return total;
}

int64_t Generation::reasoning_tokens() const {
  int64_t total = 0;
  for (const auto& d : decoders_) total += d->num_reasoning_tokens();
  return total;
}

RequestTiming Generation::Timing() const {
  RequestTiming t;
  const Clock::time_point now = Clock::now();
  t.e2e_s = std::chrono::duration<double>(now - start_).count();
  if (first_token_ != Clock::time_point{}) {
    t.ttft_s = std::chrono::duration<double>(first_token_ - start_).count();
  }
  t.itl_s = itl_s_;
  t.prompt_tokens = prompt_tokens();
  t.cached_tokens = cached_tokens();
  t.generation_tokens = completion_tokens();
  t.finished_reason = "stop";
  if (!decoders_.empty()) {
    const std::string& r = decoders_[0]->finish_reason();
    t.finished_reason = r == "tool_calls" ? "stop" : (r.empty() ? "abort" : r);
  }
  return t;
}

}  // namespace dsv4::server
