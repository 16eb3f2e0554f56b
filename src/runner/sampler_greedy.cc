// The argmax-only Sampler: greedy decoding, greedy verification and
// logprobs, no random sampling and no penalties (Validate rejects them with
// Unimplemented).  Linked until the full sampler (sampler.cc) replaces it.
#include <algorithm>
#include <cmath>

#include "runner/sampler.h"

namespace dsv4 {

struct Sampler::Scratch {};

namespace {

// Lowest id on ties, so results never depend on a reduction order.
int32_t Argmax(const float* row, int64_t vocab) {
  int64_t best = 0;
  for (int64_t v = 1; v < vocab; ++v) {
    if (row[v] > row[best]) best = v;
  }
  return static_cast<int32_t>(best);
}

// log_softmax of the chosen token plus the top-n alternatives.  FP64 sum so
// the normaliser does not depend on vocabulary order beyond rounding.
TokenLogprob Logprobs(const float* row, int64_t vocab, int32_t token, int32_t n) {
  const float max = row[Argmax(row, vocab)];
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v] - max));
  const float log_z = max + static_cast<float>(std::log(sum));
  TokenLogprob out;
  out.token = token;
  out.logprob = row[token] - log_z;
  if (n > 0) {
    std::vector<int32_t> ids(static_cast<size_t>(vocab));
    for (int64_t v = 0; v < vocab; ++v) ids[size_t(v)] = static_cast<int32_t>(v);
    const int64_t k = std::min<int64_t>(n, vocab);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [row](int32_t a, int32_t b) {
      return row[a] > row[b] || (row[a] == row[b] && a < b);
    });
    for (int64_t i = 0; i < k; ++i) out.top.emplace_back(ids[size_t(i)], row[ids[size_t(i)]] - log_z);
  }
  return out;
}

}  // namespace

Sampler::Sampler(int64_t vocab) : vocab_(vocab), scratch_(std::make_unique<Scratch>()) {}
Sampler::~Sampler() = default;

Status Sampler::Validate(const SamplingParams& p) const {
  if (p.temperature < 0) return InvalidArgument("temperature {} < 0", p.temperature);
  if (!p.greedy() || p.presence_penalty != 0 || p.frequency_penalty != 0 ||
      p.repetition_penalty != 1.0f) {
    return InvalidArgument(
        "this build samples greedily only (temperature 0, no penalties): temperature {}",
        p.temperature);
  }
  if (p.logprobs > 20) return InvalidArgument("logprobs {} > 20", p.logprobs);
  return Status::Ok();
}

int32_t Sampler::Sample(const float* logits, const SamplingParams& params,
                        const SamplerState& /*state*/, const TokenHistory& /*history*/,
                        TokenLogprob* logprob) {
  const int32_t token = Argmax(logits, vocab_);
  if (logprob != nullptr && params.logprobs >= 0) {
    *logprob = Logprobs(logits, vocab_, token, params.logprobs);
  }
  return token;
}

VerifyResult Sampler::Verify(const float* target_logits, std::span<const int32_t> drafts,
                             const float* /*draft_probs*/, const SamplingParams& params,
                             const SamplerState& state, const TokenHistory& history,
                             std::vector<TokenLogprob>* logprobs) {
  VerifyResult r;
  for (size_t j = 0; j <= drafts.size(); ++j) {
    const float* row = target_logits + static_cast<int64_t>(j) * vocab_;
    TokenLogprob lp;
    const int32_t token = Sample(row, params, state, history, logprobs ? &lp : nullptr);
    r.tokens.push_back(token);
    if (logprobs != nullptr && params.logprobs >= 0) logprobs->push_back(std::move(lp));
    if (j == drafts.size() || drafts[j] != token) break;
    ++r.num_accepted;
  }
  return r;
}

}  // namespace dsv4
