#include "engine/sampling_params.h"

#include <algorithm>
#include <cmath>

namespace dsv4::engine {

namespace {

bool Finite(float x) { return std::isfinite(x); }

}  // namespace

Status ValidateSamplingParams(const SamplingParams& p, int64_t vocab) {
  if (!Finite(p.temperature) || p.temperature < 0) {
    return InvalidArgument("temperature must be a finite number >= 0, got {}", p.temperature);
  }
  if (!Finite(p.top_p) || p.top_p <= 0 || p.top_p > 1) {
    return InvalidArgument("top_p must be in (0, 1], got {}", p.top_p);
  }
  if (p.top_k < 0) return InvalidArgument("top_k must be >= 0 (0 = off), got {}", p.top_k);
  if (!Finite(p.min_p) || p.min_p < 0 || p.min_p > 1) {
    return InvalidArgument("min_p must be in [0, 1], got {}", p.min_p);
  }
  if (!Finite(p.presence_penalty) || p.presence_penalty < -2 || p.presence_penalty > 2) {
    return InvalidArgument("presence_penalty must be in [-2, 2], got {}", p.presence_penalty);
  }
  if (!Finite(p.frequency_penalty) || p.frequency_penalty < -2 || p.frequency_penalty > 2) {
    return InvalidArgument("frequency_penalty must be in [-2, 2], got {}", p.frequency_penalty);
  }
  if (!Finite(p.repetition_penalty) || p.repetition_penalty <= 0) {
    return InvalidArgument("repetition_penalty must be a finite number > 0, got {}",
                           p.repetition_penalty);
  }
  std::vector<int32_t> biased;
  for (const auto& [token, bias] : p.logit_bias) {
    if (token < 0 || token >= vocab) {
      return InvalidArgument("logit_bias token id {} is outside the vocabulary [0, {})", token,
                             vocab);
    }
    if (!Finite(bias) || bias < -100 || bias > 100) {
      return InvalidArgument("logit_bias value for token {} must be in [-100, 100], got {}", token,
                             bias);
    }
    biased.push_back(token);
  }
  std::sort(biased.begin(), biased.end());
  if (std::adjacent_find(biased.begin(), biased.end()) != biased.end()) {
    return InvalidArgument("logit_bias names a token id twice");
  }
  if (p.logprobs < -1 || p.logprobs > kMaxLogprobs) {
    return InvalidArgument("logprobs must be in [0, {}], got {}", kMaxLogprobs, p.logprobs);
  }
  if (p.min_tokens < 0) return InvalidArgument("min_tokens must be >= 0, got {}", p.min_tokens);
  for (int32_t token : p.min_tokens_stop_ids) {
    if (token < 0 || token >= vocab) {
      return InvalidArgument("stop token id {} is outside the vocabulary [0, {})", token, vocab);
    }
  }
  return Status::Ok();
}

}  // namespace dsv4::engine
