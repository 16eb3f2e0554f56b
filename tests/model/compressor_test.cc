// Compressor against the ops goldens (golden/ops §14), in the golden's
// scenarios (prefill of S0 tokens, then single tokens) and in other splits of
// the same sequence, which must emit bit-identical entries.
#include "model/compressor.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/rope.h"
#include "testing/golden.h"

namespace dsv4 {
namespace {

using testing::OpenGolden;
using testing::ReadBf16;
using testing::ReadF32;

struct Variant {
  std::string name;
  int64_t ratio;
  int64_t head_dim;
  bool rotate;
  std::vector<int64_t> scenarios;
};

class CompressorGoldenTest : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    file_ = OpenGolden("golden/ops/ops.safetensors");
    ASSERT_NE(file_, nullptr);
    const Variant& v = GetParam();
    const std::string p = "compressor." + v.name + ".";
    Shape xs;
    x_ = ReadBf16(*file_, p + "x", &xs);
    n_ = xs[0];
    dim_ = xs[1];
    CompressorSpec spec;
    spec.ratio = v.ratio;
    spec.dim = dim_;
    spec.head_dim = v.head_dim;
    spec.rope_dim = 64;
    spec.rotate = v.rotate;
    kernels::YarnParams yarn;
    yarn.enabled = true;
    std::vector<float> freqs(32);
    kernels::RopeFrequencies(160000, 64, yarn, freqs.data());
    const auto wkv = ReadBf16(*file_, p + "wkv");
    const auto wgate = ReadBf16(*file_, p + "wgate");
    const auto ape = ReadF32(*file_, p + "ape");
    const auto norm = ReadBf16(*file_, p + "norm");
    comp_ = Compressor::FromData(spec, wkv.data(), wgate.data(), ape.data(), norm.data(),
                                 freqs.data());
  }

  // Runs the whole sequence split into calls of the given sizes (the last
  // size repeats), returning all emitted entries [n/ratio, d].
  std::vector<bf16> RunSplit(const std::vector<int64_t>& sizes) {
    const int64_t d = GetParam().head_dim;
    const int64_t rows = comp_->state_rows() * comp_->state_width();
    std::vector<float> state_kv(static_cast<size_t>(rows));
    std::vector<float> state_score(static_cast<size_t>(rows));
    comp_->ResetState(state_kv.data(), state_score.data());
    std::vector<bf16> entries(static_cast<size_t>((n_ / GetParam().ratio + 1) * d));
    int64_t pos = 0;
    int64_t emitted = 0;
    size_t k = 0;
    while (pos < n_) {
      const int64_t s = std::min(sizes[std::min(k, sizes.size() - 1)], n_ - pos);
      ++k;
      const int64_t e = comp_->Forward(x_.data() + pos * dim_, pos, s, state_kv.data(),
                                       state_score.data(), entries.data() + emitted * d, ws_,
                                       nullptr);
      EXPECT_EQ(e, Compressor::NumEmitted(GetParam().ratio, pos, s));
      emitted += e;
      pos += s;
    }
    EXPECT_EQ(emitted, n_ / GetParam().ratio);
    entries.resize(static_cast<size_t>(emitted * d));
    return entries;
  }

  std::unique_ptr<SafetensorsFile> file_;
  std::vector<bf16> x_;
  int64_t n_ = 0;
  int64_t dim_ = 0;
  std::unique_ptr<Compressor> comp_;
  Workspace ws_;
};

int64_t CountBitDiffs(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  return testing::CountUlpDiffs(a, b, 0);
}

TEST_P(CompressorGoldenTest, PooledMatchesGoldenInOneShot) {
  const Variant& v = GetParam();
  const std::string p = "compressor." + v.name + ".s" + std::to_string(v.scenarios[0]) + ".";
  const auto want = ReadBf16(*file_, p + "pooled");
  const int64_t width = comp_->state_width();
  std::vector<float> kv(static_cast<size_t>(n_ * width)), score(kv.size());
  comp_->Project(x_.data(), n_, kv.data(), score.data(), nullptr);
  std::vector<float> skv(static_cast<size_t>(comp_->state_rows() * width)), ssc(skv.size());
  comp_->ResetState(skv.data(), ssc.data());
  std::vector<bf16> pooled(want.size());
  const int64_t e = comp_->Absorb(kv.data(), score.data(), 0, n_, skv.data(), ssc.data(),
                                  pooled.data(), ws_);
  ASSERT_EQ(e * v.head_dim, static_cast<int64_t>(want.size()));
  EXPECT_EQ(CountBitDiffs(pooled, want), 0);
}

TEST_P(CompressorGoldenTest, GoldenScenariosBitExact) {
  const Variant& v = GetParam();
  for (int64_t s0 : v.scenarios) {
    SCOPED_TRACE("S0 = " + std::to_string(s0));
    const auto want =
        ReadBf16(*file_, "compressor." + v.name + ".s" + std::to_string(s0) + ".entries");
    const auto got = RunSplit({s0, 1});
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(CountBitDiffs(got, want), 0);
  }
}

TEST_P(CompressorGoldenTest, OtherSplitsBitIdentical) {
  const Variant& v = GetParam();
  const auto want = ReadBf16(
      *file_, "compressor." + v.name + ".s" + std::to_string(v.scenarios[0]) + ".entries");
  const std::vector<std::vector<int64_t>> splits = {{1}, {3}, {7}, {n_}, {2, 5, 1, 9}, {130, 7}};
  for (const auto& split : splits) {
    SCOPED_TRACE("first chunk " + std::to_string(split[0]));
    const auto got = RunSplit(split);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(CountBitDiffs(got, want), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Ops, CompressorGoldenTest,
    ::testing::Values(Variant{"r4_attn", 4, 512, false, {13, 3, 8}},
                      Variant{"r4_index", 4, 128, true, {13, 3, 8}},
                      Variant{"r128_attn", 128, 512, false, {130, 5, 256}}),
    [](const ::testing::TestParamInfo<Variant>& param_info) { return param_info.param.name; });

}  // namespace
}  // namespace dsv4
