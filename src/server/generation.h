// One HTTP request's generation: prompts x n engine requests, their outputs
// (pushed by the engine thread through the callback into a queue owned by
// this object) and one ChoiceDecoder per choice (run on the handler thread).
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "engine/async_engine.h"
#include "server/choice_decoder.h"
#include "server/metrics.h"
#include "server/request_parse.h"

namespace dsv4::server {

using Clock = std::chrono::steady_clock;

class Generation {
 public:
  Generation(engine::AsyncEngine& engine, const text::Tokenizer& tokenizer, ParsedRequest request);
  ~Generation();  // aborts whatever is still running

  // Creates the decoders and submits every choice; on failure aborts what
  // was submitted and returns the error.
  std::optional<ApiError> Start();

  // Waits up to `timeout` for engine outputs and decodes them.  Returns the
  // deltas per choice in arrival order (the same choice may appear twice).
  std::vector<std::pair<int, ChoiceDelta>> Poll(std::chrono::milliseconds timeout);

  bool done() const;
  void AbortAll();

  int num_choices() const { return static_cast<int>(decoders_.size()); }
  const ChoiceDecoder& choice(int i) const { return *decoders_[i]; }
  // The engine's id of choice i (after Start): the id of its request track in a trace.
  engine::RequestId engine_id(int i) const { return ids_[static_cast<size_t>(i)]; }
  const ParsedRequest& request() const { return request_; }
  int64_t prompt_tokens() const;
  int64_t completion_tokens() const;
  int64_t reasoning_tokens() const;
  // Prompt tokens served from the prefix cache: per prompt, its first
  // choice's (the other choices share the same prompt), summed over prompts
  // like prompt_tokens().
  int64_t cached_tokens() const;
  // Timing of the whole request for the metrics (first choice's token times).
  RequestTiming Timing() const;

 private:
  struct Pending {
    int choice;
    engine::GenerationOutput output;
  };
  // Filled by the engine thread (the Submit callback), drained by Poll.
  struct Queue {
    Mutex mu;
    CondVar cv;
    std::deque<Pending> items GUARDED_BY(mu);
  };

  engine::AsyncEngine& engine_;
  const text::Tokenizer& tokenizer_;
  ParsedRequest request_;
  std::shared_ptr<Queue> queue_;  // shared with the engine callbacks
  std::vector<std::unique_ptr<ChoiceDecoder>> decoders_;
  std::vector<engine::RequestId> ids_;
  std::vector<bool> engine_done_;  // the engine delivered the final output
  std::vector<int64_t> cached_;    // per choice: the engine's num_cached_tokens
  Clock::time_point start_;
  Clock::time_point first_token_{};
  Clock::time_point last_token_{};
  std::vector<double> itl_s_;
};

}  // namespace dsv4::server
