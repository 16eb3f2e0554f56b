// One logits row -> the distribution a token is drawn from (the full
// sampler's arithmetic; sampler.cc drives it, tests probe it directly).
//
// Processing order, as in vLLM v1 (docs/sampling.md §1):
//   0. logit_bias added to the raw logits (also for greedy requests), then
//      min_tokens: stop ids set to -inf while the output is shorter;
//   1. penalties on the biased logits (also for greedy requests):
//      repetition (tokens of prompt or output; z > 0 ? z / r : z * r), then
//      frequency (z -= f * count in output), then presence (z -= p if in output);
//   2. greedy: argmax (lowest id on ties), nothing else;
//   3. temperature (z / T), softmax with max subtraction;
//   4. min_p: drop tokens with prob < min_p * max prob;
//   5. top_k: keep the k most likely (ties broken by lower id);
//   6. top_p: keep the most likely tokens until their mass reaches p,
//      including the token that crosses it (ties broken by lower id);
//   7. renormalise over the kept tokens.
// All arithmetic after the FP32 logits is FP64 and every sum runs in
// ascending token id, so results depend on nothing but the inputs.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/request.h"
#include "engine/sampling_params.h"
#include "sampling/sampler.h"

namespace dsv4::sampling {

class TokenDistribution {
 public:
  explicit TokenDistribution(int64_t vocab);
  TokenDistribution(const TokenDistribution&) = delete;
  TokenDistribution& operator=(const TokenDistribution&) = delete;

  // Processes `logits` [vocab] for the next token after `history`.  For
  // greedy params only argmax() is meaningful afterwards.  Non-finite logits
  // (NaN, +inf) are excluded from the distribution and counted in
  // num_nonfinite(); -inf means probability 0.  REQUIRES: params valid
  // (ValidateSamplingParams), history ids in [0, vocab).
  void Compute(const float* logits, const engine::SamplingParams& params,
               const TokenHistory& history);

  int64_t vocab() const { return vocab_; }
  // Argmax of the penalised logits, lowest id on ties (-1 if no logit is finite).
  int32_t argmax() const { return argmax_; }
  int64_t num_nonfinite() const { return num_nonfinite_; }
  // Sampled params: final probabilities [vocab] (0 outside the kept set,
  // sum 1 up to rounding).  Empty when every logit was excluded.
  std::span<const double> probs() const { return probs_; }
  // Inverse CDF in ascending id order for u in [0, 1).
  int32_t Draw(double u) const { return DrawFrom(probs_, u); }

  // Inverse CDF of unnormalised non-negative weights [vocab] in ascending
  // id order (FP64 running sum); -1 if all weights are 0.
  static int32_t DrawFrom(std::span<const double> weights, double u);
  static int32_t DrawFrom(std::span<const float> weights, double u);

 private:
  void ApplyPenalties(const engine::SamplingParams& params, const TokenHistory& history);
  void ComputeArgmax();
  void Softmax(float temperature);
  void ApplyMinP(float min_p);
  void ZeroBelowBucket(int crossing);
  void ApplyTopK(int32_t top_k);
  void ApplyTopP(float top_p);
  void Normalize();

  int64_t vocab_;
  int32_t argmax_ = -1;
  int64_t num_nonfinite_ = 0;
  std::vector<double> z_;        // [vocab] penalised logits
  std::vector<double> probs_;    // [vocab] weights, then probabilities
  std::vector<int32_t> counts_;  // [vocab] output counts; all 0 between calls
  std::vector<uint8_t> seen_;    // [vocab] penalty marks; all 0 between calls
  // Kept (weight, id) pairs, scratch for top-k / top-p: contiguous pairs
  // sort ~2x faster than ids ranked through probs_.
  struct Ranked {
    double weight;
    int32_t id;
  };
  std::vector<Ranked> order_;
  std::vector<double> bucket_mass_;    // [weight buckets] scratch for top-p
  std::vector<int32_t> bucket_count_;  // [weight buckets] scratch for top-k
};

// The proposer's side of probabilistic drafting (what Sampler::Verify's
// draft_probs expects): processes draft logits [vocab] exactly like a target
// row (same params and history), writes the law q [vocab] in FP32 and draws
// the draft at output index history.output.size() from that very q with the
// request's RngPurpose::kDraft stream.  Greedy params: the argmax, q a point
// mass on it.  Drafting from q (not its argmax) is what lifts acceptance for
// sampled requests (vLLM PR #41044, V4-Flash at T = 1: 10% -> 49% accepted).
int32_t SampleDraft(TokenDistribution& dist, const float* draft_logits,
                    const engine::SamplingParams& params, const SamplerState& state,
                    const TokenHistory& history, float* q);

// The drafter's side of coupled drafting, what MTP uses for sampled
// requests: processes draft logits [vocab] exactly like a target row and
// returns the inverse CDF of that law at the very uniform plain sampling
// uses at output index history.output.size() (RngPurpose::kSample).  Verified
// as a deterministic draft (Sampler::Verify with draft_probs == nullptr), the
// committed token is always the target law's inverse CDF at that uniform, so
// a seeded request's output is bit-identical with and without speculation,
// while a draft law q close to the target law p is accepted with probability
// near their overlap (1 when q == p) instead of p(argmax q).  Greedy params
// (or no finite logit): the argmax (lowest id on ties; 0 if none).
int32_t CoupledDraft(TokenDistribution& dist, const float* draft_logits,
                     const engine::SamplingParams& params, const SamplerState& state,
                     const TokenHistory& history);

// Log-softmax of the raw logits (vLLM v1's default logprobs mode,
// "raw_logprobs": before penalties, temperature and truncation) for `token`
// plus the top `num_top` tokens (descending, lower id first on ties).
engine::TokenLogprob RawLogprobs(const float* logits, int64_t vocab, int32_t token,
                                 int32_t num_top);

}  // namespace dsv4::sampling
