// The full sampler: penalties, temperature, min_p / top_k / top_p, seeded
// per-request streams, raw logprobs and speculative verification by
// rejection sampling (Leviathan et al. 2023; Chen et al. 2023).
//
// Random draws (sampler_rng.h) for the token at output index i:
//   Uniform(i, kSample)  plain sampling, the correction after a rejection,
//                        the bonus token after the last accepted draft, and
//                        the target's own draw against a deterministic draft;
//   Uniform(i, kAccept)  the accept test of the draft at index i;
//   Uniform(i, kDraft)   the proposer's draw of that draft (draft_sampling.h).
// Every committed token is a function of the draws at indices <= its own,
// so a draw at index i is still fresh when a rejection before i discards the
// draft that used it and the next step proposes index i again.
#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/logging.h"
#include "sampling/sampler_rng.h"
#include "sampling/token_distribution.h"

namespace dsv4::sampling {

namespace {

void LogNonFinite(const TokenDistribution& dist, const TokenHistory& history) {
  if (dist.num_nonfinite() > 0) {
    DSV4_LOG_ERROR("sampler: {} non-finite logits at output index {} (excluded)",
                   dist.num_nonfinite(), history.output.size());
  }
}

// One draft position of a sampled request.
//
// Probabilistic drafts (q given): rejection sampling.  Accept `draft` with
// probability min(1, p(draft) / q(draft)), else draw from norm(max(0, p - q)).
// Summed over the draft's own law q, P(token = y) = min(p(y), q(y)) +
// (1 - Σ min(p, q)) * max(0, p(y) - q(y)) / Σ max(0, p - q) = p(y).
//
// Deterministic drafts (q == nullptr, a point mass on the draft): draw y from
// p with the very draw plain sampling uses at this index and accept iff
// y == draft.  That is rejection sampling for a point mass (accepted with
// probability p(draft); on rejection y ~ p restricted to y != draft, which
// is norm(max(0, p - q))), and the committed token is bit-identical to
// plain sampling: a seeded request's output does not change with MTP.
int32_t VerifyDraft(TokenDistribution& dist, std::vector<double>& residual, const float* row,
                    int32_t draft, const float* q, const engine::SamplingParams& params,
                    const TokenHistory& history, const PhiloxRng& rng, bool* accepted) {
  *accepted = false;
  dist.Compute(row, params, history);
  LogNonFinite(dist, history);
  if (dist.argmax() < 0) return 0;
  DSV4_CHECK(draft >= 0 && draft < dist.vocab());
  const int64_t index = static_cast<int64_t>(history.output.size());
  const double u = rng.Uniform(index, RngPurpose::kSample);
  if (q == nullptr) {
    const int32_t token = dist.Draw(u);
    *accepted = token == draft;
    return token;
  }
  const std::span<const double> p = dist.probs();
  const double qx = static_cast<double>(q[draft]);
  // u' < p / q without the division (q may be 0 for a malformed proposal:
  // then the draft is never accepted).
  if (qx > 0 && rng.Uniform(index, RngPurpose::kAccept) * qx < p[size_t(draft)]) {
    *accepted = true;
    return draft;
  }
  residual.resize(p.size());
  for (size_t v = 0; v < p.size(); ++v) residual[v] = std::max(0.0, p[v] - double(q[v]));
  const int32_t token = TokenDistribution::DrawFrom(residual, u);
  // An all-zero residual means p == q (to rounding), where a rejection has
  // probability 0; drawing from p keeps the output law right regardless.
  return token >= 0 ? token : dist.Draw(u);
}

}  // namespace

struct Sampler::Scratch {
  explicit Scratch(int64_t vocab) : dist(vocab) {}
  TokenDistribution dist;
  std::vector<int32_t> output;   // history.output + accepted drafts
  std::vector<double> residual;  // [vocab] max(0, p - q)
};

Sampler::Sampler(int64_t vocab) : vocab_(vocab), scratch_(std::make_unique<Scratch>(vocab)) {}
Sampler::~Sampler() = default;

int32_t Sampler::Sample(const float* logits, const engine::SamplingParams& params,
                        const SamplerState& state, const TokenHistory& history,
                        engine::TokenLogprob* logprob) {
  TokenDistribution& dist = scratch_->dist;
  dist.Compute(logits, params, history);
  LogNonFinite(dist, history);
  int32_t token = dist.argmax();
  if (!params.greedy() && token >= 0) {
    const PhiloxRng rng(state.seed);
    token =
        dist.Draw(rng.Uniform(static_cast<int64_t>(history.output.size()), RngPurpose::kSample));
  }
  // No finite logit at all: a broken model output; token 0 keeps the request
  // well-formed and the error log above says why.
  if (token < 0) token = 0;
  if (logprob != nullptr && params.logprobs >= 0) {
    *logprob = RawLogprobs(logits, vocab_, token, params.logprobs);
  }
  return token;
}

VerifyResult Sampler::Verify(const float* target_logits, std::span<const int32_t> drafts,
                             const float* draft_probs, const engine::SamplingParams& params,
                             const SamplerState& state, const TokenHistory& history,
                             std::vector<engine::TokenLogprob>* logprobs) {
  Scratch& s = *scratch_;
  s.output.assign(history.output.begin(), history.output.end());
  const PhiloxRng rng(state.seed);
  const bool want_logprobs = logprobs != nullptr && params.logprobs >= 0;
  VerifyResult result;
  for (size_t j = 0; j <= drafts.size(); ++j) {
    const float* row = target_logits + static_cast<int64_t>(j) * vocab_;
    const TokenHistory row_history{history.prompt, s.output};
    bool accepted = false;
    int32_t token = -1;
    if (j == drafts.size()) {
      token = Sample(row, params, state, row_history, nullptr);  // the bonus token
    } else if (params.greedy()) {
      token = Sample(row, params, state, row_history, nullptr);
      accepted = token == drafts[j];
    } else {
      const float* q = draft_probs ? draft_probs + static_cast<int64_t>(j) * vocab_ : nullptr;
      token =
          VerifyDraft(s.dist, s.residual, row, drafts[j], q, params, row_history, rng, &accepted);
    }
    result.tokens.push_back(token);
    if (want_logprobs) logprobs->push_back(RawLogprobs(row, vocab_, token, params.logprobs));
    if (!accepted) break;
    ++result.num_accepted;
    s.output.push_back(token);
  }
  return result;
}

}  // namespace dsv4::sampling
