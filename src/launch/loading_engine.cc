#include "launch/loading_engine.h"

#include <chrono>
#include <future>
#include <memory>

namespace dsv4::launch {

Result<engine::RequestId> LoadingEngine::Submit(engine::GenerationRequest request,
                                                OutputCallback on_output) {
  engine::AsyncEngine* e = Get();
  if (e == nullptr) return Status(StatusCode::kUnavailable, "the model is loading; retry later");
  return e->Submit(std::move(request), std::move(on_output));
}

void LoadingEngine::Abort(engine::RequestId id) {
  if (engine::AsyncEngine* e = Get()) e->Abort(id);
}

engine::EngineStats LoadingEngine::Stats() const {
  engine::AsyncEngine* e = Get();
  return e == nullptr ? engine::EngineStats{} : e->Stats();
}

bool LoadingEngine::Ready() const {
  engine::AsyncEngine* e = Get();
  return e != nullptr && e->Ready();
}

void LoadingEngine::Shutdown() {
  if (engine::AsyncEngine* e = Get()) e->Shutdown();
}

Result<double> WarmUp(engine::AsyncEngine& engine, int32_t token_id) {
  const auto start = std::chrono::steady_clock::now();
  engine::GenerationRequest request;
  request.prompt = {token_id};
  request.max_tokens = 1;
  request.max_draft_tokens = 0;
  request.sampling.ignore_eos = true;
  // The callback runs on the engine thread; the promise is shared so a late
  // output after a failed Submit can never touch a dead stack frame.
  auto done = std::make_shared<std::promise<Status>>();
  std::future<Status> finished = done->get_future();
  DSV4_ASSIGN_OR_RETURN(
      engine::RequestId id,
      engine.Submit(std::move(request), [done](const engine::GenerationOutput& o) {
        if (o.finish == engine::FinishReason::kNone) return;
        done->set_value(o.finish == engine::FinishReason::kError ? o.error : Status::Ok());
      }));
  (void)id;
  DSV4_RETURN_IF_ERROR(finished.get().WithPrefix("warm-up forward"));
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace dsv4::launch
