// `dsv4 serve` binds its port before the model loads (docs/deploy.md
// "Ready means ready"): the HTTP server starts over a LoadingEngine, which
// is not Ready() and refuses requests (Unavailable) until Attach hands it the
// loaded and warmed-up engine; from then on every call forwards to it.
#pragma once

#include <atomic>

#include "base/status.h"
#include "engine/async_engine.h"

namespace dsv4::launch {

class LoadingEngine : public engine::AsyncEngine {
 public:
  // REQUIRES: `engine` outlives this object; called at most once.
  void Attach(engine::AsyncEngine* engine) { engine_.store(engine, std::memory_order_release); }

  Result<engine::RequestId> Submit(engine::GenerationRequest request,
                                   OutputCallback on_output) override;
  void Abort(engine::RequestId id) override;
  engine::EngineStats Stats() const override;
  bool Ready() const override;
  void Shutdown() override;

 private:
  engine::AsyncEngine* Get() const { return engine_.load(std::memory_order_acquire); }
  std::atomic<engine::AsyncEngine*> engine_{nullptr};
};

// One forward before the server says ready: a one-token prompt generating one
// token (greedy), so the first client request does not pay for first-touch
// page faults of the weights and the caches.  Returns the seconds it took;
// the request's error if it failed.
Result<double> WarmUp(engine::AsyncEngine& engine, int32_t token_id);

}  // namespace dsv4::launch
