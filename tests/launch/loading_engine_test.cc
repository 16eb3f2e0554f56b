#include "launch/loading_engine.h"

#include <gtest/gtest.h>

namespace dsv4::launch {
namespace {

// An engine that answers every request at once with one token.
class OneTokenEngine : public engine::AsyncEngine {
 public:
  Result<engine::RequestId> Submit(engine::GenerationRequest request,
                                   OutputCallback on_output) override {
    ++submitted;
    if (fail) return Status(StatusCode::kInternal, "broken");
    engine::GenerationOutput out;
    out.id = 7;
    out.new_tokens = {request.prompt.front()};
    out.finish = engine::FinishReason::kLength;
    on_output(out);
    return engine::RequestId{7};
  }
  void Abort(engine::RequestId) override { ++aborted; }
  engine::EngineStats Stats() const override {
    engine::EngineStats s;
    s.num_running = 3;
    return s;
  }
  bool Ready() const override { return true; }
  void Shutdown() override { shut = true; }

  int submitted = 0;
  int aborted = 0;
  bool shut = false;
  bool fail = false;
};

TEST(LoadingEngine, RefusesUntilAttachedThenForwards) {
  LoadingEngine loading;
  EXPECT_FALSE(loading.Ready());
  const auto ignore = [](const engine::GenerationOutput&) {};
  engine::GenerationRequest r;
  r.prompt = {5};
  Result<engine::RequestId> id = loading.Submit(r, ignore);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(id.status().message().find("loading"), std::string::npos);
  EXPECT_EQ(loading.Stats().num_running, 0);
  loading.Abort(1);  // nothing to forward to: ignored
  OneTokenEngine inner;
  loading.Attach(&inner);
  EXPECT_TRUE(loading.Ready());
  id = loading.Submit(r, ignore);
  ASSERT_TRUE(id.ok()) << id.status().message();
  EXPECT_EQ(*id, 7);
  EXPECT_EQ(loading.Stats().num_running, 3);
  loading.Abort(7);
  loading.Shutdown();
  EXPECT_EQ(inner.submitted, 1);
  EXPECT_EQ(inner.aborted, 1);
  EXPECT_TRUE(inner.shut);
}

TEST(LoadingEngine, WarmUpRunsOneTokenAndReportsFailures) {
  OneTokenEngine inner;
  const Result<double> seconds = WarmUp(inner, 42);
  ASSERT_TRUE(seconds.ok()) << seconds.status().message();
  EXPECT_GE(*seconds, 0.0);
  EXPECT_EQ(inner.submitted, 1);
  inner.fail = true;
  const Result<double> failed = WarmUp(inner, 42);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("broken"), std::string::npos);
}

}  // namespace
}  // namespace dsv4::launch
