// Attention sub-layer on the tiny-a checkpoint: the general path must be
// independent of the call shape (chunked prefill == one-shot prefill bitwise,
// S-token calls == S single-token calls, several sequences per call == each
// alone), and its indexer selections must respect the visibility rules.
#include "model/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/model_config.h"
#include "kernels/norm.h"
#include "testing/golden.h"

namespace dsv4::model {
namespace {

constexpr int64_t kSeqLen = 300;  // > sliding_window (16), > 2 HCA blocks, > index_topk * 4

class AttentionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = testing::TestDataPath("golden/tiny-a");
    auto cfg = checkpoint::LoadModelConfig(dir);
    ASSERT_TRUE(cfg.ok()) << cfg.status().message();
    cfg_ = new checkpoint::ModelConfig(*cfg);
    auto ckpt = checkpoint::Checkpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
    ckpt_ = std::move(ckpt).value().release();
  }
  static void TearDownTestSuite() {
    delete ckpt_;
    delete cfg_;
  }

  std::unique_ptr<Attention> LoadLayer(int64_t layer_id) {
    const bool mtp = layer_id >= cfg_->num_hidden_layers;
    const std::string prefix =
        mtp ? "mtp." + std::to_string(layer_id - cfg_->num_hidden_layers) + "."
            : "layers." + std::to_string(layer_id) + ".";
    auto a = Attention::Load(*ckpt_, *cfg_, layer_id, prefix, store_);
    EXPECT_TRUE(a.ok()) << a.status().message();
    store_.PackDeferred(*ckpt_, 1);  // the FP8 panel copies, before any forward
    return a.ok() ? std::move(a).value() : nullptr;
  }

  // n rows of unit-RMS BF16 vectors (an attn_norm output with unit weight).
  std::vector<bf16> RandomInput(int64_t n, uint32_t seed) const {
    const int64_t d = cfg_->hidden_size;
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<bf16> raw(static_cast<size_t>(n * d)), out(raw.size());
    for (bf16& v : raw) v = F32ToBf16(normal(rng));
    std::vector<bf16> ones(static_cast<size_t>(d), F32ToBf16(1.0f));
    kernels::RmsNorm(raw.data(), n, d, ones.data(), 1e-6f, out.data());
    return out;
  }

  // Runs one sequence (slot 0 of a fresh cache) through calls of the given
  // sizes (the last size repeats); returns out [n, D] and the traces' rows.
  std::vector<bf16> RunChunked(const Attention& attn, const std::vector<bf16>& x, int64_t n,
                               const std::vector<int64_t>& sizes,
                               std::vector<int32_t>* topk = nullptr, ThreadPool* pool = nullptr) {
    const int64_t d = cfg_->hidden_size;
    auto cache = attn.NewCache(1);
    std::vector<bf16> out(static_cast<size_t>(n * d));
    int64_t pos = 0;
    size_t k = 0;
    while (pos < n) {
      const int64_t s = std::min(sizes[std::min(k, sizes.size() - 1)], n - pos);
      ++k;
      ForwardBatch batch;
      batch.Add(0, pos, std::vector<int32_t>(static_cast<size_t>(s), 0));
      AttentionTrace trace;
      attn.Forward(x.data() + pos * d, batch, *cache, out.data() + pos * d, ws_, pool, &trace);
      if (topk != nullptr) {
        topk->insert(topk->end(), trace.indexer_topk.begin(), trace.indexer_topk.end());
      }
      pos += s;
    }
    EXPECT_EQ(cache->NumCachedTokens(0), n);
    return out;
  }

  static checkpoint::ModelConfig* cfg_;
  static checkpoint::Checkpoint* ckpt_;
  Workspace ws_;
  WeightStore store_;  // the load-time copies of the layers a test loads (outlives them)
};

checkpoint::ModelConfig* AttentionTest::cfg_ = nullptr;
checkpoint::Checkpoint* AttentionTest::ckpt_ = nullptr;

int64_t BitDiffs(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  return testing::CountUlpDiffs(a, b, 0);
}

TEST_F(AttentionTest, ChunkedPrefillEqualsOneShotOnEveryLayerKind) {
  // 0: sliding window, 2: CSA, 3: HCA, 6: the MTP layer (window only).
  for (int64_t layer : {0, 2, 3, 6}) {
    SCOPED_TRACE("layer " + std::to_string(layer));
    auto attn = LoadLayer(layer);
    ASSERT_NE(attn, nullptr);
    const auto x = RandomInput(kSeqLen, 17 + static_cast<uint32_t>(layer));
    const auto whole = RunChunked(*attn, x, kSeqLen, {kSeqLen});
    double sum_sq = 0;
    for (bf16 v : whole) sum_sq += Bf16ToF32(v) * Bf16ToF32(v);
    EXPECT_TRUE(std::isfinite(sum_sq));
    EXPECT_GT(sum_sq, 0.0);
    for (const std::vector<int64_t>& split :
         std::vector<std::vector<int64_t>>{{1}, {7}, {16}, {5, 128, 3, 64}}) {
      SCOPED_TRACE("first chunk " + std::to_string(split[0]));
      EXPECT_EQ(BitDiffs(RunChunked(*attn, x, kSeqLen, split), whole), 0);
    }
  }
}

TEST_F(AttentionTest, SeveralSequencesInOneCallEqualEachAlone) {
  for (int64_t layer : {2, 3}) {
    SCOPED_TRACE("layer " + std::to_string(layer));
    auto attn = LoadLayer(layer);
    ASSERT_NE(attn, nullptr);
    const int64_t d = cfg_->hidden_size;
    const int64_t na = 200, nb = 150;
    const auto xa = RandomInput(na, 101);
    const auto xb = RandomInput(nb, 202);
    const auto want_a = RunChunked(*attn, xa, na, {na});
    const auto want_b = RunChunked(*attn, xb, nb, {nb});
    // Slots 2 and 0 of a 3-slot cache, advancing by different chunk sizes in
    // the same calls; sequence b joins late and a finishes early.
    auto cache = attn->NewCache(3);
    std::vector<bf16> got_a(xa.size()), got_b(xb.size());
    int64_t pa = 0, pb = 0;
    for (int step = 0; pa < na || pb < nb; ++step) {
      const int64_t sa = std::min<int64_t>(na - pa, step % 2 == 0 ? 13 : 1);
      const int64_t sb = step < 3 ? 0 : std::min<int64_t>(nb - pb, step % 3 == 0 ? 1 : 9);
      ForwardBatch batch;
      std::vector<bf16> x;
      if (sb > 0) {
        batch.Add(0, pb, std::vector<int32_t>(static_cast<size_t>(sb), 0));
        x.insert(x.end(), xb.begin() + pb * d, xb.begin() + (pb + sb) * d);
      }
      if (sa > 0) {
        batch.Add(2, pa, std::vector<int32_t>(static_cast<size_t>(sa), 0));
        x.insert(x.end(), xa.begin() + pa * d, xa.begin() + (pa + sa) * d);
      }
      std::vector<bf16> out(x.size());
      attn->Forward(x.data(), batch, *cache, out.data(), ws_, nullptr);
      std::copy_n(out.begin(), sb * d, got_b.begin() + pb * d);
      std::copy_n(out.begin() + sb * d, sa * d, got_a.begin() + pa * d);
      pa += sa;
      pb += sb;
    }
    EXPECT_EQ(BitDiffs(got_a, want_a), 0);
    EXPECT_EQ(BitDiffs(got_b, want_b), 0);
    // A reset slot behaves as a fresh sequence.
    cache->Reset(2);
    EXPECT_EQ(cache->NumCachedTokens(2), 0);
    EXPECT_EQ(cache->NumCompressed(2), 0);
    ForwardBatch batch;
    batch.Add(2, 0, std::vector<int32_t>(static_cast<size_t>(nb), 0));
    std::vector<bf16> again(xb.size());
    attn->Forward(xb.data(), batch, *cache, again.data(), ws_, nullptr);
    EXPECT_EQ(BitDiffs(again, want_b), 0);
  }
}

TEST_F(AttentionTest, MultiTokenStepEqualsSingleSteps) {
  // After a 150-token prefill: one 5-token call (positions 150..154, which
  // complete CSA block 37 at position 151) == five 1-token calls.
  for (int64_t layer : {2, 3}) {
    SCOPED_TRACE("layer " + std::to_string(layer));
    auto attn = LoadLayer(layer);
    ASSERT_NE(attn, nullptr);
    const auto x = RandomInput(155, 303);
    EXPECT_EQ(BitDiffs(RunChunked(*attn, x, 155, {150, 5}), RunChunked(*attn, x, 155, {150, 1})),
              0);
  }
}

TEST_F(AttentionTest, ThreadCountDoesNotChangeResult) {
  ThreadPool pool(3);
  for (int64_t layer : {0, 2, 3}) {
    SCOPED_TRACE("layer " + std::to_string(layer));
    auto attn = LoadLayer(layer);
    ASSERT_NE(attn, nullptr);
    const auto x = RandomInput(kSeqLen, 808);
    const auto serial = RunChunked(*attn, x, kSeqLen, {260, 1});
    EXPECT_EQ(BitDiffs(RunChunked(*attn, x, kSeqLen, {260, 1}, nullptr, &pool), serial), 0);
  }
}

TEST_F(AttentionTest, IndexerSelectionsAreVisibleDistinctAndFull) {
  auto attn = LoadLayer(2);
  ASSERT_NE(attn, nullptr);
  const auto x = RandomInput(kSeqLen, 404);
  std::vector<int32_t> topk_whole, topk_steps;
  RunChunked(*attn, x, kSeqLen, {kSeqLen}, &topk_whole);
  RunChunked(*attn, x, kSeqLen, {1}, &topk_steps);
  const int64_t k = cfg_->index_topk;
  ASSERT_EQ(static_cast<int64_t>(topk_whole.size()), kSeqLen * k);
  EXPECT_EQ(topk_whole, topk_steps);
  for (int64_t p = 0; p < kSeqLen; ++p) {
    const int64_t visible = (p + 1) / 4;
    const int64_t want = std::min(k, visible);
    std::set<int32_t> seen;
    for (int64_t j = 0; j < k; ++j) {
      const int32_t t = topk_whole[static_cast<size_t>(p * k + j)];
      if (j < want) {
        EXPECT_GE(t, 0);
        EXPECT_LT(t, visible);
        EXPECT_TRUE(seen.insert(t).second) << "duplicate entry at p=" << p;
        if (j > 0) {
          EXPECT_LT(topk_whole[static_cast<size_t>(p * k + j - 1)], t);  // ascending
        }
      } else {
        EXPECT_EQ(t, -1);
      }
    }
    if (visible <= k) {
      EXPECT_EQ(static_cast<int64_t>(seen.size()), visible);  // all of them
    }
  }
}

TEST_F(AttentionTest, RewindWithinSlackLeavesNoTrace) {
  // With 3 rows of slack, every layer kind can re-run its last 3 positions
  // (rejected speculative tokens): decode-like steps that first run 3 wrong
  // tokens, then re-run 2 true ones from the same position, must equal the
  // straight run, across CSA/HCA block boundaries (positions 120..170).
  const int64_t d = cfg_->hidden_size;
  const int64_t n = 170, n0 = 120, slack = 3;
  for (int64_t layer : {0, 2, 3, 6}) {
    SCOPED_TRACE("layer " + std::to_string(layer));
    auto attn = LoadLayer(layer);
    ASSERT_NE(attn, nullptr);
    const auto x = RandomInput(n, 505);
    const auto junk = RandomInput(slack, 606);
    const auto want = RunChunked(*attn, x, n, {n});
    auto cache = attn->NewCache(1, cfg_->sliding_window + slack);
    std::vector<bf16> out(static_cast<size_t>(n * d)), junk_out(junk.size());
    ForwardBatch first;
    first.Add(0, 0, std::vector<int32_t>(static_cast<size_t>(n0), 0));
    attn->Forward(x.data(), first, *cache, out.data(), ws_, nullptr);
    for (int64_t pos = n0; pos < n; pos += 2) {
      ForwardBatch astray;
      astray.Add(0, pos, std::vector<int32_t>(static_cast<size_t>(slack), 0));
      attn->Forward(junk.data(), astray, *cache, junk_out.data(), ws_, nullptr);
      EXPECT_TRUE(cache->CanContinueAt(0, pos));
      EXPECT_FALSE(cache->CanContinueAt(0, pos - 1));
      ForwardBatch redo;
      redo.Add(0, pos, {0, 0});
      attn->Forward(x.data() + pos * d, redo, *cache, out.data() + pos * d, ws_, nullptr);
    }
    EXPECT_EQ(BitDiffs(out, want), 0);
    EXPECT_EQ(cache->NumCompressed(0), layer == 2 ? n / 4 : layer == 3 ? n / 128 : 0);
  }
}

TEST_F(AttentionTest, CacheGeometryAndBytes) {
  auto csa = LoadLayer(2);
  auto hca = LoadLayer(3);
  ASSERT_NE(csa, nullptr);
  ASSERT_NE(hca, nullptr);
  const int64_t d = cfg_->head_dim, di = cfg_->index_head_dim, w = cfg_->sliding_window;
  EXPECT_EQ(csa->NewCache(2)->FixedBytesPerSlot(),
            static_cast<size_t>(2 * w * d + 2 * 4 * (8 * 2 * d) + 2 * 4 * (8 * 2 * di)));
  EXPECT_EQ(csa->NewCache(2, w + 1)->FixedBytesPerSlot(),
            static_cast<size_t>(2 * (w + 1) * d + 2 * 4 * (9 * 2 * d) + 2 * 4 * (9 * 2 * di)));
  EXPECT_EQ(hca->NewCache(2)->FixedBytesPerSlot(),
            static_cast<size_t>(2 * w * d + 2 * 4 * (128 * d)));
  auto cache = csa->NewCache(1);
  const auto x = RandomInput(37, 707);
  ForwardBatch batch;
  batch.Add(0, 0, std::vector<int32_t>(37, 0));
  std::vector<bf16> out(x.size());
  csa->Forward(x.data(), batch, *cache, out.data(), ws_, nullptr);
  EXPECT_EQ(cache->NumCompressed(0), 9);
  EXPECT_EQ(cache->NumIndexKeys(0), 9);
}

TEST_F(AttentionTest, LoadRejectsBadLayer) {
  auto bad = Attention::Load(*ckpt_, *cfg_, 99, "layers.99.", store_);
  EXPECT_FALSE(bad.ok());
  auto missing = Attention::Load(*ckpt_, *cfg_, 2, "layers.17.", store_);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("layers.17.attn"), std::string::npos);
}

}  // namespace
}  // namespace dsv4::model
