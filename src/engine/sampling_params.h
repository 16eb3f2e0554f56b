// Per-request sampling and stopping parameters, as the engine sees them
// (token ids only: stop strings are matched on the text side, which aborts
// the request when one appears).
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "base/status.h"

namespace dsv4::engine {

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy (argmax, lowest id on ties)
  float top_p = 1.0f;  // keep the smallest prefix whose mass reaches p (incl. the crossing token)
  int32_t top_k = 0;   // 0 = off
  float min_p = 0.0f;  // drop tokens with p < min_p * p_max; 0 = off
  std::optional<uint64_t> seed;  // per-request stream: same seed, same output, whatever the batch
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;  // 1 = off
  int32_t logprobs = -1;  // top-N logprobs per output token; -1 = none, 0 = sampled token only
  // OpenAI logit_bias: (token id, value added to its logit) with distinct ids,
  // applied to the raw logits before penalties, for greedy and sampled rows.
  std::vector<std::pair<int32_t, float>> logit_bias;
  bool ignore_eos = false;

  bool greedy() const { return temperature <= 0.0f; }
};

// OpenAI's and vLLM's cap on top logprobs per token.
inline constexpr int32_t kMaxLogprobs = 20;

// InvalidArgument (naming the field) for parameters out of range:
// temperature < 0, top_p not in (0, 1], top_k < 0, min_p not in [0, 1],
// penalties outside their OpenAI ranges, repetition_penalty <= 0, logit_bias
// ids outside [0, vocab) or named twice or values outside [-100, 100],
// logprobs outside [-1, kMaxLogprobs].  The engine calls it at submission;
// the sampler REQUIRES valid params.
Status ValidateSamplingParams(const SamplingParams& params, int64_t vocab);

}  // namespace dsv4::engine
