// The full sampler on known distributions: each parameter's effect, the
// processing order, penalties, raw logprobs, seeded streams.
#include "sampling/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <vector>

#include "sampling/sampler_rng.h"
#include "sampling/token_distribution.h"

namespace dsv4::testing {
namespace {

// Logits whose softmax is exactly proportional to `probs`.
std::vector<float> LogitsOf(const std::vector<double>& probs) {
  std::vector<float> out;
  for (double p : probs) out.push_back(static_cast<float>(std::log(p)));
  return out;
}

// Softmax of FP32 logits / t in FP64, for expectations.
std::vector<double> SoftmaxOf(const std::vector<float>& logits, double t = 1.0) {
  double max = -INFINITY;
  for (float x : logits) max = std::max(max, x / t);
  std::vector<double> p;
  double sum = 0;
  for (float x : logits) {
    p.push_back(std::exp(x / t - max));
    sum += p.back();
  }
  for (double& x : p) x /= sum;
  return p;
}

std::vector<double> Probs(const std::vector<float>& logits, const engine::SamplingParams& params,
                          const sampling::TokenHistory& history = {}) {
  sampling::TokenDistribution dist(static_cast<int64_t>(logits.size()));
  dist.Compute(logits.data(), params, history);
  return {dist.probs().begin(), dist.probs().end()};
}

engine::SamplingParams Sampled(float temperature = 1.0f) {
  engine::SamplingParams p;
  p.temperature = temperature;
  return p;
}

// 2e-7: LogitsOf rounds log(p) to FP32 (relative error 6e-8 per logit);
// every filter mistake moves a probability by far more.
void ExpectProbs(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-7) << "token " << i;
}

TEST(PhiloxTest, KnownAnswers) {
  // Random123's published Philox4x32-10 vectors.
  EXPECT_EQ(sampling::PhiloxRng::Block({0, 0, 0, 0}, {0, 0}),
            (std::array<uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(sampling::PhiloxRng::Block({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                                       {0xffffffffu, 0xffffffffu}),
            (std::array<uint32_t, 4>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(sampling::PhiloxRng::Block({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                                       {0xa4093822u, 0x299f31d0u}),
            (std::array<uint32_t, 4>{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(PhiloxTest, UniformIsInRangeAndDistinctPerPurpose) {
  const sampling::PhiloxRng rng(42);
  double sum = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const double u = rng.Uniform(i, sampling::RngPurpose::kSample);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.005);  // 5.5 sigma
  EXPECT_NE(rng.Uniform(3, sampling::RngPurpose::kSample),
            rng.Uniform(3, sampling::RngPurpose::kAccept));
  EXPECT_NE(rng.Uniform(3, sampling::RngPurpose::kSample),
            sampling::PhiloxRng(43).Uniform(3, sampling::RngPurpose::kSample));
  EXPECT_NE(sampling::DeriveRequestSeed(1, 5), sampling::DeriveRequestSeed(1, 6));
}

TEST(SamplerTest, GreedyIsArgmaxWithLowestIdOnTies) {
  sampling::Sampler sampler(5);
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
  engine::SamplingParams greedy;
  greedy.seed = 9;  // irrelevant for greedy
  for (int64_t i = 0; i < 5; ++i) {
    std::vector<int32_t> out(static_cast<size_t>(i), 4);
    EXPECT_EQ(sampler.Sample(logits.data(), greedy, sampling::SamplerState{uint64_t(i)}, {{}, out},
                             nullptr),
              1);
  }
}

TEST(SamplerTest, TemperatureScalesLogits) {
  const std::vector<float> logits = LogitsOf({0.1, 0.2, 0.3, 0.4});
  ExpectProbs(Probs(logits, Sampled(1.0f)), SoftmaxOf(logits));
  ExpectProbs(Probs(logits, Sampled(2.0f)), SoftmaxOf(logits, 2.0));
  ExpectProbs(Probs(logits, Sampled(0.5f)), SoftmaxOf(logits, 0.5));
  // Tiny temperature: no overflow, all mass on the argmax.
  ExpectProbs(Probs(logits, Sampled(1e-6f)), {0, 0, 0, 1});
}

TEST(SamplerTest, TopKKeepsTheKMostLikelyLowerIdOnTies) {
  const std::vector<float> logits = LogitsOf({0.1, 0.3, 0.2, 0.3, 0.1});
  engine::SamplingParams p = Sampled();
  p.top_k = 2;
  ExpectProbs(Probs(logits, p), {0, 0.5, 0, 0.5, 0});
  p.top_k = 3;
  ExpectProbs(Probs(logits, p), {0, 0.375, 0.25, 0.375, 0});
  p.top_k = 4;  // tie between 0 and 4: the lower id stays
  ExpectProbs(Probs(logits, p), {1.0 / 9, 3.0 / 9, 2.0 / 9, 3.0 / 9, 0});
  p.top_k = 5;
  ExpectProbs(Probs(logits, p), {0.1, 0.3, 0.2, 0.3, 0.1});
}

TEST(SamplerTest, TopPKeepsTheCrossingToken) {
  const std::vector<float> logits = LogitsOf({0.1, 0.4, 0.2, 0.3});
  engine::SamplingParams p = Sampled();
  p.top_p = 0.35f;  // 0.4 alone crosses
  ExpectProbs(Probs(logits, p), {0, 1, 0, 0});
  p.top_p = 0.5f;  // 0.4 + 0.3 crosses at the 0.3 token, which stays
  ExpectProbs(Probs(logits, p), {0, 4.0 / 7, 0, 3.0 / 7});
  p.top_p = 0.75f;
  ExpectProbs(Probs(logits, p), {0, 4.0 / 9, 2.0 / 9, 3.0 / 9});
  p.top_p = 0.95f;
  ExpectProbs(Probs(logits, p), {0.1, 0.4, 0.2, 0.3});
}

TEST(SamplerTest, TopPOverAVocabularyLargerThanTheFirstCut) {
  // 2000 equally likely tokens plus one heavy one: top_p needs ~1800 tokens,
  // more than the first partial sort covers.
  std::vector<double> probs(2001, 1.0);
  probs[1000] = 100.0;
  const std::vector<float> logits = LogitsOf(probs);
  engine::SamplingParams p = Sampled();
  p.top_p = 0.9f;
  const std::vector<double> got = Probs(logits, p);
  int kept = 0;
  for (size_t v = 0; v < got.size(); ++v) kept += got[v] > 0;
  // total 2100, target 1890: the heavy token (100) and then 1790 unit tokens.
  EXPECT_EQ(kept, 1791);
  EXPECT_GT(got[1000], 0);
  EXPECT_GT(got[0], 0);  // ties broken by lower id: ids 0..1790 (minus 1000) stay
  EXPECT_EQ(got[1791], 0);
  EXPECT_GT(got[1790], 0);
}

// Kept set of top_k / top_p by a full sort (the definition), over the same
// weights the sampler computes: 1 kept, 0 dropped, -1 either (a kept weight
// under 1e-300 may flush to probability 0 when normalised).
std::vector<int> ReferenceKept(const std::vector<float>& logits, double t, int32_t top_k,
                               double top_p) {
  const size_t n = logits.size();
  double max = -INFINITY;
  for (float x : logits) max = std::max(max, double(x));
  const double inv_t = 1.0 / t;
  std::vector<double> w(n);
  for (size_t v = 0; v < n; ++v) w[v] = std::exp(double(logits[v]) * inv_t - max * inv_t);
  std::vector<int32_t> ids(n);
  for (size_t v = 0; v < n; ++v) ids[v] = int32_t(v);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return w[size_t(a)] > w[size_t(b)] || (w[size_t(a)] == w[size_t(b)] && a < b);
  });
  size_t keep = top_k > 0 ? std::min(n, size_t(top_k)) : n;
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += w[size_t(ids[i])];
  double mass = 0;
  for (size_t i = 0; i < keep && top_p < 1; ++i) {  // top_p = 1 is off
    mass += w[size_t(ids[i])];
    if (mass >= top_p * total) {
      keep = i + 1;
      break;
    }
  }
  std::vector<int> kept(n, 0);
  for (size_t i = 0; i < keep; ++i) kept[size_t(ids[i])] = w[size_t(ids[i])] < 1e-300 ? -1 : 1;
  return kept;
}

TEST(SamplerTest, TopKAndTopPMatchAFullSort) {
  // Wide logits put many weights below 2^-64 (the lightest bucket) at low T.
  const int64_t vocab = 20000;
  std::vector<float> logits(static_cast<size_t>(vocab));
  uint64_t x = 7;
  for (float& l : logits) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    l = float(double(x >> 11) * 0x1.0p-53 * 60.0 - 30.0);
  }
  for (float t : {0.05f, 0.7f, 1.0f, 3.0f}) {
    for (int32_t k : {0, 1, 40, 5000}) {
      for (float p : {0.3f, 0.9f, 0.99f, 1.0f}) {
        engine::SamplingParams params = Sampled(t);
        params.top_k = k;
        params.top_p = p;
        const std::vector<double> got = Probs(logits, params);
        const std::vector<int> want = ReferenceKept(logits, t, k, p);
        int64_t mismatches = 0;
        for (int64_t v = 0; v < vocab; ++v) {
          if (want[size_t(v)] >= 0) mismatches += (got[size_t(v)] > 0) != (want[size_t(v)] == 1);
        }
        EXPECT_EQ(mismatches, 0) << "T " << t << " top_k " << k << " top_p " << p;
      }
    }
  }
}

TEST(SamplerTest, MinPDropsTokensBelowAFractionOfTheMax) {
  const std::vector<float> logits = LogitsOf({0.05, 0.45, 0.15, 0.35});
  engine::SamplingParams p = Sampled();
  p.min_p = 0.3f;  // threshold 0.135: drops 0.05
  ExpectProbs(Probs(logits, p), {0, 0.45 / 0.95, 0.15 / 0.95, 0.35 / 0.95});
  p.min_p = 0.5f;  // threshold 0.225: keeps 0.45 and 0.35
  ExpectProbs(Probs(logits, p), {0, 0.45 / 0.8, 0, 0.35 / 0.8});
  p.min_p = 1.0f;  // only the max
  ExpectProbs(Probs(logits, p), {0, 1, 0, 0});
}

TEST(SamplerTest, FiltersApplyInOrderMinPTopKTopP) {
  const std::vector<float> logits = LogitsOf({0.3, 0.25, 0.2, 0.15, 0.1});
  engine::SamplingParams p = Sampled();
  p.min_p = 0.4f;  // threshold 0.12: drops 0.1
  p.top_k = 3;     // keeps 0.3, 0.25, 0.2 (sum 0.75)
  p.top_p = 0.7f;  // of the renormalised top 3: 0.4 + 0.333 crosses 0.7 -> two stay
  ExpectProbs(Probs(logits, p), {0.3 / 0.55, 0.25 / 0.55, 0, 0, 0});
  // Temperature comes first: at T = 100 the distribution is nearly uniform,
  // so min_p 0.4 drops nothing, top_k keeps 3 and top_p 0.7 needs all three.
  p.temperature = 100.0f;
  const std::vector<double> got = Probs(logits, p);
  EXPECT_GT(got[2], 0);
  EXPECT_EQ(got[3], 0);
}

TEST(SamplerTest, RepetitionPenaltyCoversPromptAndOutput) {
  const std::vector<float> logits = {2.0f, -1.0f, 1.0f, 0.5f};
  engine::SamplingParams p = Sampled();
  p.repetition_penalty = 2.0f;
  const std::vector<int32_t> prompt = {0, 0};
  const std::vector<int32_t> output = {1};
  // vLLM/HF: positive logits divided, negative multiplied.
  ExpectProbs(Probs(logits, p, {prompt, output}), SoftmaxOf({1.0f, -2.0f, 1.0f, 0.5f}));
  // Greedy requests are penalised too: 0 and 2 tie at 1.0, lowest id wins;
  // with a stronger penalty token 2 wins.
  sampling::Sampler sampler(4);
  engine::SamplingParams greedy;
  greedy.repetition_penalty = 2.0f;
  EXPECT_EQ(sampler.Sample(logits.data(), greedy, {}, {prompt, output}, nullptr), 0);
  greedy.repetition_penalty = 2.5f;
  EXPECT_EQ(sampler.Sample(logits.data(), greedy, {}, {prompt, output}, nullptr), 2);
}

TEST(SamplerTest, FrequencyAndPresencePenaltiesCountOutputOnly) {
  const std::vector<float> logits = {1.0f, 1.0f, 1.0f, 1.0f};
  engine::SamplingParams p = Sampled();
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  const std::vector<int32_t> prompt = {0, 0, 0};  // the prompt is not penalised
  const std::vector<int32_t> output = {2, 3, 2, 2};
  ExpectProbs(Probs(logits, p, {prompt, output}),
              SoftmaxOf({1.0f, 1.0f, 1.0f - 1.5f - 0.25f, 1.0f - 0.5f - 0.25f}));
  // Negative values encourage repetition.
  p.frequency_penalty = -1.0f;
  p.presence_penalty = 0;
  ExpectProbs(Probs(logits, p, {prompt, output}), SoftmaxOf({1.0f, 1.0f, 4.0f, 2.0f}));
}

TEST(SamplerTest, PenaltiesCombineRepetitionFirst) {
  const std::vector<float> logits = {3.0f, -1.0f, 0.0f};
  engine::SamplingParams p = Sampled();
  p.repetition_penalty = 1.5f;
  p.frequency_penalty = 1.0f;
  p.presence_penalty = 0.5f;
  const std::vector<int32_t> output = {0, 1, 1};
  ExpectProbs(Probs(logits, p, {{}, output}),
              SoftmaxOf({3.0f / 1.5f - 1.0f - 0.5f, -1.5f - 2.0f - 0.5f, 0.0f}));
}

TEST(SamplerTest, SampledFrequenciesMatchTheDistribution) {
  const std::vector<double> want = {0.1, 0.2, 0.3, 0.4};
  const std::vector<float> logits = LogitsOf(want);
  sampling::Sampler sampler(4);
  const engine::SamplingParams p = Sampled();
  const int n = 200000;
  std::vector<int> counts(4, 0);
  std::vector<int32_t> output;  // only its length (the output index) matters here
  output.reserve(size_t(n));
  for (int i = 0; i < n; ++i) {
    ++counts[size_t(
        sampler.Sample(logits.data(), p, sampling::SamplerState{1234}, {{}, output}, nullptr))];
    output.push_back(0);
  }
  double chi2 = 0;
  for (size_t v = 0; v < 4; ++v) {
    const double e = want[v] * n;
    chi2 += (counts[v] - e) * (counts[v] - e) / e;
  }
  EXPECT_LT(chi2, 16.27);  // chi-square, 3 dof, alpha = 1e-3
}

// Samples `n` tokens for one request, feeding its output back.
std::vector<int32_t> Generate(sampling::Sampler& sampler,
                              const std::vector<std::vector<float>>& rows,
                              const engine::SamplingParams& p, uint64_t seed, size_t n,
                              const std::function<void()>& between = nullptr) {
  std::vector<int32_t> out;
  for (size_t i = 0; i < n; ++i) {
    if (between) between();
    const std::vector<float>& row = rows[i % rows.size()];
    out.push_back(sampler.Sample(row.data(), p, sampling::SamplerState{seed}, {{}, out}, nullptr));
  }
  return out;
}

TEST(SamplerTest, SeededStreamIgnoresOtherRequestsAndSamplers) {
  const int64_t vocab = 50;
  std::vector<std::vector<float>> rows(7, std::vector<float>(size_t(vocab)));
  for (size_t r = 0; r < rows.size(); ++r) {
    for (int64_t v = 0; v < vocab; ++v) rows[r][size_t(v)] = std::sin(float(r * 31 + v));
  }
  engine::SamplingParams p = Sampled(0.8f);
  p.top_p = 0.9f;
  p.frequency_penalty = 0.3f;
  sampling::Sampler alone(vocab);
  const std::vector<int32_t> a = Generate(alone, rows, p, 77, 60);

  // Same request interleaved with two others (other seeds and params) on a
  // different sampler instance: the same tokens.
  sampling::Sampler shared(vocab);
  std::vector<int32_t> b_out, c_out;
  engine::SamplingParams pc = Sampled(1.3f);
  pc.top_k = 5;
  auto others = [&] {
    b_out.push_back(
        shared.Sample(rows[1].data(), p, sampling::SamplerState{78}, {{}, b_out}, nullptr));
    c_out.push_back(
        shared.Sample(rows[2].data(), pc, sampling::SamplerState{5}, {{}, c_out}, nullptr));
  };
  EXPECT_EQ(Generate(shared, rows, p, 77, 60, others), a);
  // Another seed gives another stream.
  EXPECT_NE(Generate(alone, rows, p, 78, 60), a);
}

TEST(SamplerTest, UnseededRequestsUseTheRequestSeed) {
  engine::SamplingParams p = Sampled();
  EXPECT_EQ(sampling::SamplerState::ForRequest(p, 99).seed, 99u);
  p.seed = 7;
  EXPECT_EQ(sampling::SamplerState::ForRequest(p, 99).seed, 7u);
}

TEST(SamplerTest, RawLogprobsAreLogSoftmaxOfTheModelLogits) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  const std::vector<double> want = SoftmaxOf(logits);
  sampling::Sampler sampler(5);
  engine::SamplingParams p;
  p.logprobs = 3;
  engine::TokenLogprob lp;
  const int32_t token = sampler.Sample(logits.data(), p, {}, {}, &lp);
  EXPECT_EQ(token, 1);
  EXPECT_EQ(lp.token, 1);
  EXPECT_NEAR(lp.logprob, std::log(want[1]), 1e-6);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].first, 1);  // tie with 3: lower id first
  EXPECT_EQ(lp.top[1].first, 3);
  EXPECT_EQ(lp.top[2].first, 4);
  for (const auto& [id, value] : lp.top) EXPECT_NEAR(value, std::log(want[size_t(id)]), 1e-6);

  // Raw mode (vLLM v1 default): temperature and penalties change the
  // choice's law, never the reported logprobs.
  p.temperature = 0.3f;
  p.presence_penalty = 2.0f;
  engine::TokenLogprob sampled;
  const std::vector<int32_t> output = {1, 3};
  const int32_t t2 =
      sampler.Sample(logits.data(), p, sampling::SamplerState{3}, {{}, output}, &sampled);
  EXPECT_EQ(sampled.token, t2);
  EXPECT_NEAR(sampled.logprob, std::log(want[size_t(t2)]), 1e-6);
  EXPECT_NEAR(sampled.top[0].second, std::log(want[1]), 1e-6);

  p.logprobs = 0;  // the chosen token only
  engine::TokenLogprob only;
  sampler.Sample(logits.data(), p, sampling::SamplerState{3}, {{}, output}, &only);
  EXPECT_TRUE(only.top.empty());
}

TEST(SamplerTest, NonFiniteLogitsAreNeverChosen) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> logits = {nan, 1.0f, inf, 0.0f, -inf};
  sampling::Sampler sampler(5);
  EXPECT_EQ(sampler.Sample(logits.data(), engine::SamplingParams{}, {}, {}, nullptr), 1);
  std::vector<int32_t> out;
  for (int i = 0; i < 200; ++i) {
    const int32_t t =
        sampler.Sample(logits.data(), Sampled(5.0f), sampling::SamplerState{1}, {{}, out}, nullptr);
    ASSERT_TRUE(t == 1 || t == 3) << t;
    out.push_back(t);
  }
}

TEST(SamplerTest, LogitBiasShiftsRawLogitsBeforePenalties) {
  const std::vector<float> logits = {2.0f, -1.0f, 1.0f, 0.5f};
  sampling::Sampler sampler(4);
  engine::SamplingParams greedy;
  greedy.logit_bias = {{3, 2.0f}};  // 0.5 + 2 beats 2.0
  EXPECT_EQ(sampler.Sample(logits.data(), greedy, {}, {}, nullptr), 3);
  // Sampled: the law is the softmax of the biased logits.
  engine::SamplingParams p = Sampled();
  p.logit_bias = {{1, 1.5f}, {2, -0.5f}};
  ExpectProbs(Probs(logits, p), SoftmaxOf({2.0f, 0.5f, 0.5f, 0.5f}));
  // The bias comes before the repetition penalty: token 3 (in the prompt)
  // is halved from 0.5, and when biased, from 0.5 + 1.5 = 2.0.
  p.repetition_penalty = 2.0f;
  const std::vector<int32_t> prompt = {3};
  ExpectProbs(Probs(logits, p, {prompt, {}}), SoftmaxOf({2.0f, 0.5f, 0.5f, 0.25f}));
  p.logit_bias = {{3, 1.5f}};
  ExpectProbs(Probs(logits, p, {prompt, {}}), SoftmaxOf({2.0f, -1.0f, 1.0f, 1.0f}));
  // -100 removes a token in practice: never drawn over 2000 seeds.
  engine::SamplingParams ban = Sampled(1.0f);
  ban.logit_bias = {{0, -100.0f}};
  for (uint64_t seed = 0; seed < 2000; ++seed) {
    ASSERT_NE(sampler.Sample(logits.data(), ban, sampling::SamplerState{seed}, {}, nullptr), 0)
        << seed;
  }
}

TEST(SamplerTest, MinTokensMasksStopIdsUntilEnoughTokensAreOut) {
  // Token 1 (a stop id) dominates; 3 is the next best.
  const std::vector<float> logits = {0.0f, 5.0f, -1.0f, 1.0f};
  sampling::Sampler sampler(4);
  engine::SamplingParams greedy;
  greedy.min_tokens = 2;
  greedy.min_tokens_stop_ids = {1, 2};
  std::vector<int32_t> out;
  EXPECT_EQ(sampler.Sample(logits.data(), greedy, {}, {{}, out}, nullptr), 3);
  out = {3};
  EXPECT_EQ(sampler.Sample(logits.data(), greedy, {}, {{}, out}, nullptr), 3);
  out = {3, 3};  // two tokens out: the stop id is allowed again
  EXPECT_EQ(sampler.Sample(logits.data(), greedy, {}, {{}, out}, nullptr), 1);
  // Sampled: the masked ids have probability 0, the rest renormalised, even
  // when a logit_bias pushes a stop id up.
  engine::SamplingParams p = Sampled();
  p.min_tokens = 1;
  p.min_tokens_stop_ids = {1};
  p.logit_bias = {{1, 50.0f}};
  const std::vector<double> q = SoftmaxOf({0.0f, -INFINITY, -1.0f, 1.0f});
  ExpectProbs(Probs(logits, p), q);
  for (uint64_t seed = 0; seed < 500; ++seed) {
    ASSERT_NE(sampler.Sample(logits.data(), p, sampling::SamplerState{seed}, {}, nullptr), 1);
  }
  // Greedy verification: a drafted stop id before min_tokens is rejected
  // and replaced by the masked argmax; the bonus after it may stop.
  greedy.min_tokens = 1;
  const std::vector<float> rows = {0.0f, 5.0f, -1.0f, 1.0f, 0.0f, 5.0f, -1.0f, 1.0f};
  const std::vector<int32_t> drafts = {1};
  sampling::VerifyResult r =
      sampler.Verify(rows.data(), drafts, nullptr, greedy, {}, {{}, {}}, nullptr);
  EXPECT_EQ(r.num_accepted, 0);
  EXPECT_EQ(r.tokens, std::vector<int32_t>({3}));
  const std::vector<int32_t> ok_drafts = {3};
  r = sampler.Verify(rows.data(), ok_drafts, nullptr, greedy, {}, {{}, {}}, nullptr);
  EXPECT_EQ(r.tokens, std::vector<int32_t>({3, 1}));
}

}  // namespace
}  // namespace dsv4::testing
