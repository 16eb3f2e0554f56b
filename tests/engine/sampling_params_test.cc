// ValidateSamplingParams: the ranges a request's sampling parameters must
// lie in, checked at submission (an out-of-range value is a 400, never a
// sampler precondition failure).
#include "engine/sampling_params.h"

#include <gtest/gtest.h>

#include <cmath>

namespace dsv4::testing {
namespace {

TEST(SamplingParamsTest, ValidateRejectsOutOfRangeParams) {
  EXPECT_TRUE(engine::ValidateSamplingParams(engine::SamplingParams{}, 10).ok());
  auto bad = [&](auto mutate) {
    engine::SamplingParams p;
    mutate(p);
    return engine::ValidateSamplingParams(p, 10).code() == StatusCode::kInvalidArgument;
  };
  EXPECT_TRUE(bad([](engine::SamplingParams& p) { p.temperature = -0.1f; }));
  EXPECT_TRUE(bad([](engine::SamplingParams& p) { p.temperature = NAN; }));
  EXPECT_TRUE(bad([](engine::SamplingParams& p) { p.top_p = 0; }));
  EXPECT_TRUE(bad([](engine::SamplingParams& p) { p.top_p = 1.01f; }));
  EXPECT_TRUE(bad([](engine::SamplingParams& p) { p.top_k = -1; }));
  EXPECT_TRUE(bad([](engine::SamplingParams& p) { p.min_p = 1.5f; }));
  EXPECT_TRUE(bad([](engine::SamplingParams& p) { p.presence_penalty = 2.5f; }));
  EXPECT_TRUE(bad([](engine::SamplingParams& p) { p.frequency_penalty = -3.0f; }));
  EXPECT_TRUE(bad([](engine::SamplingParams& p) { p.repetition_penalty = 0; }));
  EXPECT_TRUE(bad([](engine::SamplingParams& p) { p.logprobs = 21; }));
  EXPECT_TRUE(bad([](engine::SamplingParams& p) { p.logprobs = -2; }));
  EXPECT_TRUE(bad([](engine::SamplingParams& p) { p.min_tokens = -1; }));
  EXPECT_TRUE(bad([](engine::SamplingParams& p) {
    p.min_tokens = 2;
    p.min_tokens_stop_ids = {10};  // outside the vocabulary
  }));
  EXPECT_TRUE(bad([](engine::SamplingParams& p) { p.logit_bias = {{10, 1.0f}}; }));  // vocab 10
  EXPECT_TRUE(bad([](engine::SamplingParams& p) { p.logit_bias = {{-1, 1.0f}}; }));
  EXPECT_TRUE(bad([](engine::SamplingParams& p) { p.logit_bias = {{3, 100.5f}}; }));
  EXPECT_TRUE(bad([](engine::SamplingParams& p) { p.logit_bias = {{3, NAN}}; }));
  EXPECT_TRUE(bad([](engine::SamplingParams& p) { p.logit_bias = {{3, 1.0f}, {3, 2.0f}}; }));
  EXPECT_FALSE(bad([](engine::SamplingParams& p) { p.logit_bias = {{9, -100.0f}, {0, 100.0f}}; }));
  engine::SamplingParams ok;
  ok.temperature = 1.0f;
  ok.top_p = 0.5f;
  ok.top_k = 40;
  ok.min_p = 0.1f;
  ok.repetition_penalty = 1.1f;
  ok.logprobs = 20;
  EXPECT_TRUE(engine::ValidateSamplingParams(ok, 10).ok());
}

}  // namespace
}  // namespace dsv4::testing
