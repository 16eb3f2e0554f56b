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

namespace dsv4::model {
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

void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

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
    comp_ =
        Compressor::FromData(spec, wkv.data(), wgate.data(), ape.data(), norm.data(), freqs.data());
  }

  // Runs the whole sequence split into calls of the given sizes (the last
  // size repeats), returning all emitted entries [n/ratio, d].
  std::vector<bf16> RunSplit(const std::vector<int64_t>& sizes, int64_t slack = 0) {
    const int64_t d = GetParam().head_dim;
    const int64_t rows = comp_->min_state_rows() + slack;
    std::vector<float> state_kv(static_cast<size_t>(rows * comp_->state_width()));
    std::vector<float> state_score(state_kv.size());
    const Compressor::State state{state_kv.data(), state_score.data(), rows};
    comp_->ResetState(state);
    std::vector<bf16> entries(static_cast<size_t>((n_ / GetParam().ratio + 1) * d));
    int64_t pos = 0;
    int64_t emitted = 0;
    size_t k = 0;
    while (pos < n_) {
      const int64_t s = std::min(sizes[std::min(k, sizes.size() - 1)], n_ - pos);
      ++k;
      const int64_t e = comp_->Forward(x_.data() + pos * dim_, pos, s, state,
                                       entries.data() + emitted * d, ws_, nullptr);
      EXPECT_EQ(e, Compressor::NumEmitted(GetParam().ratio, pos, s));
      emitted += e;
      pos += s;
    }
    EXPECT_EQ(emitted, n_ / GetParam().ratio);
    entries.resize(static_cast<size_t>(emitted * d));
    return entries;
  }

  std::unique_ptr<checkpoint::SafetensorsFile> file_;
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
  std::vector<float> skv(static_cast<size_t>(comp_->min_state_rows() * width)), ssc(skv.size());
  const Compressor::State state{skv.data(), ssc.data(), comp_->min_state_rows()};
  comp_->ResetState(state);
  std::vector<bf16> pooled(want.size());
  const int64_t e = comp_->Absorb(kv.data(), score.data(), 0, n_, state, pooled.data());
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
  const auto want =
      ReadBf16(*file_, "compressor." + v.name + ".s" + std::to_string(v.scenarios[0]) + ".entries");
  const std::vector<std::vector<int64_t>> splits = {{1}, {3}, {7}, {n_}, {2, 5, 1, 9}, {130, 7}};
  for (const auto& split : splits) {
    SCOPED_TRACE("first chunk " + std::to_string(split[0]));
    const auto got = RunSplit(split);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(CountBitDiffs(got, want), 0);
  }
}

TEST_P(CompressorGoldenTest, LargerStateRingGivesSameEntries) {
  const Variant& v = GetParam();
  const auto want =
      ReadBf16(*file_, "compressor." + v.name + ".s" + std::to_string(v.scenarios[0]) + ".entries");
  EXPECT_EQ(CountBitDiffs(RunSplit({1}, 5), want), 0);
  EXPECT_EQ(CountBitDiffs(RunSplit({7}, 3), want), 0);
}

// Re-running the last `slack` positions with other inputs first (rejected
// speculative tokens) then the true ones gives the golden entries.
TEST_P(CompressorGoldenTest, RewindWithinSlackLeavesNoTrace) {
  const Variant& v = GetParam();
  const int64_t d = v.head_dim;
  const auto want =
      ReadBf16(*file_, "compressor." + v.name + ".s" + std::to_string(v.scenarios[0]) + ".entries");
  const int64_t slack = 3;
  const int64_t rows = comp_->min_state_rows() + slack;
  std::vector<float> skv(static_cast<size_t>(rows * comp_->state_width())), ssc(skv.size());
  const Compressor::State state{skv.data(), ssc.data(), rows};
  comp_->ResetState(state);
  std::vector<bf16> entries(static_cast<size_t>((n_ / v.ratio) * d));
  std::vector<bf16> junk(static_cast<size_t>((slack / v.ratio + 2) * d));
  // Reversed rows as wrong inputs.
  std::vector<bf16> wrong(x_.rbegin(), x_.rend());
  int64_t pos = 0;
  while (pos < n_) {
    const int64_t s = std::min<int64_t>(2, n_ - pos);
    // Speculate: run `slack` wrong tokens from pos, then rewind to pos.
    const int64_t spec = std::min(slack, n_ - pos);
    comp_->Forward(wrong.data() + pos * dim_, pos, spec, state, junk.data(), ws_, nullptr);
    const int64_t first = Compressor::FirstEmitted(v.ratio, pos);
    comp_->Forward(x_.data() + pos * dim_, pos, s, state, entries.data() + first * d, ws_, nullptr);
    pos += s;
  }
  EXPECT_EQ(CountBitDiffs(entries, want), 0);
}

INSTANTIATE_TEST_SUITE_P(Ops, CompressorGoldenTest,
                         ::testing::Values(Variant{"r4_attn", 4, 512, false, {13, 3, 8}},
                                           Variant{"r4_index", 4, 128, true, {13, 3, 8}},
                                           Variant{"r128_attn", 128, 512, false, {130, 5, 256}}),
                         [](const ::testing::TestParamInfo<Variant>& param_info) {
                           return param_info.param.name;
                         });

}  // namespace
}  // namespace dsv4::model
