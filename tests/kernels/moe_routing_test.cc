// MoE routing and dispatch kernels (kernels/moe_routing.h) against their
// scalar references over shapes and adversarial data (ties, infinities, NaN),
// on the caller and on a pool, plus the golden gate cases of golden/ops §16.
// Every kernel is exact, so all comparisons are bitwise.
#include "kernels/moe_routing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/moe.h"
#include "kernels/ref/moe_routing_ref.h"
#include "testing/golden.h"

namespace dsv4::kernels {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Scores of a given flavour: 0 uniform, 1 few levels (many exact ties),
// 2 with infinities and NaNs sprinkled in, 3 all equal.
std::vector<float> Scores(int64_t count, int flavour, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::uniform_int_distribution<int> level(0, 3);
  std::uniform_int_distribution<int> pick(0, 9);
  std::vector<float> s(static_cast<size_t>(count));
  for (float& v : s) {
    switch (flavour) {
      case 0:
        v = u(rng);
        break;
      case 1:
        v = 0.25f * static_cast<float>(level(rng));
        break;
      case 2: {
        const int p = pick(rng);
        v = p == 0 ? kInf : p == 1 ? -kInf : p == 2 ? std::nanf("") : u(rng);
        break;
      }
      default:
        v = 0.5f;
    }
  }
  return s;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  // Empty vectors may hold a null data(), which memcmp must not see.
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

TEST(MoeRoutingTest, BiasedTopKAndWeightsMatchReferenceOverShapes) {
  std::mt19937 rng(7);
  ThreadPool pool(3);
  int cases = 0;
  for (int64_t e : {1, 8, 64, 256}) {
    for (int64_t k : {0, 1, 2, 6, 8, 256}) {
      if (k > e) continue;
      for (int64_t n : {1, 5, 40}) {
        for (int flavour = 0; flavour < 4; ++flavour) {
          const std::vector<float> s = Scores(n * e, flavour, rng);
          const std::vector<float> bias = Scores(e, flavour == 3 ? 3 : flavour % 2, rng);
          std::vector<int32_t> want(static_cast<size_t>(n * k));
          ref::BiasedTopK(s.data(), bias.data(), n, e, k, want.data());
          for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
            std::vector<int32_t> got(want.size(), -7);
            BiasedTopK(s.data(), bias.data(), n, e, k, got.data(), p);
            ASSERT_EQ(got, want) << "e " << e << " k " << k << " n " << n << " flavour " << flavour;
            std::vector<float> wg(want.size()), ww(want.size());
            RouteWeights(s.data(), n, e, got.data(), k, 1.5f, wg.data(), p);
            ref::RouteWeights(s.data(), n, e, want.data(), k, 1.5f, ww.data());
            ASSERT_TRUE(SameBits(wg, ww)) << "e " << e << " k " << k << " n " << n;
          }
          ++cases;
        }
      }
    }
  }
  EXPECT_GT(cases, 100);
}

// The order itself, on data whose answer is known: larger sum first, ties to
// the lower id, NaN after -inf.
TEST(MoeRoutingTest, BiasedTopKOrder) {
  const float nan = std::nanf("");
  const std::vector<float> s = {nan, 1.0f, -kInf, 3.0f, 1.0f, 2.0f, nan, 1.0f};
  const std::vector<float> bias = {0, 0, 0, -1.0f, 0, 0, 0, 0};  // 3.0 - 1.0 ties with 2.0
  std::vector<int32_t> ids(8);
  BiasedTopK(s.data(), bias.data(), 1, 8, 8, ids.data(), nullptr);
  EXPECT_EQ(ids, (std::vector<int32_t>{3, 5, 1, 4, 7, 2, 0, 6}));
  BiasedTopK(s.data(), bias.data(), 1, 8, 3, ids.data(), nullptr);
  EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + 3), (std::vector<int32_t>{3, 5, 1}));
}

TEST(MoeRoutingTest, HashRouteMatchesReference) {
  std::mt19937 rng(3);
  const int64_t vocab = 50, k = 6, n = 33;
  std::vector<int32_t> table(vocab * k), tokens(n);
  for (int32_t& v : table) v = static_cast<int32_t>(rng() % 256);
  for (int32_t& v : tokens) v = static_cast<int32_t>(rng() % vocab);
  std::vector<int32_t> got(n * k), want(n * k);
  HashRoute(table.data(), vocab, tokens.data(), n, k, got.data());
  ref::HashRoute(table.data(), vocab, tokens.data(), n, k, want.data());
  EXPECT_EQ(got, want);
  EXPECT_EQ(
      std::vector<int32_t>(got.begin(), got.begin() + k),
      std::vector<int32_t>(table.begin() + tokens[0] * k, table.begin() + (tokens[0] + 1) * k));
}

// Distinct ids per row, as routing produces them.
std::vector<int32_t> RandomAssignments(int64_t n, int64_t k, int64_t e, std::mt19937& rng) {
  std::vector<int32_t> ids(static_cast<size_t>(n * k));
  std::vector<int32_t> perm(static_cast<size_t>(e));
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t t = 0; t < n; ++t) {
    std::shuffle(perm.begin(), perm.end(), rng);
    std::copy_n(perm.begin(), k, ids.begin() + t * k);
  }
  return ids;
}

TEST(MoeRoutingTest, SortGatherScatterCombineMatchReference) {
  std::mt19937 rng(11);
  ThreadPool pool(3);
  for (int64_t e : {1, 8, 256}) {
    for (int64_t k : {1, 2, 6}) {
      if (k > e) continue;
      for (int64_t n : {1, 7, 64}) {
        const std::vector<int32_t> ids = RandomAssignments(n, k, e, rng);
        const std::vector<float> w = Scores(n * k, 0, rng);
        const auto na = static_cast<size_t>(n * k);
        std::vector<int64_t> off(e + 1, -1), off_r(e + 1), tok(na), tok_r(na);
        std::vector<float> pw(na), pw_r(na);
        const int64_t rows =
            SortByExpert(ids.data(), w.data(), n, k, e, off.data(), tok.data(), pw.data());
        const int64_t rows_r = ref::SortByExpert(ids.data(), w.data(), n, k, e, off_r.data(),
                                                 tok_r.data(), pw_r.data());
        ASSERT_EQ(rows, rows_r);
        ASSERT_EQ(off, off_r);
        ASSERT_EQ(tok, tok_r);
        ASSERT_TRUE(SameBits(pw, pw_r));

        // Every expert's rows through gather, a stand-in expert, scatter-add.
        const int64_t d = 256, nb = 2;
        std::vector<uint8_t> codes(n * d), eq(rows * d), eq_r(rows * d);
        std::vector<float> scales = Scores(n * nb, 0, rng), es(rows * nb), es_r(rows * nb);
        for (uint8_t& c : codes) c = static_cast<uint8_t>(rng());
        std::vector<float> acc(n * d, 0.0f), acc_r(n * d, 0.0f);
        for (int64_t i = 0; i < e; ++i) {
          const int64_t m = off[i + 1] - off[i];
          const int64_t* t = tok.data() + off[i];
          GatherRows(codes.data(), scales.data(), d, nb, t, m, eq.data(), es.data());
          ref::GatherRows(codes.data(), scales.data(), d, nb, t, m, eq_r.data(), es_r.data());
          ASSERT_TRUE(std::equal(eq.begin(), eq.begin() + m * d, eq_r.begin()));
          ASSERT_TRUE(std::equal(es.begin(), es.begin() + m * nb, es_r.begin()));
          std::vector<bf16> ye(m * d);
          for (int64_t r = 0; r < m * d; ++r) ye[r] = F32ToBf16(Scores(1, 0, rng)[0]);
          ScatterAddRows(ye.data(), t, m, d, acc.data(), &pool);
          ref::ScatterAddRows(ye.data(), t, m, d, acc_r.data());
        }
        ASSERT_TRUE(SameBits(acc, acc_r));

        std::vector<bf16> shared(n * d);
        for (bf16& v : shared) v = F32ToBf16(Scores(1, 0, rng)[0]);
        for (const bf16* sh :
             {static_cast<const bf16*>(nullptr), static_cast<const bf16*>(shared.data())}) {
          std::vector<bf16> y(n * d), y_r(n * d);
          CombineExperts(acc.data(), sh, n, d, y.data(), &pool);
          ref::CombineExperts(acc.data(), sh, n, d, y_r.data());
          ASSERT_EQ(0, std::memcmp(y.data(), y_r.data(), y.size() * sizeof(bf16)));
        }

        std::vector<int32_t> sorted(na), sorted_r(na);
        SortRowsAscending(ids.data(), n, k, sorted.data());
        ref::SortRowsAscending(ids.data(), n, k, sorted_r.data());
        ASSERT_EQ(sorted, sorted_r);
      }
    }
  }
}

// golden/ops §16: the selected experts and their weights, through the kernels
// the model uses (SqrtSoftplus, BiasedTopK or HashRoute, RouteWeights).
TEST(MoeRoutingTest, GoldenGateCases) {
  auto f = testing::OpenGolden("golden/ops/ops.safetensors");
  ASSERT_NE(f, nullptr);
  struct Case {
    const char* name;
    int64_t k;
    bool hash;
  };
  for (const Case c :
       {Case{"e256k6", 6, false}, Case{"e8k2", 2, false}, Case{"hash_e256k6", 6, true}}) {
    const std::string p = std::string("gate.") + c.name;
    Shape shape;
    const std::vector<float> logits = testing::ReadF32(*f, p + ".logits", &shape);
    const int64_t n = shape[0], e = shape[1];
    std::vector<float> s(logits.size());
    SqrtSoftplus(logits.data(), n * e, s.data());
    std::vector<int32_t> ids(n * c.k);
    if (c.hash) {
      std::vector<int32_t> tokens, table;
      for (int64_t v : testing::ReadI64(*f, p + ".ids")) tokens.push_back(static_cast<int32_t>(v));
      for (int64_t v : testing::ReadI64(*f, p + ".tid2eid"))
        table.push_back(static_cast<int32_t>(v));
      HashRoute(table.data(), static_cast<int64_t>(table.size()) / c.k, tokens.data(), n, c.k,
                ids.data());
    } else {
      const std::vector<float> bias = testing::ReadF32(*f, p + ".bias");
      BiasedTopK(s.data(), bias.data(), n, e, c.k, ids.data(), nullptr);
    }
    std::vector<float> w(n * c.k);
    RouteWeights(s.data(), n, e, ids.data(), c.k, 1.5f, w.data(), nullptr);
    const std::vector<int64_t> want_ids = testing::ReadI64(*f, p + ".indices");
    const std::vector<float> want_w = testing::ReadF32(*f, p + ".route_weights");
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t j = 0; j < c.k; ++j) {
        // The golden lists a row's experts in its own order; match by id.
        int64_t at = -1;
        for (int64_t i = 0; i < c.k; ++i) at = want_ids[t * c.k + i] == ids[t * c.k + j] ? i : at;
        ASSERT_GE(at, 0) << c.name << " token " << t << " expert " << ids[t * c.k + j];
        const float want = want_w[t * c.k + at];
        EXPECT_LE(std::fabs(w[t * c.k + j] - want), 1e-6f * std::fabs(want)) << c.name;
      }
    }
  }
}

}  // namespace
}  // namespace dsv4::kernels
