// The attention sub-layer against the tiny-a whole-model goldens where they
// observe it directly: the indexer's selections (`*.indexer_topk`) of the CSA
// layers 2 and 4, in isolated-layer runs fed with the stored input streams of
// the layer (golden README §7).  The attention input is rebuilt from those
// streams with the mHC kernels (hc_pre) and attn_norm, as the block does.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/model_config.h"
#include "kernels/mhc.h"
#include "kernels/norm.h"
#include "model/attention.h"
#include "testing/golden.h"

namespace dsv4::model {
namespace {

class AttentionGoldenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = testing::TestDataPath("golden/tiny-a");
    auto cfg = checkpoint::LoadModelConfig(dir);
    ASSERT_TRUE(cfg.ok()) << cfg.status().message();
    cfg_ = *cfg;
    auto ckpt = checkpoint::Checkpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
    ckpt_ = std::move(ckpt).value();
    golden_ = testing::OpenGolden("golden/tiny-a/golden.safetensors");
    ASSERT_NE(golden_, nullptr);
  }

  // x = attn_norm(hc_pre(streams)) for streams [n, hc, D] (docs/model.md "Block and mHC").
  std::vector<bf16> AttentionInput(int64_t layer, const std::vector<bf16>& streams, int64_t n) {
    const int64_t d = cfg_.hidden_size, hc = cfg_.hc_mult, mix = cfg_.hc_mix();
    const std::string p = "layers." + std::to_string(layer) + ".";
    auto f32 = [&](const std::string& name) {
      const TensorView* t = ckpt_->Find(name);
      EXPECT_NE(t, nullptr) << name;
      std::vector<float> v(static_cast<size_t>(t->numel()));
      std::memcpy(v.data(), t->data, t->nbytes());
      return v;
    };
    const auto fn = f32(p + "hc_attn_fn");
    const auto base = f32(p + "hc_attn_base");
    const auto scale = f32(p + "hc_attn_scale");
    const TensorView* norm_t = ckpt_->Find(p + "attn_norm.weight");
    std::vector<bf16> norm(static_cast<size_t>(d));
    std::memcpy(norm.data(), norm_t->data, norm_t->nbytes());
    std::vector<float> mixes(static_cast<size_t>(n * mix)), pre(static_cast<size_t>(n * hc)),
        post(pre.size()), comb(static_cast<size_t>(n * hc * hc));
    const auto eps = static_cast<float>(cfg_.rms_norm_eps);
    kernels::HcMixes(streams.data(), n, hc * d, fn.data(), mix, eps, mixes.data(), nullptr);
    kernels::HcSplitSinkhorn(mixes.data(), n, hc, scale.data(), base.data(), cfg_.hc_sinkhorn_iters,
                             static_cast<float>(cfg_.hc_eps), pre.data(), post.data(), comb.data(),
                             nullptr);
    std::vector<bf16> a(static_cast<size_t>(n * d)), x(a.size());
    kernels::HcWeightedSum(streams.data(), n, hc, d, pre.data(), a.data(), nullptr);
    kernels::RmsNorm(a.data(), n, d, norm.data(), eps, x.data());
    return x;
  }

  // Rows [row0, row0 + n) of a [rows, width] tensor stored in `all`.
  static std::vector<bf16> Rows(const std::vector<bf16>& all, int64_t width, int64_t row0,
                                int64_t n) {
    return std::vector<bf16>(all.begin() + row0 * width, all.begin() + (row0 + n) * width);
  }

  // Runs `layer` on n_prefill prefill rows then single decode steps; returns
  // the trace rows [rows, index_topk].
  std::vector<int32_t> RunLayer(int64_t layer, const std::vector<bf16>& x, int64_t n_prefill,
                                int64_t n_decode) {
    WeightStore store;  // outlives attn: its FP8 panel copies
    auto attn =
        Attention::Load(*ckpt_, cfg_, layer, "layers." + std::to_string(layer) + ".", store);
    EXPECT_TRUE(attn.ok()) << attn.status().message();
    store.PackDeferred(*ckpt_, 1);
    auto cache = (*attn)->NewCache(1);
    const int64_t d = cfg_.hidden_size;
    std::vector<int32_t> topk;
    std::vector<bf16> out(static_cast<size_t>(n_prefill * d));
    int64_t pos = 0;
    for (int64_t call = 0; call <= n_decode; ++call) {
      const int64_t s = call == 0 ? n_prefill : 1;
      ForwardBatch batch;
      batch.Add(0, pos, std::vector<int32_t>(static_cast<size_t>(s), 0));
      AttentionTrace trace;
      (*attn)->Forward(x.data() + pos * d, batch, *cache, out.data(), ws_, nullptr, &trace);
      topk.insert(topk.end(), trace.indexer_topk.begin(), trace.indexer_topk.end());
      pos += s;
    }
    return topk;
  }

  static int64_t EqualRows(const std::vector<int32_t>& got, const std::vector<int64_t>& want,
                           int64_t k) {
    int64_t equal = 0;
    for (size_t r = 0; r * static_cast<size_t>(k) < want.size(); ++r) {
      bool same = true;
      for (int64_t j = 0; j < k; ++j) {
        const size_t i = r * static_cast<size_t>(k) + static_cast<size_t>(j);
        same = same && got[i] == want[i];
      }
      equal += same ? 1 : 0;
    }
    return equal;
  }

  checkpoint::ModelConfig cfg_;
  std::unique_ptr<checkpoint::Checkpoint> ckpt_;
  std::unique_ptr<checkpoint::SafetensorsFile> golden_;
  Workspace ws_;
};

TEST_F(AttentionGoldenTest, IndexerTopkPrefill37) {
  const int64_t n = 37, d = cfg_.hidden_size, hc = cfg_.hc_mult, k = cfg_.index_topk;
  const auto streams = testing::ReadBf16(*golden_, "prefill37.layer_streams");  // [37, 6, hc, D]
  const auto want = testing::ReadI64(*golden_, "prefill37.indexer_topk");       // [2, 37, k]
  const int64_t layers = cfg_.num_hidden_layers;
  for (int64_t i = 0; i < 2; ++i) {
    const int64_t layer = i == 0 ? 2 : 4;
    SCOPED_TRACE("layer " + std::to_string(layer));
    std::vector<bf16> in(static_cast<size_t>(n * hc * d));  // block layer-1 outputs
    for (int64_t t = 0; t < n; ++t) {
      std::copy_n(streams.begin() + ((t * layers) + layer - 1) * hc * d, hc * d,
                  in.begin() + t * hc * d);
    }
    const auto got = RunLayer(layer, AttentionInput(layer, in, n), n, 0);
    const std::vector<int64_t> w(want.begin() + i * n * k, want.begin() + (i + 1) * n * k);
    EXPECT_EQ(EqualRows(got, w, k), n);
  }
}

TEST_F(AttentionGoldenTest, IndexerTopkPrefill300ThenDecode) {
  const int64_t n = 300, steps = 20, d = cfg_.hidden_size, hc = cfg_.hc_mult;
  const int64_t k = cfg_.index_topk, layers = cfg_.num_hidden_layers;
  // layer_streams_sel holds blocks [1, 2, 3, 5]: block 1 feeds layer 2, block 3 layer 4.
  const auto sel = testing::ReadBf16(*golden_, "prefill300.layer_streams_sel");  // [4, 300, hc, D]
  const auto dec = testing::ReadBf16(*golden_, "decode.layer_streams");          // [20, 6, hc, D]
  const auto want_p = testing::ReadI64(*golden_, "prefill300.indexer_topk");     // [2, 300, k]
  const auto want_d = testing::ReadI64(*golden_, "decode.indexer_topk");         // [20, 2, k]
  for (int64_t i = 0; i < 2; ++i) {
    const int64_t layer = i == 0 ? 2 : 4;
    const int64_t sel_index = i == 0 ? 0 : 2;
    SCOPED_TRACE("layer " + std::to_string(layer));
    std::vector<bf16> in = Rows(sel, hc * d, sel_index * n, n);
    for (int64_t t = 0; t < steps; ++t) {
      const auto row = Rows(dec, hc * d, t * layers + layer - 1, 1);
      in.insert(in.end(), row.begin(), row.end());
    }
    const auto got = RunLayer(layer, AttentionInput(layer, in, n + steps), n, steps);
    const std::vector<int64_t> wp(want_p.begin() + i * n * k, want_p.begin() + (i + 1) * n * k);
    std::vector<int64_t> wd;
    for (int64_t t = 0; t < steps; ++t) {
      wd.insert(wd.end(), want_d.begin() + (t * 2 + i) * k, want_d.begin() + (t * 2 + i + 1) * k);
    }
    const std::vector<int32_t> got_p(got.begin(), got.begin() + n * k);
    const std::vector<int32_t> got_d(got.begin() + n * k, got.end());
    // Selections flip at exact-tie and FP8-boundary cases under summation-order
    // noise: golden README §7 reports 299/300 identical rows for block 2 under
    // FP64 accumulation.  Measured here: 299 (layer 2) and 300 (layer 4) with the
    // SIMD kernels, 295 on layer 4 with DSV4_ISA=scalar (other sum orders).
    EXPECT_GE(EqualRows(got_p, wp, k), n * 97 / 100);
    EXPECT_GE(EqualRows(got_d, wd, k), steps - 1);
  }
}

}  // namespace
}  // namespace dsv4::model
