// What dsv4 bench counts and measures besides the triad (apps/dsv4/bench_costs.h,
// peak_compute.h, bench_print.h): decode weight bytes from the routing,
// prefill FLOPs per token on tiny-a, and the peak-compute passes.
#include "bench_costs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "base/cpu_features.h"
#include "bench_print.h"
#include "kernels/attention.h"
#include "kernels/dispatch.h"
#include "kernels/gemm.h"
#include "peak_compute.h"
#include "testing/golden.h"

namespace dsv4::cli {
namespace {

class BenchCostsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto m = model::Model::Load(testing::TestDataPath("golden/tiny-a"));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value().release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  static inline model::Model* model_ = nullptr;
};

TEST_F(BenchCostsTest, MeasuredBytesAreDenseThenTheTouchedExperts) {
  const checkpoint::ModelConfig& cfg = model_->config();
  const DecodeWeightBytes w = CountDecodeWeightBytes(*model_);
  ASSERT_EQ(std::ssize(w.per_expert), cfg.num_hidden_layers);
  for (double b : w.per_expert) EXPECT_GT(b, 0);
  // tiny-a: hidden 256, inter 128, FP4 (half a byte + an E8M0 per 32).
  const double expert = 3.0 * 128 * 256 * (0.5 + 1.0 / 32);
  EXPECT_DOUBLE_EQ(w.per_expert[0], expert);
  EXPECT_DOUBLE_EQ(w.embed_row, 256 * 2);
  const double all_experts = std::accumulate(w.per_expert.begin(), w.per_expert.end(), 0.0);
  const int64_t k = cfg.num_experts_per_tok;
  EXPECT_DOUBLE_EQ(w.EstimatePerToken(k),
                   w.dense + all_experts * static_cast<double>(k) + w.embed_row);

  model::ExpertUsage usage(cfg.num_layers_with_mtp(), cfg.n_routed_experts);
  EXPECT_DOUBLE_EQ(w.Step(usage, 0), w.dense);
  // k experts per layer and one row: the estimate.
  std::vector<int32_t> first_k(static_cast<size_t>(k));
  std::iota(first_k.begin(), first_k.end(), 0);
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) usage.layer(l).Mark(first_k.data(), k);
  EXPECT_DOUBLE_EQ(w.Step(usage, 1), w.EstimatePerToken(k));
  // Every expert of layer 0 and three rows.
  std::vector<int32_t> all(static_cast<size_t>(cfg.n_routed_experts));
  std::iota(all.begin(), all.end(), 0);
  usage.layer(0).Mark(all.data(), std::ssize(all));
  EXPECT_DOUBLE_EQ(w.Step(usage, 3), w.EstimatePerToken(k) +
                                         static_cast<double>(cfg.n_routed_experts - k) * expert +
                                         2 * w.embed_row);
}

TEST_F(BenchCostsTest, PrefillFlopsCountEveryMatmulOnce) {
  const checkpoint::ModelConfig& cfg = model_->config();
  const PrefillFlops one = CountPrefillFlops(*model_, 1);
  const double layers = static_cast<double>(cfg.num_hidden_layers);
  const double d = static_cast<double>(cfg.hidden_size);
  // Routed experts: top_k of them, w1, w3, w2 of inter x hidden each
  // (FP4 bytes hold two weights), the only INT8-dot FLOPs of this checkpoint
  // unless its FP4 GEMMs run on BF16 dot products (every expert's scales fit
  // that kernel here, so the first one tells).
  const double routed = layers * 2 * 3 * d * static_cast<double>(cfg.moe_intermediate_size) *
                        static_cast<double>(cfg.num_experts_per_tok);
  const TensorView* w1 = model_->checkpoint().Find("layers.0.ffn.experts.0.w1.weight");
  const TensorView* s1 = model_->checkpoint().Find("layers.0.ffn.experts.0.w1.scale");
  ASSERT_NE(w1, nullptr);
  ASSERT_NE(s1, nullptr);
  const bool fp4_dots = kernels::Fp4GemmUsesBf16Dots(
      {w1->as<uint8_t>(), s1->as<uint8_t>(), w1->dim(0), 2 * w1->dim(1)});
  EXPECT_DOUBLE_EQ(one.routed_experts, routed);
  EXPECT_DOUBLE_EQ(one.by_mix[static_cast<size_t>(kernels::PeakMix::kInt8Dot)],
                   fp4_dots ? 0 : routed);
  // The FP8 linears, wo_a included, count as BF16 dot products where the
  // FP8 GEMM runs on that kernel, else as FP32 FMAs; so does the attention
  // core where it runs on BF16 dot products.
  double fp8 = 0;
  for (const std::string& name : model_->checkpoint().Names()) {
    const TensorView* v = model_->checkpoint().Find(name);
    if (v->dtype == DType::kF8E4M3 && name.rfind("layers.", 0) == 0) {
      fp8 += 2 * static_cast<double>(v->numel());
    }
  }
  EXPECT_GT(fp8, 0);
  EXPECT_DOUBLE_EQ(one.by_mix[static_cast<size_t>(kernels::PeakMix::kBf16Dot)],
                   (kernels::Fp8GemmUsesBf16Dots() ? fp8 : 0) +
                       (kernels::SparseAttentionUsesBf16Dots() ? one.attention : 0) +
                       (fp4_dots ? routed : 0));
  const kernels::Isa isa = kernels::ActiveIsa();
  kernels::SetIsaForTesting(kernels::Isa::kAvx2);
  EXPECT_EQ(CountPrefillFlops(*model_, 1).by_mix[static_cast<size_t>(kernels::PeakMix::kBf16Dot)],
            0);
  kernels::SetIsaForTesting(isa);
  // Position 0 attends one entry (itself) in every layer; no compressed key yet.
  EXPECT_DOUBLE_EQ(one.attention, layers * 4 * static_cast<double>(cfg.num_attention_heads) *
                                      static_cast<double>(cfg.head_dim));
  EXPECT_EQ(one.indexer_scores, 0);
  // The head (vocab x hidden) and hc_head (hc x hc·hidden) for the one row.
  const double hc = static_cast<double>(cfg.hc_mult);
  EXPECT_DOUBLE_EQ(one.head, 2 * static_cast<double>(cfg.vocab_size) * d + 2 * hc * hc * d);

  // Longer prompts: the dense linears per token stay, the head spreads over
  // the tokens, attention and the indexer grow with the context.
  const PrefillFlops many = CountPrefillFlops(*model_, 64);
  auto dense = [](const PrefillFlops& f) {
    return f.total() - f.routed_experts - f.attention - f.indexer_scores - f.head;
  };
  EXPECT_NEAR(dense(many), dense(one), 1e-6 * dense(one));
  EXPECT_GT(dense(one), 0);
  EXPECT_DOUBLE_EQ(many.head, one.head / 64);
  EXPECT_GT(many.attention, one.attention);
  EXPECT_GT(many.indexer_scores, 0);
}

TEST(PeakComputeTest, EveryPassRunsOnEveryThread) {
  ThreadPool pool(2);
  const std::vector<PeakRate> rates = MeasurePeakCompute(&pool, 3, 0.002);
  ASSERT_EQ(std::ssize(rates), kernels::kNumPeakMixes);
  for (const PeakRate& r : rates) {
    SCOPED_TRACE(std::string(kernels::PeakMixName(r.mix)));
    EXPECT_EQ(r.threads, 2);
    if (r.instruction.empty()) {
      EXPECT_EQ(r.mix, kernels::PeakMix::kBf16Dot);
      EXPECT_EQ(FindPeak(rates, r.mix), nullptr);
      continue;
    }
    EXPECT_TRUE(std::isfinite(r.best_gflops));
    EXPECT_GT(r.median_gflops, 0);
    EXPECT_GE(r.best_gflops, r.median_gflops);
    EXPECT_EQ(FindPeak(rates, r.mix), &r);
  }
  const bool bf16 =
      kernels::ActiveIsa() == kernels::Isa::kAvx512 && CpuFeatures::Detect().avx512bf16;
  EXPECT_EQ(rates[2].instruction.empty(), !bf16);
}

TEST(BenchPrintTest, MixWeightedShareIsTheIdealOverTheTakenTime) {
  std::vector<PeakRate> rates(2);
  rates[0].mix = kernels::PeakMix::kFp32Fma;
  rates[0].median_gflops = 100;
  rates[1].mix = kernels::PeakMix::kInt8Dot;
  rates[1].median_gflops = 400;
  PrefillFlops f;
  f.by_mix[0] = 1e9;                                         // 10 ms at its peak
  f.by_mix[1] = 2e9;                                         // 5 ms
  EXPECT_NEAR(MixWeightedShare(10, f, rates), 0.15, 1e-12);  // 15 ms of the 100 ms per token
  f.by_mix[2] = 1;                                           // a mix without a peak: no figure
  EXPECT_EQ(MixWeightedShare(10, f, rates), 0);
  EXPECT_NE(FormatPrefillCompute(128, 10, f, rates).find("prefill compute at 128 tokens"),
            std::string::npos);
  // Every mix's FLOPs are listed, the BF16 dot products' too (the FP8 GEMMs).
  f.by_mix[2] = 3e9;
  EXPECT_NE(FormatPrefillCompute(128, 10, f, rates).find("(fp32 fma 1, int8 dot 2, bf16 dot 3;"),
            std::string::npos)
      << FormatPrefillCompute(128, 10, f, rates);
}

}  // namespace
}  // namespace dsv4::cli
