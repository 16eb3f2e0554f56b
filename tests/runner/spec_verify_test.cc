// Speculative verification: the greedy accept rule (the linear-chain rule of
// docs/sampling.md "4. Speculative verification") and rejection sampling, whose output law must be
// exactly the non-speculative one (chi-square tests on a synthetic vocabulary).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "sampling/sampler.h"
#include "sampling/sampler_rng.h"
#include "sampling/token_distribution.h"

namespace dsv4::testing {
namespace {

// [rows, vocab] logits whose argmax per row is targets[row].
std::vector<float> OneHotRows(const std::vector<int32_t>& targets, int64_t vocab) {
  std::vector<float> rows(targets.size() * size_t(vocab), 0.0f);
  for (size_t r = 0; r < targets.size(); ++r) rows[r * size_t(vocab) + size_t(targets[r])] = 5.0f;
  return rows;
}

std::vector<int32_t> VerifyGreedy(const std::vector<int32_t>& targets,
                                  const std::vector<int32_t>& drafts, int32_t* num_accepted) {
  const int64_t vocab = 128;
  sampling::Sampler sampler(vocab);
  const std::vector<float> rows = OneHotRows(targets, vocab);
  const sampling::VerifyResult r =
      sampler.Verify(rows.data(), drafts, nullptr, engine::SamplingParams{}, {}, {}, nullptr);
  *num_accepted = r.num_accepted;
  return r.tokens;
}

TEST(SpecVerifyTest, GreedyUnitVectorsOfTheReference) {
  int32_t n = 0;
  EXPECT_EQ(VerifyGreedy({11, 12}, {11}, &n), (std::vector<int32_t>{11, 12}));
  EXPECT_EQ(n, 1);
  EXPECT_EQ(VerifyGreedy({21, 22}, {99}, &n), (std::vector<int32_t>{21}));
  EXPECT_EQ(n, 0);
  EXPECT_EQ(VerifyGreedy({11, 12, 13, 14}, {11, 12, 13}, &n),
            (std::vector<int32_t>{11, 12, 13, 14}));
  EXPECT_EQ(n, 3);
  EXPECT_EQ(VerifyGreedy({21, 22, 23, 24}, {21, 99, 23}, &n), (std::vector<int32_t>{21, 22}));
  EXPECT_EQ(n, 1);
  EXPECT_EQ(VerifyGreedy({31, 32, 33, 34}, {99, 32, 33}, &n), (std::vector<int32_t>{31}));
  EXPECT_EQ(n, 0);
}

TEST(SpecVerifyTest, GreedyRowsSeeTheDraftsAsHistory) {
  // Rows identical; a presence penalty on the drafts makes each row's
  // choice depend on the drafts before it, exactly as sequential sampling.
  const int64_t vocab = 4;
  const std::vector<float> row = {3.0f, 2.9f, 2.8f, 0.0f};
  std::vector<float> rows;
  for (int r = 0; r < 3; ++r) rows.insert(rows.end(), row.begin(), row.end());
  engine::SamplingParams p;
  p.presence_penalty = 0.5f;
  p.logprobs = 1;
  sampling::Sampler sampler(vocab);
  std::vector<int32_t> sequential;
  for (int i = 0; i < 3; ++i) {
    sequential.push_back(sampler.Sample(row.data(), p, {}, {{}, sequential}, nullptr));
  }
  EXPECT_EQ(sequential, (std::vector<int32_t>{0, 1, 2}));
  std::vector<engine::TokenLogprob> lps;
  const std::vector<int32_t> drafts = {0, 1};
  const sampling::VerifyResult r = sampler.Verify(rows.data(), drafts, nullptr, p, {}, {}, &lps);
  EXPECT_EQ(r.tokens, sequential);
  EXPECT_EQ(r.num_accepted, 2);
  ASSERT_EQ(lps.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(lps[i].token, sequential[i]);
}

// A synthetic "model" over a 6-token vocabulary: the next-token logits depend
// on the previous token only.  Target and draft disagree substantially.
constexpr int64_t kVocab = 6;

std::vector<float> TargetRow(int32_t prev) {
  static const float kTable[kVocab][kVocab] = {
      {1.0f, 0.2f, -0.5f, 0.7f, -1.0f, 0.1f},  {-0.3f, 0.9f, 0.4f, -0.8f, 0.6f, 0.0f},
      {0.5f, -0.6f, 1.1f, 0.2f, -0.2f, -0.9f}, {0.0f, 0.3f, -0.4f, 0.8f, 0.5f, -0.7f},
      {-1.0f, 0.4f, 0.6f, -0.1f, 0.9f, 0.3f},  {0.7f, -0.2f, 0.1f, 0.4f, -0.6f, 1.0f}};
  return {kTable[prev], kTable[prev] + kVocab};
}

std::vector<float> DraftRow(int32_t prev) {
  static const float kTable[kVocab][kVocab] = {
      {0.2f, 1.0f, 0.3f, -0.4f, 0.5f, -0.9f}, {0.8f, 0.1f, -0.7f, 0.6f, -0.2f, 0.4f},
      {-0.5f, 0.9f, 0.0f, 0.7f, 0.3f, -0.3f}, {1.2f, -0.4f, 0.5f, -0.6f, 0.1f, 0.2f},
      {0.3f, 0.3f, -0.9f, 0.8f, -0.4f, 0.9f}, {-0.2f, 0.6f, 0.9f, -0.5f, 0.7f, 0.0f}};
  return {kTable[prev], kTable[prev] + kVocab};
}

enum class Drafter { kProbabilistic, kDeterministic, kCoupled, kAcceptAllBug };

struct SpecRun {
  std::vector<int64_t> first;  // [kVocab] counts of output token 0
  std::vector<int64_t> joint;  // [kVocab * kVocab] counts of (token 0, token 1)
  int64_t num_first_draft_accepted = 0;
};

// Runs `trials` requests (seed = trial index) with K = 2 until each has two
// output tokens.
SpecRun RunSpeculative(const engine::SamplingParams& params, Drafter drafter, int64_t trials) {
  const int32_t kDrafts = 2;
  const std::vector<int32_t> prompt = {0};
  sampling::Sampler sampler(kVocab);
  sampling::TokenDistribution draft_dist(kVocab);
  SpecRun run{std::vector<int64_t>(kVocab, 0), std::vector<int64_t>(kVocab * kVocab, 0), 0};
  std::vector<float> q(size_t(kDrafts * kVocab));
  for (int64_t trial = 0; trial < trials; ++trial) {
    const sampling::SamplerState state{static_cast<uint64_t>(trial)};
    std::vector<int32_t> output;
    bool first_step = true;
    while (output.size() < 2) {
      std::vector<int32_t> context = output, drafts;
      for (int32_t k = 0; k < kDrafts; ++k) {
        const int32_t prev = context.empty() ? prompt.back() : context.back();
        const std::vector<float> row = DraftRow(prev);
        int32_t d = 0;
        if (drafter == Drafter::kDeterministic) {
          d = int32_t(std::max_element(row.begin(), row.end()) - row.begin());
        } else if (drafter == Drafter::kCoupled) {
          d = sampling::CoupledDraft(draft_dist, row.data(), params, state, {prompt, context});
        } else {
          d = sampling::SampleDraft(draft_dist, row.data(), params, state, {prompt, context},
                                    q.data() + k * kVocab);
        }
        drafts.push_back(d);
        context.push_back(d);
      }
      std::vector<float> rows;
      for (int32_t j = 0; j <= kDrafts; ++j) {
        const int32_t prev =
            j == 0 ? (output.empty() ? prompt.back() : output.back()) : drafts[size_t(j - 1)];
        const std::vector<float> row = TargetRow(prev);
        rows.insert(rows.end(), row.begin(), row.end());
      }
      if (drafter == Drafter::kAcceptAllBug) {
        output.insert(output.end(), drafts.begin(), drafts.end());
        continue;
      }
      const sampling::VerifyResult r = sampler.Verify(
          rows.data(), drafts, drafter == Drafter::kProbabilistic ? q.data() : nullptr, params,
          state, {prompt, output}, nullptr);
      EXPECT_EQ(r.tokens.size(), size_t(r.num_accepted) + 1);
      if (first_step && r.num_accepted > 0) ++run.num_first_draft_accepted;
      first_step = false;
      output.insert(output.end(), r.tokens.begin(), r.tokens.end());
    }
    ++run.first[size_t(output[0])];
    ++run.joint[size_t(output[0] * kVocab + output[1])];
  }
  return run;
}

// The non-speculative law of the first two tokens, from the (separately
// tested) distribution code.
void ExactLaw(const engine::SamplingParams& params, std::vector<double>* first,
              std::vector<double>* joint) {
  const std::vector<int32_t> prompt = {0};
  sampling::TokenDistribution dist(kVocab);
  dist.Compute(TargetRow(0).data(), params, {prompt, {}});
  first->assign(dist.probs().begin(), dist.probs().end());
  joint->assign(kVocab * kVocab, 0.0);
  for (int32_t t0 = 0; t0 < kVocab; ++t0) {
    const std::vector<int32_t> out = {t0};
    dist.Compute(TargetRow(t0).data(), params, {prompt, out});
    for (int32_t t1 = 0; t1 < kVocab; ++t1) {
      (*joint)[size_t(t0 * kVocab + t1)] = (*first)[size_t(t0)] * dist.probs()[size_t(t1)];
    }
  }
}

// Pearson chi-square over the cells with positive expected probability;
// *dof = cells - 1.  A cell with expected probability 0 must be empty.
double ChiSquare(const std::vector<int64_t>& counts, const std::vector<double>& probs, int64_t n,
                 int* dof) {
  double chi2 = 0;
  *dof = -1;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (probs[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "cell " << i << " has probability 0";
      continue;
    }
    const double e = probs[i] * double(n);
    chi2 += (double(counts[i]) - e) * (double(counts[i]) - e) / e;
    ++*dof;
  }
  return chi2;
}

// Upper alpha = 1e-4 critical value of chi-square (Wilson-Hilferty; 2% above
// the exact quantile at 5 dof, 0.3% at 35).
double Critical(int dof) {
  const double z = 3.719;  // standard normal upper 1e-4 quantile
  const double k = dof;
  const double a = 2.0 / (9.0 * k);
  return k * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

constexpr int64_t kTrials = 200000;

void ExpectExactLaw(const engine::SamplingParams& params, Drafter drafter) {
  std::vector<double> first, joint;
  ExactLaw(params, &first, &joint);
  const SpecRun run = RunSpeculative(params, drafter, kTrials);
  int dof = 0;
  const double chi_first = ChiSquare(run.first, first, kTrials, &dof);
  EXPECT_LT(chi_first, Critical(dof)) << "first token, dof " << dof;
  const double chi_joint = ChiSquare(run.joint, joint, kTrials, &dof);
  EXPECT_LT(chi_joint, Critical(dof)) << "first two tokens, dof " << dof;
}

TEST(SpecVerifyTest, RejectionSamplingKeepsTheTargetLawProbabilisticDrafts) {
  engine::SamplingParams p;
  p.temperature = 1.0f;
  ExpectExactLaw(p, Drafter::kProbabilistic);
}

TEST(SpecVerifyTest, RejectionSamplingKeepsTheTargetLawWithEveryFilter) {
  // Penalties make the second token's law depend on the first (through the
  // drafts as history); top_k gives both laws zeros.
  engine::SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 4;
  p.presence_penalty = 0.7f;
  p.repetition_penalty = 1.3f;
  ExpectExactLaw(p, Drafter::kProbabilistic);
}

TEST(SpecVerifyTest, RejectionSamplingKeepsTheTargetLawDeterministicDrafts) {
  engine::SamplingParams p;
  p.temperature = 1.0f;
  ExpectExactLaw(p, Drafter::kDeterministic);
}

TEST(SpecVerifyTest, DeterministicDraftsLeaveSeededOutputUnchanged) {
  // Point-mass drafts are verified by the plain sampling draw itself, so a
  // seeded sampled request commits the same tokens with or without MTP.
  engine::SamplingParams p;
  p.temperature = 0.9f;
  p.frequency_penalty = 0.4f;
  const std::vector<int32_t> prompt = {0};
  const size_t n = 12;
  sampling::Sampler sampler(kVocab);
  int64_t num_accepted = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const sampling::SamplerState state{seed};
    std::vector<int32_t> plain;
    while (plain.size() < n) {
      const int32_t prev = plain.empty() ? prompt.back() : plain.back();
      plain.push_back(sampler.Sample(TargetRow(prev).data(), p, state, {prompt, plain}, nullptr));
    }
    std::vector<int32_t> spec;
    while (spec.size() < n) {
      std::vector<int32_t> drafts;
      const int32_t last = spec.empty() ? prompt.back() : spec.back();
      std::vector<float> rows = TargetRow(last);
      for (int k = 0; k < 3; ++k) {
        const std::vector<float> d = DraftRow(drafts.empty() ? last : drafts.back());
        drafts.push_back(int32_t(std::max_element(d.begin(), d.end()) - d.begin()));
        const std::vector<float> next = TargetRow(drafts.back());
        rows.insert(rows.end(), next.begin(), next.end());
      }
      const sampling::VerifyResult r =
          sampler.Verify(rows.data(), drafts, nullptr, p, state, {prompt, spec}, nullptr);
      num_accepted += r.num_accepted;
      spec.insert(spec.end(), r.tokens.begin(), r.tokens.end());
    }
    spec.resize(n);
    ASSERT_EQ(spec, plain) << "seed " << seed;
  }
  EXPECT_GT(num_accepted, 0);  // drafts were accepted, not only corrected
}

TEST(SpecVerifyTest, RejectionSamplingKeepsTheTargetLawCoupledDrafts) {
  engine::SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 4;
  ExpectExactLaw(p, Drafter::kCoupled);
}

// Greedy and plain sampling per token of a toy chain whose next-token logits
// are `row(prev)`; drafts of K = 3 from `draft_row` picked by CoupledDraft.
// Returns {accepted, proposed} drafts; the committed output must equal plain
// sampling.
std::pair<int64_t, int64_t> CoupledRun(
    const engine::SamplingParams& p, uint64_t seed,
    const std::function<std::vector<float>(int32_t)>& draft_row) {
  const std::vector<int32_t> prompt = {0};
  const size_t n = 12;
  sampling::Sampler sampler(kVocab);
  sampling::TokenDistribution dist(kVocab);
  const sampling::SamplerState state{seed};
  std::vector<int32_t> plain;
  while (plain.size() < n) {
    const int32_t prev = plain.empty() ? prompt.back() : plain.back();
    plain.push_back(sampler.Sample(TargetRow(prev).data(), p, state, {prompt, plain}, nullptr));
  }
  std::vector<int32_t> spec;
  int64_t num_accepted = 0, num_proposed = 0;
  while (spec.size() < n) {
    std::vector<int32_t> context = spec, drafts;
    std::vector<float> rows = TargetRow(spec.empty() ? prompt.back() : spec.back());
    for (int k = 0; k < 3; ++k) {
      const std::vector<float> d = draft_row(context.empty() ? prompt.back() : context.back());
      drafts.push_back(sampling::CoupledDraft(dist, d.data(), p, state, {prompt, context}));
      context.push_back(drafts.back());
      const std::vector<float> next = TargetRow(drafts.back());
      rows.insert(rows.end(), next.begin(), next.end());
    }
    const sampling::VerifyResult r =
        sampler.Verify(rows.data(), drafts, nullptr, p, state, {prompt, spec}, nullptr);
    num_accepted += r.num_accepted;
    num_proposed += static_cast<int64_t>(drafts.size());
    spec.insert(spec.end(), r.tokens.begin(), r.tokens.end());
  }
  spec.resize(n);
  EXPECT_EQ(spec, plain) << "seed " << seed;
  return {num_accepted, num_proposed};
}

TEST(SpecVerifyTest, CoupledDraftsLeaveSeededOutputUnchanged) {
  engine::SamplingParams p;
  p.temperature = 0.9f;
  p.frequency_penalty = 0.4f;
  int64_t num_accepted = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) num_accepted += CoupledRun(p, seed, DraftRow).first;
  EXPECT_GT(num_accepted, 0);
}

TEST(SpecVerifyTest, CoupledDraftsOfACloseLawAreMostlyAccepted) {
  // A drafter equal to the target is always right; one a little off is
  // right far more often than its argmax would be (after token 0 the argmax,
  // token 0, is accepted with probability p(0) = 0.34).
  engine::SamplingParams p;
  p.temperature = 1.0f;
  auto close = [](int32_t prev) {
    std::vector<float> row = TargetRow(prev);
    for (size_t v = 0; v < row.size(); ++v) row[v] += (v % 2 == 0 ? 0.05f : -0.05f);
    return row;
  };
  int64_t exact = 0, near = 0, near_proposed = 0, argmax = 0;
  const int64_t seeds = 200;
  for (uint64_t seed = 0; seed < seeds; ++seed) {
    exact += CoupledRun(p, seed, TargetRow).first;
    const auto [accepted, proposed] = CoupledRun(p, seed, close);
    near += accepted;
    near_proposed += proposed;
  }
  // 12 tokens in steps of 4 (3 drafts + 1) when every draft is accepted.
  EXPECT_EQ(exact, seeds * 9);
  EXPECT_GT(near, near_proposed * 7 / 10);
  // The same close drafter picking its argmax instead.
  sampling::Sampler sampler(kVocab);
  const std::vector<int32_t> prompt = {0};
  for (uint64_t seed = 0; seed < seeds; ++seed) {
    const std::vector<float> q = close(0);
    const int32_t d = int32_t(std::max_element(q.begin(), q.end()) - q.begin());
    const std::vector<int32_t> drafts = {d};
    std::vector<float> rows = TargetRow(0);
    const std::vector<float> next = TargetRow(d);
    rows.insert(rows.end(), next.begin(), next.end());
    argmax += sampler
                  .Verify(rows.data(), drafts, nullptr, p, sampling::SamplerState{seed},
                          {prompt, {}}, nullptr)
                  .num_accepted;
  }
  std::printf(
      "accepted drafts: coupled, exact law %lld / %lld; coupled, close law %lld / %lld; "
      "argmax of the close law, first draft %lld / %lld\n",
      static_cast<long long>(exact), static_cast<long long>(seeds * 9),
      static_cast<long long>(near), static_cast<long long>(near_proposed),
      static_cast<long long>(argmax), static_cast<long long>(seeds));
  EXPECT_LT(argmax, seeds * 45 / 100);  // 0.34 +- 0.034 (1 sd)
  // Per-draft acceptance more than doubles.
  EXPECT_GT(static_cast<double>(near) / static_cast<double>(near_proposed),
            2 * static_cast<double>(argmax) / static_cast<double>(seeds));
}

TEST(SpecVerifyTest, FirstDraftAcceptanceIsTheOverlapOfTheLaws) {
  // P(accept draft 0) = Σ_x min(p(x), q(x)) for drafts drawn from q.
  engine::SamplingParams p;
  p.temperature = 1.0f;
  const std::vector<int32_t> prompt = {0};
  sampling::TokenDistribution dist(kVocab);
  dist.Compute(TargetRow(0).data(), p, {prompt, {}});
  const std::vector<double> target(dist.probs().begin(), dist.probs().end());
  dist.Compute(DraftRow(0).data(), p, {prompt, {}});
  double overlap = 0;
  for (int64_t v = 0; v < kVocab; ++v)
    overlap += std::min(target[size_t(v)], dist.probs()[size_t(v)]);
  const int64_t n = 50000;
  const SpecRun run = RunSpeculative(p, Drafter::kProbabilistic, n);
  const double rate = double(run.num_first_draft_accepted) / double(n);
  EXPECT_NEAR(rate, overlap, 5 * std::sqrt(overlap * (1 - overlap) / double(n)));
}

TEST(SpecVerifyTest, TheChiSquareTestCatchesABrokenVerifier) {
  // Negative control: committing every draft yields the draft law, which the
  // same test must reject by a wide margin.
  engine::SamplingParams p;
  p.temperature = 1.0f;
  std::vector<double> first, joint;
  ExactLaw(p, &first, &joint);
  const int64_t n = 20000;
  const SpecRun run = RunSpeculative(p, Drafter::kAcceptAllBug, n);
  int dof = 0;
  const double chi2 = ChiSquare(run.first, first, n, &dof);
  EXPECT_GT(chi2, 10 * Critical(dof));
}

// Greedy drafts without penalties or biases skip the distribution (an argmax
// over the raw logits); with them they go through it.  Either way the draft
// is Compute's argmax: NaN, +inf and -inf never win, the lowest id wins ties,
// and a row without a finite logit gives token 0.
TEST(SpecVerifyTest, GreedyCoupledDraftIsTheDistributionsArgmax) {
  const int64_t vocab = 97;
  std::mt19937 rng(41);
  std::uniform_int_distribution<int> kind(0, 9), value(-4, 4);
  sampling::TokenDistribution dist(vocab), reference(vocab);
  const std::vector<int32_t> prompt = {3, 5, 5};
  const std::vector<int32_t> output = {7, 3};
  const float inf = std::numeric_limits<float>::infinity();
  for (int trial = 0; trial < 400; ++trial) {
    std::vector<float> row(vocab);
    for (float& x : row) {
      const int k = kind(rng);
      // Few distinct values: ties are common.
      x = k == 0 ? std::nanf("") : k == 1 ? inf : k == 2 ? -inf : static_cast<float>(value(rng));
    }
    if (trial % 50 == 0) std::fill(row.begin(), row.end(), trial % 100 == 0 ? -inf : std::nanf(""));
    for (int variant = 0; variant < 3; ++variant) {
      engine::SamplingParams p;  // greedy
      if (variant == 1) p.repetition_penalty = 1.3f;
      if (variant == 2) p.logit_bias = {{11, 2.5f}};
      reference.Compute(row.data(), p, {prompt, output});
      const int32_t want = std::max(reference.argmax(), 0);
      EXPECT_EQ(
          sampling::CoupledDraft(dist, row.data(), p, sampling::SamplerState{1}, {prompt, output}),
          want)
          << "trial " << trial << " variant " << variant;
    }
  }
}

}  // namespace
}  // namespace dsv4::testing
