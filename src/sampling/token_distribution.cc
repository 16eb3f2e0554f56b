#include "sampling/token_distribution.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "base/logging.h"
#include "sampling/sampler_rng.h"

namespace dsv4::sampling {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// NaN and +inf carry no usable ranking; excluding them (and counting them for
// the caller) beats letting one NaN poison every comparison.
bool IsUsable(float x) { return !std::isnan(x) && x != std::numeric_limits<float>::infinity(); }

// Top-p buckets: 64 per octave of weight over [2^-64, 1] (weights are
// relative to the max, so <= 1), plus bucket 0 for everything lighter.
constexpr int kTopPSubBits = 6;
constexpr uint64_t kTopPFirstKey = uint64_t{1023 - 64} << kTopPSubBits;  // 2^-64
constexpr int kNumTopPBuckets = (64 << kTopPSubBits) + 2;

int TopPBucket(double w) {
  uint64_t bits = 0;
  std::memcpy(&bits, &w, sizeof(bits));
  const uint64_t key = bits >> (52 - kTopPSubBits);
  return key < kTopPFirstKey ? 0 : static_cast<int>(key - kTopPFirstKey) + 1;
}

// Higher weight first, lower id on ties: the one deterministic order used by
// top-k, top-p and top-N logprobs.
template <typename R>
bool Above(const R& a, const R& b) {
  return a.weight > b.weight || (a.weight == b.weight && a.id < b.id);
}

}  // namespace

TokenDistribution::TokenDistribution(int64_t vocab)
    : vocab_(vocab),
      z_(static_cast<size_t>(vocab)),
      counts_(static_cast<size_t>(vocab), 0),
      seen_(static_cast<size_t>(vocab), 0) {
  order_.reserve(static_cast<size_t>(vocab));
}

void TokenDistribution::Compute(const float* logits, const engine::SamplingParams& params,
                                const TokenHistory& history) {
  num_nonfinite_ = 0;
  for (int64_t v = 0; v < vocab_; ++v) {
    if (IsUsable(logits[v])) {
      z_[size_t(v)] = logits[v];
    } else {
      z_[size_t(v)] = kNegInf;
      ++num_nonfinite_;
    }
  }
  // logit_bias first (OpenAI: added to the logits before sampling); a token
  // with no usable logit stays excluded whatever its bias.
  for (const auto& [token, bias] : params.logit_bias) {
    DSV4_CHECK(token >= 0 && token < vocab_);
    double& z = z_[size_t(token)];
    if (z != kNegInf) z += static_cast<double>(bias);
  }
  // min_tokens: stop tokens get probability 0 (greedy too) until enough
  // tokens are out, whatever their bias.
  if (params.SuppressesStops(static_cast<int64_t>(history.output.size()))) {
    for (int32_t token : params.min_tokens_stop_ids) {
      DSV4_CHECK(token >= 0 && token < vocab_);
      z_[size_t(token)] = kNegInf;
    }
  }
  ApplyPenalties(params, history);
  ComputeArgmax();
  probs_.clear();
  if (params.greedy() || argmax_ < 0) return;
  Softmax(params.temperature);
  if (params.min_p > 0) ApplyMinP(params.min_p);
  if (params.top_k > 0 && params.top_k < vocab_) ApplyTopK(params.top_k);
  if (params.top_p < 1.0f) ApplyTopP(params.top_p);
  Normalize();
}

void TokenDistribution::ApplyPenalties(const engine::SamplingParams& params,
                                       const TokenHistory& history) {
  const bool repetition = params.repetition_penalty != 1.0f;
  const bool additive = params.frequency_penalty != 0 || params.presence_penalty != 0;
  if (!repetition && !additive) return;
  for (int32_t t : history.output) {
    DSV4_CHECK(t >= 0 && t < vocab_);
    ++counts_[size_t(t)];
  }
  const double rep = params.repetition_penalty;
  const double freq = params.frequency_penalty;
  const double presence = params.presence_penalty;
  // Each distinct token is penalised once (seen_ marks it); the marks and
  // counts are cleared afterwards so the scratch stays all-zero.
  auto penalise = [&](int32_t t) {
    DSV4_CHECK(t >= 0 && t < vocab_);
    if (seen_[size_t(t)]) return;
    seen_[size_t(t)] = 1;
    double& z = z_[size_t(t)];
    if (repetition && z != kNegInf) z = z > 0 ? z / rep : z * rep;
    const int32_t count = counts_[size_t(t)];
    if (count > 0) z -= freq * count + presence;
  };
  if (repetition) {
    for (int32_t t : history.prompt) penalise(t);
  }
  for (int32_t t : history.output) penalise(t);
  if (repetition) {
    for (int32_t t : history.prompt) seen_[size_t(t)] = 0;
  }
  for (int32_t t : history.output) {
    seen_[size_t(t)] = 0;
    counts_[size_t(t)] = 0;
  }
}

void TokenDistribution::ComputeArgmax() {
  argmax_ = -1;
  double best = kNegInf;
  for (int64_t v = 0; v < vocab_; ++v) {
    if (z_[size_t(v)] > best) {
      best = z_[size_t(v)];
      argmax_ = static_cast<int32_t>(v);
    }
  }
}

void TokenDistribution::Softmax(float temperature) {
  // Max subtraction: the largest weight is exactly exp(0) = 1, so no
  // temperature however small overflows.
  const double inv_t = 1.0 / static_cast<double>(temperature);
  const double max_scaled = z_[size_t(argmax_)] * inv_t;
  probs_.resize(size_t(vocab_));
  for (int64_t v = 0; v < vocab_; ++v) {
    const double z = z_[size_t(v)];
    probs_[size_t(v)] = z == kNegInf ? 0.0 : std::exp(z * inv_t - max_scaled);
  }
}

void TokenDistribution::ApplyMinP(float min_p) {
  // Weights are relative to the max (which is 1), so p_v / p_max is the weight itself.
  const double threshold = static_cast<double>(min_p);
  for (double& w : probs_) {
    if (w < threshold) w = 0;
  }
}

// Drops every token of a bucket lighter than `crossing` and collects the
// tokens of `crossing` itself in order_ (what top-k and top-p then rank).
void TokenDistribution::ZeroBelowBucket(int crossing) {
  order_.clear();
  for (int64_t v = 0; v < vocab_; ++v) {
    const double w = probs_[size_t(v)];
    if (w <= 0) continue;
    const int b = TopPBucket(w);
    if (b < crossing) {
      probs_[size_t(v)] = 0;
    } else if (b == crossing) {
      order_.push_back({w, static_cast<int32_t>(v)});
    }
  }
}

void TokenDistribution::ApplyTopK(int32_t top_k) {
  // The bucket holding the k-th heaviest token by counts (see TopPBucket),
  // then a selection inside that bucket only.
  bucket_count_.assign(kNumTopPBuckets, 0);
  for (int64_t v = 0; v < vocab_; ++v) {
    const double w = probs_[size_t(v)];
    if (w > 0) ++bucket_count_[size_t(TopPBucket(w))];
  }
  int64_t remaining = top_k;
  int crossing = -1;
  for (int b = kNumTopPBuckets - 1; b >= 0; --b) {
    if (bucket_count_[size_t(b)] >= remaining) {
      crossing = b;
      break;
    }
    remaining -= bucket_count_[size_t(b)];
  }
  if (crossing < 0) return;  // k or fewer tokens are left
  ZeroBelowBucket(crossing);
  std::nth_element(order_.begin(), order_.begin() + remaining, order_.end(), Above<Ranked>);
  for (size_t i = size_t(remaining); i < order_.size(); ++i) probs_[size_t(order_[i].id)] = 0;
}

void TokenDistribution::ApplyTopP(float top_p) {
  // Bucket by the top bits of the weight's IEEE representation (monotonic
  // in the value for positive doubles), find the bucket where the mass
  // crosses p, and sort only that bucket: two linear passes instead of a
  // sort of up to 129k ids (~0.3 ms vs ~14 ms for a flat distribution).
  bucket_mass_.assign(kNumTopPBuckets, 0.0);
  double total = 0;
  for (int64_t v = 0; v < vocab_; ++v) {
    const double w = probs_[size_t(v)];
    if (w > 0) {
      bucket_mass_[size_t(TopPBucket(w))] += w;
      total += w;
    }
  }
  double need = static_cast<double>(top_p) * total;
  int crossing = 0;  // rounding left the mass just under p * total: bucket 0
  for (int b = kNumTopPBuckets - 1; b >= 0; --b) {
    if (bucket_mass_[size_t(b)] >= need) {
      crossing = b;
      break;
    }
    need -= bucket_mass_[size_t(b)];
  }
  ZeroBelowBucket(crossing);
  std::sort(order_.begin(), order_.end(), Above<Ranked>);
  size_t keep = order_.size();
  double mass = 0;
  for (size_t i = 0; i < order_.size(); ++i) {
    mass += order_[i].weight;
    if (mass >= need) {
      keep = i + 1;  // the crossing token stays (vLLM/HF semantics)
      break;
    }
  }
  for (size_t i = keep; i < order_.size(); ++i) probs_[size_t(order_[i].id)] = 0;
}

void TokenDistribution::Normalize() {
  double sum = 0;
  for (double w : probs_) sum += w;
  const double inv = 1.0 / sum;  // sum >= 1: the argmax keeps weight 1 through every filter
  for (double& w : probs_) w *= inv;
}

namespace {

template <typename T>
int32_t InverseCdf(std::span<const T> weights, double u) {
  double total = 0;
  for (T w : weights) total += static_cast<double>(w);
  const double target = u * total;
  double cum = 0;
  int32_t last = -1;
  for (size_t v = 0; v < weights.size(); ++v) {
    if (!(weights[v] > 0)) continue;
    cum += static_cast<double>(weights[v]);
    last = static_cast<int32_t>(v);
    if (cum > target) return last;
  }
  return last;  // u * total rounded up to total: the last positive weight
}

}  // namespace

int32_t TokenDistribution::DrawFrom(std::span<const double> weights, double u) {
  return InverseCdf(weights, u);
}

int32_t TokenDistribution::DrawFrom(std::span<const float> weights, double u) {
  return InverseCdf(weights, u);
}

int32_t SampleDraft(TokenDistribution& dist, const float* draft_logits,
                    const engine::SamplingParams& params, const SamplerState& state,
                    const TokenHistory& history, float* q) {
  dist.Compute(draft_logits, params, history);
  const int64_t vocab = dist.vocab();
  std::fill(q, q + vocab, 0.0f);
  const int32_t argmax = std::max(dist.argmax(), 0);
  if (params.greedy() || dist.probs().empty()) {
    q[argmax] = 1.0f;
    return argmax;
  }
  const std::span<const double> p = dist.probs();
  for (int64_t v = 0; v < vocab; ++v) q[v] = static_cast<float>(p[size_t(v)]);
  const PhiloxRng rng(state.seed);
  const double u = rng.Uniform(static_cast<int64_t>(history.output.size()), RngPurpose::kDraft);
  const int32_t token = TokenDistribution::DrawFrom(std::span<const float>(q, size_t(vocab)), u);
  return token >= 0 ? token : argmax;
}

int32_t CoupledDraft(TokenDistribution& dist, const float* draft_logits,
                     const engine::SamplingParams& params, const SamplerState& state,
                     const TokenHistory& history) {
  // A greedy draft with nothing that moves a logit (the usual MTP request):
  // the argmax of the raw logits, which is what Compute then argmax() gives
  // (non-finite and -inf logits excluded, lowest id on ties), without
  // Compute's vocabulary-sized FP64 copy.
  const bool moves_logits = !params.logit_bias.empty() || params.repetition_penalty != 1.0f ||
                            params.frequency_penalty != 0 || params.presence_penalty != 0 ||
                            params.SuppressesStops(static_cast<int64_t>(history.output.size()));
  if (params.greedy() && !moves_logits) {
    int32_t argmax = 0;
    float best = -std::numeric_limits<float>::infinity();
    for (int64_t v = 0; v < dist.vocab(); ++v) {
      const float x = draft_logits[v];
      if (IsUsable(x) && x > best) {
        best = x;
        argmax = static_cast<int32_t>(v);
      }
    }
    return argmax;
  }
  dist.Compute(draft_logits, params, history);
  const int32_t argmax = std::max(dist.argmax(), 0);
  if (params.greedy() || dist.probs().empty()) return argmax;
  const PhiloxRng rng(state.seed);
  const int32_t token =
      dist.Draw(rng.Uniform(static_cast<int64_t>(history.output.size()), RngPurpose::kSample));
  return token >= 0 ? token : argmax;
}

engine::TokenLogprob RawLogprobs(const float* logits, int64_t vocab, int32_t token,
                                 int32_t num_top) {
  // Non-finite logits (NaN, +inf) get logprob -inf, as in the distribution.
  auto usable = [logits](int64_t v) { return IsUsable(logits[v]); };
  double max = kNegInf;
  for (int64_t v = 0; v < vocab; ++v) {
    if (usable(v)) max = std::max(max, static_cast<double>(logits[v]));
  }
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    if (usable(v)) sum += std::exp(static_cast<double>(logits[v]) - max);
  }
  const double log_z = max + std::log(sum);
  auto logprob = [&](int64_t v) {
    return usable(v) ? static_cast<float>(static_cast<double>(logits[v]) - log_z)
                     : -std::numeric_limits<float>::infinity();
  };
  engine::TokenLogprob out;
  out.token = token;
  out.logprob = logprob(token);
  const int64_t k = std::min<int64_t>(num_top, vocab);
  if (k <= 0) return out;
  // Top k by a bounded heap: O(vocab log k), no vocabulary-sized scratch.
  using Entry = std::pair<int32_t, float>;
  auto better = [](const Entry& a, const Entry& b) {
    return a.second > b.second || (a.second == b.second && a.first < b.first);
  };
  std::vector<Entry>& heap = out.top;  // heap top = worst kept entry
  heap.reserve(size_t(k));
  for (int64_t v = 0; v < vocab; ++v) {
    Entry e{static_cast<int32_t>(v), logprob(v)};
    if (static_cast<int64_t>(heap.size()) < k) {
      heap.push_back(e);
      std::push_heap(heap.begin(), heap.end(), better);
    } else if (better(e, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), better);
      heap.back() = e;
      std::push_heap(heap.begin(), heap.end(), better);
    }
  }
  std::sort(heap.begin(), heap.end(), better);
  return out;
}

}  // namespace dsv4::sampling
