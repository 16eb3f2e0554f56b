// RMSNorm and the per-head query RMS against golden/ops §9, for every ISA.
#include <gtest/gtest.h>

#include "kernels/norm.h"
#include "ops_test_util.h"
#include "testing/golden.h"

namespace dsv4::kernels {
namespace {

using testing::ExpectBf16Close;
using testing::IsasToTest;
using testing::OpenGolden;
using testing::ReadBf16;
using testing::ScopedIsa;

class RmsNormGolden : public ::testing::TestWithParam<int> {};

TEST_P(RmsNormGolden, MatchesReference) {
  auto f = OpenGolden("golden/ops/ops.safetensors");
  ASSERT_NE(f, nullptr);
  const std::string p = "rmsnorm.d" + std::to_string(GetParam());
  Shape shape;
  const std::vector<bf16> x = ReadBf16(*f, p + ".x", &shape);
  const std::vector<bf16> w = ReadBf16(*f, p + ".weight");
  const std::vector<bf16> want = ReadBf16(*f, p + ".y");
  for (Isa isa : IsasToTest()) {
    ScopedIsa scoped(isa);
    std::vector<bf16> y(x.size());
    RmsNorm(x.data(), shape[0], shape[1], w.data(), 1e-6f, y.data());
    ExpectBf16Close(y, want, 1, 0.005, p + " " + std::string(IsaName(isa)));
    std::vector<bf16> inplace = x;
    RmsNorm(inplace.data(), shape[0], shape[1], w.data(), 1e-6f, inplace.data());
    EXPECT_EQ(testing::CountUlpDiffs(inplace, y, 0), 0) << "in place differs, " << IsaName(isa);
  }
}

INSTANTIATE_TEST_SUITE_P(Dims, RmsNormGolden, ::testing::Values(128, 512, 4096));

class QHeadRmsGolden : public ::testing::TestWithParam<int> {};

TEST_P(QHeadRmsGolden, FiveRoundingsMatch) {
  auto f = OpenGolden("golden/ops/ops.safetensors");
  ASSERT_NE(f, nullptr);
  const std::string p = "q_rms.d" + std::to_string(GetParam());
  Shape shape;
  const std::vector<bf16> q = ReadBf16(*f, p + ".q", &shape);
  const std::vector<bf16> want = ReadBf16(*f, p + ".y");
  for (Isa isa : IsasToTest()) {
    ScopedIsa scoped(isa);
    std::vector<bf16> y = q;
    QHeadRms(y.data(), shape[0] * shape[1], shape[2], 1e-6f);
    ExpectBf16Close(y, want, 1, 0.005, p + " " + std::string(IsaName(isa)));
  }
}

INSTANTIATE_TEST_SUITE_P(Dims, QHeadRmsGolden, ::testing::Values(128, 512));

}  // namespace
}  // namespace dsv4::kernels
