// RoPE table and rotation against golden/ops §10, and the Hadamard transform
// against §11.
#include "kernels/rope.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/hadamard.h"
#include "ops_test_util.h"
#include "testing/golden.h"

namespace dsv4::kernels {
namespace {

using testing::ExpectBf16Close;
using testing::F32UlpDistance;
using testing::OpenGolden;
using testing::ReadBf16;
using testing::ReadF32;
using testing::ReadI64;

struct RopeProfile {
  const char* name;
  double base;
  bool yarn;
};

std::string ProfileName(const ::testing::TestParamInfo<RopeProfile>& param_info) {
  return param_info.param.name;
}

class RopeGolden : public ::testing::TestWithParam<RopeProfile> {};

TEST_P(RopeGolden, TableAndRotation) {
  auto f = OpenGolden("golden/ops/ops.safetensors");
  ASSERT_NE(f, nullptr);
  const RopeProfile prof = GetParam();
  const std::string p = std::string("rope.") + prof.name;
  YarnParams yarn;
  yarn.enabled = prof.yarn;
  std::vector<float> freqs(32);
  RopeFrequencies(prof.base, 64, yarn, freqs.data());
  const std::vector<float> want_freqs = ReadF32(*f, p + ".freqs");
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(F32ToBits(freqs[i]), F32ToBits(want_freqs[i])) << "freq " << i;
  }

  const std::vector<int64_t> pos = ReadI64(*f, "rope.common.positions");
  const std::vector<float> angle = ReadF32(*f, p + ".angle");
  const std::vector<float> cos_t = ReadF32(*f, p + ".cos");
  const std::vector<float> sin_t = ReadF32(*f, p + ".sin");
  for (size_t r = 0; r < pos.size(); ++r) {
    for (int i = 0; i < 32; ++i) {
      const float theta = static_cast<float>(pos[r]) * freqs[i];
      EXPECT_EQ(F32ToBits(theta), F32ToBits(angle[r * 32 + i])) << "angle " << r << "," << i;
      EXPECT_LE(F32UlpDistance(std::cos(theta), cos_t[r * 32 + i]), 2);
      EXPECT_LE(F32UlpDistance(std::sin(theta), sin_t[r * 32 + i]), 2);
    }
  }

  const std::vector<bf16> x = ReadBf16(*f, "rope.common.x");
  for (bool inverse : {false, true}) {
    std::vector<bf16> y = x;
    ApplyRope(y.data(), 16, 2, 128, 64, pos.data(), freqs.data(), inverse, nullptr);
    ExpectBf16Close(y, ReadBf16(*f, p + (inverse ? ".inv" : ".fwd")), 1, 0.01,
                    p + (inverse ? " inv" : " fwd"));
  }
}

INSTANTIATE_TEST_SUITE_P(Profiles, RopeGolden,
                         ::testing::Values(RopeProfile{"base10000", 10000, false},
                                           RopeProfile{"yarn160000", 160000, true}),
                         ProfileName);

TEST(RopeTest, InverseUndoesForwardOnNopeAndKeepsNopeDims) {
  std::vector<bf16> x(3 * 128);
  for (size_t i = 0; i < x.size(); ++i) x[i] = F32ToBf16(static_cast<float>(i % 17) - 8.0f);
  const std::vector<int64_t> pos = {0, 5, 70000};
  std::vector<float> freqs(32);
  RopeFrequencies(10000, 64, YarnParams{}, freqs.data());
  std::vector<bf16> y = x;
  ApplyRope(y.data(), 3, 1, 128, 64, pos.data(), freqs.data(), false, nullptr);
  for (int r = 0; r < 3; ++r) {
    for (int d = 0; d < 64; ++d) EXPECT_EQ(y[r * 128 + d].bits, x[r * 128 + d].bits);
  }
  // Position 0 is the identity rotation (cos 1, sin 0).
  for (int d = 64; d < 128; ++d) EXPECT_EQ(y[d].bits, x[d].bits);
}

TEST(HadamardTest, GoldenRows) {
  auto f = OpenGolden("golden/ops/ops.safetensors");
  ASSERT_NE(f, nullptr);
  std::vector<bf16> x = ReadBf16(*f, "hadamard.rows.x");
  HadamardBf16(x.data(), 16, 128, nullptr);
  ExpectBf16Close(x, ReadBf16(*f, "hadamard.rows.y"), 1, 0.005, "hadamard");
}

TEST(HadamardTest, SmallDimsMatchMatrixDefinition) {
  for (int64_t dim : {1, 2, 4, 8, 32}) {
    std::vector<bf16> x(dim);
    for (int64_t i = 0; i < dim; ++i) x[i] = F32ToBf16(static_cast<float>(i * i % 7) - 3.0f);
    std::vector<bf16> y = x;
    HadamardBf16(y.data(), 1, dim, nullptr);
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim)));
    for (int64_t k = 0; k < dim; ++k) {
      // Small integers: every FP32 sum is exact, so the matrix form must agree bitwise.
      float sum = 0.0f;
      for (int64_t j = 0; j < dim; ++j) {
        const float h = (__builtin_popcountll(j & k) % 2) ? -1.0f : 1.0f;
        sum += Bf16ToF32(x[j]) * h;
      }
      EXPECT_EQ(y[k].bits, F32ToBf16(sum * scale).bits) << "dim " << dim << " k " << k;
    }
  }
}

// A prefill's rows split over a pool (every thread count, rows that do and do
// not divide evenly) give exactly the bits of one thread.
TEST(RopeTest, RowsOverAPoolGiveTheSameBits) {
  constexpr int64_t kRows = 37, kHeads = 64, kDim = 128;
  std::vector<bf16> x(kRows * kHeads * kDim);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = F32ToBf16(static_cast<float>((i * 7919) % 4001) / 997.0f - 2.0f);
  }
  std::vector<int64_t> pos(kRows);
  for (int64_t r = 0; r < kRows; ++r) pos[r] = 3 * r + 11;
  std::vector<float> freqs(32);
  RopeFrequencies(10000, 64, YarnParams{}, freqs.data());
  std::vector<bf16> want = x;
  ApplyRope(want.data(), kRows, kHeads, kDim, 64, pos.data(), freqs.data(), false, nullptr);
  HadamardBf16(want.data(), kRows * kHeads, kDim, nullptr);
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    std::vector<bf16> y = x;
    ApplyRope(y.data(), kRows, kHeads, kDim, 64, pos.data(), freqs.data(), false, &pool);
    HadamardBf16(y.data(), kRows * kHeads, kDim, &pool);
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_EQ(y[i].bits, want[i].bits) << "element " << i << ", " << threads << " threads";
    }
  }
}

}  // namespace
}  // namespace dsv4::kernels
