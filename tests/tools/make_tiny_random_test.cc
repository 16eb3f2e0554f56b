#include "tools/make_tiny_random.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include "tensor/numeric.h"

namespace dsv4::tools {
namespace {

bool IsNanE4M3(int code) { return (code & 0x7F) == 0x7F; }

TEST(MakeTinyRandom, E4M3RoundTripsEveryCode) {
  for (int c = 0; c < 256; ++c) {
    if (IsNanE4M3(c)) continue;
    EXPECT_EQ(EncodeE4M3(E4M3ToF32(static_cast<uint8_t>(c))), c) << "code " << c;
  }
}

TEST(MakeTinyRandom, E4M3RoundsToNearestEvenAndSaturates) {
  // Between neighbouring positive codes the midpoint goes to the even code,
  // a hair above it to the upper one.
  for (int c = 0; c < 0x7E; ++c) {
    const float lo = E4M3ToF32(static_cast<uint8_t>(c));
    const float hi = E4M3ToF32(static_cast<uint8_t>(c + 1));
    const float mid = (lo + hi) / 2;  // exact: one more mantissa bit
    EXPECT_EQ(EncodeE4M3(mid), (c % 2 == 0) ? c : c + 1) << "code " << c;
    EXPECT_EQ(EncodeE4M3(std::nextafter(mid, 1000.0f)), c + 1) << "code " << c;
    EXPECT_EQ(EncodeE4M3(std::nextafter(mid, 0.0f)), c) << "code " << c;
    EXPECT_EQ(EncodeE4M3(-mid), 0x80 | ((c % 2 == 0) ? c : c + 1)) << "code " << c;
  }
  EXPECT_EQ(EncodeE4M3(448.0f), 0x7E);
  EXPECT_EQ(EncodeE4M3(470.0f), 0x7E);
  EXPECT_EQ(EncodeE4M3(1e30f), 0x7E);
  EXPECT_EQ(EncodeE4M3(-1e30f), 0xFE);
  EXPECT_EQ(EncodeE4M3(-1e-30f), 0x80);  // negative zero
}

TEST(MakeTinyRandom, E2M1RoundsToNearestEvenAndSaturates) {
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(EncodeE2M1(E2M1ToF32(static_cast<uint8_t>(c))), c) << "code " << c;
  }
  for (int c = 0; c < 7; ++c) {
    const float mid =
        (E2M1ToF32(static_cast<uint8_t>(c)) + E2M1ToF32(static_cast<uint8_t>(c + 1))) / 2;
    EXPECT_EQ(EncodeE2M1(mid), (c % 2 == 0) ? c : c + 1) << "code " << c;
    EXPECT_EQ(EncodeE2M1(std::nextafter(mid, 100.0f)), c + 1) << "code " << c;
    EXPECT_EQ(EncodeE2M1(std::nextafter(mid, 0.0f)), c) << "code " << c;
  }
  EXPECT_EQ(EncodeE2M1(7.0f), 7);
  EXPECT_EQ(EncodeE2M1(-100.0f), 0xF);
  EXPECT_EQ(EncodeE2M1(-0.1f), 0x8);
}

TEST(MakeTinyRandom, NormalMomentsAndBounds) {
  const uint64_t key = StreamKey(7, "x");
  const int n = 1 << 20;
  double sum = 0, sum2 = 0, sum4 = 0;
  float lo = 0, hi = 0;
  for (int i = 0; i < n; ++i) {
    const float v = NormalFromBits(RandomBits(key, static_cast<uint64_t>(i)));
    sum += v;
    sum2 += double{v} * v;
    sum4 += double{v} * v * v * v;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  const double mean = sum / n, var = sum2 / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 3e-3);
  EXPECT_NEAR(var, 1.0, 5e-3);
  EXPECT_NEAR(sum4 / n, 2.7, 0.02);  // Irwin-Hall(4): kurtosis 3 - 6/(5*4)
  EXPECT_GT(lo, -3.47f);
  EXPECT_LT(hi, 3.47f);
  EXPECT_LT(lo, -3.0f);
  EXPECT_GT(hi, 3.0f);
}

TEST(MakeTinyRandom, StreamsDependOnSeedAndName) {
  EXPECT_EQ(StreamKey(1, "layers.0.attn.wq_a"), StreamKey(1, "layers.0.attn.wq_a"));
  EXPECT_NE(StreamKey(1, "layers.0.attn.wq_a"), StreamKey(2, "layers.0.attn.wq_a"));
  EXPECT_NE(StreamKey(1, "layers.0.attn.wq_a"), StreamKey(1, "layers.1.attn.wq_a"));
  // Pinned values: the generator is part of the file format contract
  // (same seed -> same bytes on every platform).
  EXPECT_EQ(RandomBits(0, 0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(StreamKey(0, ""), RandomBits(0xCBF29CE484222325ull, 0));
}

checkpoint::ModelConfig SmallConfig() {
  checkpoint::ModelConfig cfg;
  cfg.hidden_size = 256;
  cfg.n_routed_experts = 8;
  return cfg;
}

checkpoint::WeightSpec Spec(std::string name, DType dtype, Shape shape,
                            checkpoint::WeightSpec::Kind kind, Shape logical = {}) {
  checkpoint::WeightSpec s;
  s.name = std::move(name);
  s.dtype = dtype;
  s.logical_shape = logical.empty() ? shape : logical;
  s.shape = std::move(shape);
  s.kind = kind;
  return s;
}

std::vector<uint8_t> Generate(const checkpoint::WeightSpec& spec, uint64_t seed,
                              int64_t split = 0) {
  TensorGenerator g(spec, SmallConfig(), seed);
  std::vector<uint8_t> out(static_cast<size_t>(g.num_rows()) * g.row_bytes());
  if (split <= 0) {
    g.FillRows(0, g.num_rows(), out.data());
  } else {
    // Any row split gives the same bytes (what parallel generation relies on).
    for (int64_t r = 0; r < g.num_rows(); r += split) {
      const int64_t e = std::min(g.num_rows(), r + split);
      g.FillRows(r, e, out.data() + static_cast<size_t>(r) * g.row_bytes());
    }
  }
  return out;
}

TEST(MakeTinyRandom, Fp8WeightsMatchTheirScales) {
  const checkpoint::WeightSpec w = Spec("layers.0.attn.wq_b.weight", DType::kF8E4M3, {512, 128},
                                        checkpoint::WeightSpec::kFp8Weight);
  const checkpoint::WeightSpec s = Spec("layers.0.attn.wq_b.scale", DType::kF8E8M0, {4, 1},
                                        checkpoint::WeightSpec::kFp8Scale, {512, 128});
  const std::vector<uint8_t> codes = Generate(w, 3);
  EXPECT_EQ(codes, Generate(w, 3, 7));
  EXPECT_NE(codes, Generate(w, 4));
  const std::vector<uint8_t> scales = Generate(s, 3);
  ASSERT_EQ(scales.size(), 4u);
  for (int64_t b = 0; b < 4; ++b) {
    const int e = scales[static_cast<size_t>(b)] - 127;
    // σ = 128^-0.5: 2^e0 >= 8σ/448 gives e0 = -9, so e in -9..-6 (as tiny-a).
    EXPECT_GE(e, -9);
    EXPECT_LE(e, -6);
    double sum2 = 0;
    int amax = 0;
    for (int64_t i = b * 128 * 128; i < (b + 1) * 128 * 128; ++i) {
      const uint8_t c = codes[static_cast<size_t>(i)];
      ASSERT_FALSE(IsNanE4M3(c));
      const double v = E4M3ToF32(c) * std::ldexp(1.0, e);
      sum2 += v * v;
      amax = std::max(amax, c & 0x7F);
    }
    EXPECT_NEAR(std::sqrt(sum2 / (128 * 128)) * std::sqrt(128.0), 1.0, 0.03);
    EXPECT_LT(amax, 0x7E);  // no saturation
  }
}

TEST(MakeTinyRandom, Fp4ExpertsPackEvenElementsLow) {
  const checkpoint::WeightSpec w = Spec("layers.0.ffn.experts.1.w2.weight", DType::kI8, {256, 64},
                                        checkpoint::WeightSpec::kFp4Weight, {256, 128});
  const checkpoint::WeightSpec s = Spec("layers.0.ffn.experts.1.w2.scale", DType::kF8E8M0, {256, 4},
                                        checkpoint::WeightSpec::kFp4Scale, {256, 128});
  const std::vector<uint8_t> packed = Generate(w, 5, 3);
  const std::vector<uint8_t> scales = Generate(s, 5);
  double sum2 = 0;
  for (int64_t r = 0; r < 256; ++r) {
    for (int64_t g = 0; g < 4; ++g) {
      float amax = 0;
      for (int64_t k = g * 32; k < g * 32 + 32; ++k) {
        const uint8_t byte = packed[static_cast<size_t>(r * 64 + k / 2)];
        const uint8_t code = (k % 2 == 0) ? (byte & 0xF) : (byte >> 4);
        const float v = E2M1ToF32(code) * E8M0ToF32(scales[static_cast<size_t>(r * 4 + g)]);
        amax = std::max(amax, std::fabs(v));
        sum2 += double{v} * v;
      }
      // The scale is the smallest power of two that fits the group: the
      // largest code is 4 or 6 (never all small).
      EXPECT_GE(amax, 3.0f * E8M0ToF32(scales[static_cast<size_t>(r * 4 + g)]));
    }
  }
  // Down projection: gain 1/sqrt(2) over sqrt(in = 128).
  EXPECT_NEAR(std::sqrt(sum2 / (256 * 128)) * std::sqrt(128.0), 0.7071, 0.04);
}

TEST(MakeTinyRandom, Tid2eidRowsAreDistinct) {
  const checkpoint::WeightSpec t =
      Spec("layers.1.ffn.gate.tid2eid", DType::kI64, {1000, 6}, checkpoint::WeightSpec::kI64);
  const std::vector<uint8_t> bytes = Generate(t, 9, 13);
  std::vector<int64_t> ids(bytes.size() / 8);
  std::memcpy(ids.data(), bytes.data(), bytes.size());
  std::vector<int64_t> counts(8, 0);
  for (int64_t r = 0; r < 1000; ++r) {
    std::set<int64_t> row(ids.begin() + r * 6, ids.begin() + r * 6 + 6);
    EXPECT_EQ(row.size(), 6u);
    for (int64_t e : row) {
      ASSERT_GE(e, 0);
      ASSERT_LT(e, 8);
      ++counts[static_cast<size_t>(e)];
    }
  }
  for (int64_t c : counts) EXPECT_NEAR(c, 750, 60);  // uniform over experts
}

TEST(MakeTinyRandom, PlainParametersByRole) {
  auto stats = [](const checkpoint::WeightSpec& spec, double* mean, double* sd, float* lo,
                  float* hi) {
    const std::vector<uint8_t> b = Generate(spec, 1);
    const size_t n = b.size() / DTypeSize(spec.dtype);
    double s = 0, s2 = 0;
    *lo = 1e30f;
    *hi = -1e30f;
    for (size_t i = 0; i < n; ++i) {
      float v;
      if (spec.dtype == DType::kBF16) {
        bf16 h;
        std::memcpy(&h, b.data() + 2 * i, 2);
        v = Bf16ToF32(h);
      } else {
        std::memcpy(&v, b.data() + 4 * i, 4);
      }
      s += v;
      s2 += double{v} * v;
      *lo = std::min(*lo, v);
      *hi = std::max(*hi, v);
    }
    *mean = s / static_cast<double>(n);
    *sd = std::sqrt(s2 / static_cast<double>(n) - *mean * *mean);
  };
  double mean, sd;
  float lo, hi;
  stats(Spec("layers.2.attn_norm.weight", DType::kBF16, {4096}, checkpoint::WeightSpec::kBf16),
        &mean, &sd, &lo, &hi);
  EXPECT_NEAR(mean, 1.0, 0.01);
  EXPECT_NEAR(sd, 0.1, 0.01);
  stats(Spec("layers.2.hc_attn_scale", DType::kF32, {3000}, checkpoint::WeightSpec::kF32), &mean,
        &sd, &lo, &hi);
  EXPECT_GE(lo, 0.5f);
  EXPECT_LT(hi, 1.5f);
  stats(Spec("layers.2.hc_ffn_fn", DType::kF32, {24, 1024}, checkpoint::WeightSpec::kF32), &mean,
        &sd, &lo, &hi);
  EXPECT_NEAR(sd, 1.0 / 32, 0.002);
  stats(Spec("embed.weight", DType::kBF16, {64, 256}, checkpoint::WeightSpec::kBf16), &mean, &sd,
        &lo, &hi);
  EXPECT_NEAR(sd, 1.0, 0.03);
  stats(Spec("head.weight", DType::kBF16, {64, 256}, checkpoint::WeightSpec::kBf16), &mean, &sd,
        &lo, &hi);
  EXPECT_NEAR(sd, 2.0 / 16, 0.004);
}

}  // namespace
}  // namespace dsv4::tools
