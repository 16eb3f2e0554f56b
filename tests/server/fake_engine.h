// A deterministic AsyncEngine for server tests: one engine thread, one token
// per running request per step, token i of a request a pure function of its
// prompt and i (so concurrent outputs equal sequential ones), a bounded
// running set and waiting queue, and a "page" count per running request so
// tests can check the pool is full again afterwards.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "engine/async_engine.h"

namespace dsv4::server::testing {

struct FakeEngineOptions {
  int64_t max_running = 8;
  int64_t max_waiting = 64;
  int32_t vocab_lo = 3;     // ids produced are in [vocab_lo, vocab_hi)
  int32_t vocab_hi = 4000;  // (no special tokens: the tiny tokenizer's start at 4070)
  int32_t eos_id = 1;
  std::chrono::microseconds step_time{500};
  int64_t max_model_len = 4096;
  // > 0: a prefix-cache model — a request's cached tokens are its longest
  // common prefix with an earlier admitted prompt, in whole pages of this
  // many tokens, at most its prompt - 1 (reported in every output and in
  // the prefix-cache counters).
  int64_t prefix_page = 0;
};

class FakeEngine : public engine::AsyncEngine {
 public:
  explicit FakeEngine(FakeEngineOptions options = {});
  ~FakeEngine() override;

  Result<engine::RequestId> Submit(engine::GenerationRequest request,
                                   OutputCallback on_output) override;
  void Abort(engine::RequestId id) override;
  engine::EngineStats Stats() const override;
  bool Ready() const override { return ready_.load(); }
  void Shutdown() override;

  void set_ready(bool ready) { ready_ = ready; }
  // Pauses stepping (requests queue up) until resumed.
  void set_paused(bool paused);
  int64_t num_aborted() const { return num_aborted_.load(); }
  // The id the fake produces at output position i for `prompt`.
  static int32_t TokenAt(const std::vector<int32_t>& prompt, int64_t i, const FakeEngineOptions& o);

 private:
  struct Live {
    engine::GenerationRequest request;
    OutputCallback on_output;
    int64_t produced = 0;
    bool abort = false;
    int64_t cached = 0;
  };
  void Loop();
  void Step(std::vector<std::pair<OutputCallback, engine::GenerationOutput>>* outputs);

  FakeEngineOptions opt_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<engine::RequestId, Live> running_;
  std::deque<std::pair<engine::RequestId, Live>> waiting_;
  engine::RequestId next_id_ = 1;
  bool stop_ = false;
  bool paused_ = false;
  int64_t prompt_total_ = 0, gen_total_ = 0;
  int64_t prefix_queries_ = 0, prefix_hits_ = 0;
  std::vector<std::vector<int32_t>> seen_prompts_;  // prefix_page > 0
  std::atomic<bool> ready_{true};
  std::atomic<int64_t> num_aborted_{0};
  std::thread thread_;
};

}  // namespace dsv4::server::testing
