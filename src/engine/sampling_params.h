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
  // vLLM's min_tokens: while fewer than min_tokens tokens are output, the
  // sampler masks every id in min_tokens_stop_ids (logit -inf), so no stop
  // token (EOS included) can end the request early.  LocalEngine::Submit
  // fills the ids from the request's stop_token_ids (EOS added); callers set
  // only min_tokens.  Must not exceed the request's max_tokens.
  int32_t min_tokens = 0;
  std::vector<int32_t> min_tokens_stop_ids;

  bool greedy() const { return temperature <= 0.0f; }
  // Stop ids are masked for output index `index` (0-based).
  bool SuppressesStops(int64_t index) const {
    return index < min_tokens && !min_tokens_stop_ids.empty();
  }
};

// OpenAI's and vLLM's cap on top logprobs per token.
inline constexpr int32_t kMaxLogprobs = 20;

// InvalidArgument (naming the field) for parameters out of range:
// temperature < 0, top_p not in (0, 1], top_k < 0, min_p not in [0, 1],
// penalties outside their OpenAI ranges, repetition_penalty <= 0, logit_bias
// ids outside [0, vocab) or named twice or values outside [-100, 100],
// logprobs outside [-1, kMaxLogprobs], min_tokens < 0, min_tokens_stop_ids
// outside [0, vocab).  The engine calls it at submission;
// the sampler REQUIRES valid params.
Status ValidateSamplingParams(const SamplingParams& params, int64_t vocab);

}  // namespace dsv4::engine
