// Indexer scores and top-k against golden/ops §15 (bit-exact, ties included).
#include "kernels/indexer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "base/thread_pool.h"
#include "ops_test_util.h"
#include "testing/golden.h"

namespace dsv4::kernels {
namespace {

using testing::IsasToTest;
using testing::OpenGolden;
using testing::ReadBf16;
using testing::ReadF32;
using testing::ReadI64;
using testing::ScopedIsa;

constexpr int64_t kDim = 128;
constexpr int64_t kTopK = 8;

struct IndexerCase {
  std::vector<bf16> q;     // [tokens, heads, kDim]
  std::vector<bf16> w;     // [tokens, heads], already scaled
  std::vector<bf16> keys;  // [14, kDim]
  std::vector<const bf16*> key_rows;
  int64_t tokens = 0;
  int64_t heads = 0;
};

IndexerCase LoadCase(const checkpoint::SafetensorsFile& f, const std::string& p) {
  IndexerCase c;
  Shape shape;
  c.q = ReadBf16(f, p + ".q", &shape);
  c.tokens = shape[0];
  c.heads = shape[1];
  c.keys = ReadBf16(f, p + ".keys");
  for (int64_t e = 0; e < 14; ++e) c.key_rows.push_back(c.keys.data() + e * kDim);
  // w = bf16(fp32(w_raw) * c), c = 128^-0.5 * H^-0.5 computed in double.
  const float scale = static_cast<float>(1.0 / std::sqrt(128.0 * static_cast<double>(c.heads)));
  for (float v : ReadF32(f, p + ".w_raw")) c.w.push_back(F32ToBf16(v * scale));
  return c;
}

// dots = relu(dot) - relu(-dot): two single-head, unit-weight IndexerScores calls.
void ExpectDotsMatch(const IndexerCase& c, const std::vector<float>& want, int64_t n_cols,
                     const std::vector<int64_t>& n_entries) {
  const std::vector<bf16> one(1, F32ToBf16(1.0f));
  std::vector<float> pos(n_cols), neg(n_cols);
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int64_t h = 0; h < c.heads; ++h) {
      std::vector<bf16> qh(c.q.begin() + (t * c.heads + h) * kDim,
                           c.q.begin() + (t * c.heads + h + 1) * kDim);
      std::vector<bf16> qn = qh;
      for (bf16& v : qn) v.bits ^= 0x8000;
      const int64_t n = n_entries[t];
      IndexerScores(qh.data(), 1, 1, kDim, one.data(), c.key_rows.data(), n_cols, &n, pos.data(),
                    nullptr);
      IndexerScores(qn.data(), 1, 1, kDim, one.data(), c.key_rows.data(), n_cols, &n, neg.data(),
                    nullptr);
      for (int64_t e = 0; e < n; ++e) {
        EXPECT_EQ(pos[e] - neg[e], want[(t * c.heads + h) * n_cols + e])
            << "dot t " << t << " h " << h << " e " << e;
      }
    }
  }
}

TEST(IndexerTest, PrefillGolden) {
  auto f = OpenGolden("golden/ops/ops.safetensors");
  ASSERT_NE(f, nullptr);
  const IndexerCase c = LoadCase(*f, "indexer_topk.prefill");
  const int64_t end_pos = 48, offset = 48, n_cols = end_pos / 4;
  std::vector<int64_t> n_entries(c.tokens);  // visible entries: t < (i+1)//4
  for (int64_t i = 0; i < c.tokens; ++i) n_entries[i] = (i + 1) / 4;
  ExpectDotsMatch(c, ReadF32(*f, "indexer_topk.prefill.dots"), n_cols, n_entries);

  const std::vector<float> want_score = ReadF32(*f, "indexer_topk.prefill.score");
  const std::vector<int64_t> want_topk = ReadI64(*f, "indexer_topk.prefill.topk");
  ThreadPool pool(2);
  for (Isa isa : IsasToTest()) {
    ScopedIsa scoped(isa);
    std::vector<float> score(c.tokens * n_cols);
    IndexerScores(c.q.data(), c.tokens, c.heads, kDim, c.w.data(), c.key_rows.data(), n_cols,
                  n_entries.data(), score.data(), &pool);
    for (size_t i = 0; i < score.size(); ++i) {
      EXPECT_EQ(score[i], want_score[i]) << "score " << i << " " << IsaName(isa);
    }
    const int64_t k = std::min<int64_t>(kTopK, end_pos / 4);
    std::vector<int32_t> top(k);
    for (int64_t i = 0; i < c.tokens; ++i) {
      TopKDescending(score.data() + i * n_cols, n_cols, k, top.data());
      for (int64_t j = 0; j < k; ++j) {
        const int64_t got = top[j] >= n_entries[i] ? -1 : top[j] + offset;
        EXPECT_EQ(got, want_topk[i * kTopK + j]) << "query " << i << " slot " << j;
      }
    }
  }
}

TEST(IndexerTest, DecodeGolden) {
  auto f = OpenGolden("golden/ops/ops.safetensors");
  ASSERT_NE(f, nullptr);
  const IndexerCase c = LoadCase(*f, "indexer_topk.decode");
  const std::vector<int64_t> n_entries = ReadI64(*f, "indexer_topk.decode.n_entries");
  const std::vector<int64_t> offset = ReadI64(*f, "indexer_topk.decode.offset");
  const int64_t n_cols = 14;
  ExpectDotsMatch(c, ReadF32(*f, "indexer_topk.decode.dots"), n_cols, n_entries);
  const std::vector<float> want_score = ReadF32(*f, "indexer_topk.decode.score");
  const std::vector<int64_t> want_topk = ReadI64(*f, "indexer_topk.decode.topk");
  for (Isa isa : IsasToTest()) {
    ScopedIsa scoped(isa);
    std::vector<float> score(c.tokens * n_cols);
    IndexerScores(c.q.data(), c.tokens, c.heads, kDim, c.w.data(), c.key_rows.data(), n_cols,
                  n_entries.data(), score.data(), nullptr);
    for (int64_t t = 0; t < c.tokens; ++t) {
      for (int64_t e = 0; e < n_cols; ++e) {
        if (e < n_entries[t]) {
          EXPECT_EQ(score[t * n_cols + e], want_score[t * n_cols + e]) << t << "," << e;
        } else {
          EXPECT_EQ(score[t * n_cols + e], -std::numeric_limits<float>::infinity());
        }
      }
      std::vector<int32_t> top(kTopK);
      TopKDescending(score.data() + t * n_cols, n_entries[t], kTopK, top.data());
      for (int64_t j = 0; j < kTopK; ++j) {
        EXPECT_EQ(top[j] + offset[t], want_topk[t * kTopK + j]) << "call " << t << " slot " << j;
      }
    }
  }
}

TEST(IndexerTest, TopKTieRuleAndNegInfLast) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> s = {1.0f, -inf, 3.0f, 1.0f, 3.0f, 0.0f, -inf, 1.0f};
  std::vector<int32_t> out(8);
  TopKDescending(s.data(), 8, 8, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{2, 4, 0, 3, 7, 5, 1, 6}));
  TopKDescending(s.data(), 8, 3, out.data());
  EXPECT_EQ(std::vector<int32_t>(out.begin(), out.begin() + 3), (std::vector<int32_t>{2, 4, 0}));
  TopKDescending(s.data(), 8, 0, out.data());
}

}  // namespace
}  // namespace dsv4::kernels
