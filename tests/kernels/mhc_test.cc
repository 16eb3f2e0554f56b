// mHC pieces against golden/ops §12: hc_pre, hc_post, hc_head, Sinkhorn edges.
#include "kernels/mhc.h"

#include <gtest/gtest.h>

#include <cmath>

#include "base/thread_pool.h"
#include "ops_test_util.h"
#include "testing/golden.h"

namespace dsv4::kernels {
namespace {

using testing::ExpectBf16Close;
using testing::IsasToTest;
using testing::OpenGolden;
using testing::ReadBf16;
using testing::ReadF32;
using testing::ScopedIsa;

constexpr int64_t kTokens = 6;
constexpr int64_t kHc = 4;
constexpr int64_t kDim = 256;
constexpr float kEps = 1e-6f;

void ExpectAbsClose(const std::vector<float>& got, const std::vector<float>& want, float tol,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], tol) << what << " [" << i << "]";
  }
}

void ExpectRelClose(const std::vector<float>& got, const std::vector<float>& want, float rel,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_LE(std::fabs(got[i] - want[i]), rel * std::fabs(want[i])) << what << " [" << i << "]";
  }
}

TEST(MhcTest, HcPreGolden) {
  auto f = OpenGolden("golden/ops/ops.safetensors");
  ASSERT_NE(f, nullptr);
  const std::vector<bf16> x = ReadBf16(*f, "hc_pre.s6.x");
  const std::vector<float> fn = ReadF32(*f, "hc_pre.s6.fn");
  const std::vector<float> scale = ReadF32(*f, "hc_pre.s6.scale");
  const std::vector<float> base = ReadF32(*f, "hc_pre.s6.base");
  ThreadPool pool(2);
  for (Isa isa : IsasToTest()) {
    ScopedIsa scoped(isa);
    const std::string tag = std::string(IsaName(isa));
    std::vector<float> mixes(kTokens * 24);
    HcMixes(x.data(), kTokens, kHc * kDim, fn.data(), 24, kEps, mixes.data(), &pool);
    ExpectAbsClose(mixes, ReadF32(*f, "hc_pre.s6.mixes"), 1e-5f, "mixes " + tag);

    std::vector<float> pre(kTokens * kHc), post(kTokens * kHc), comb(kTokens * kHc * kHc);
    HcSplitSinkhorn(mixes.data(), kTokens, kHc, scale.data(), base.data(), 20, kEps, pre.data(),
                    post.data(), comb.data(), &pool);
    ExpectRelClose(pre, ReadF32(*f, "hc_pre.s6.pre"), 1e-6f, "pre " + tag);
    ExpectRelClose(post, ReadF32(*f, "hc_pre.s6.post"), 1e-6f, "post " + tag);
    ExpectAbsClose(comb, ReadF32(*f, "hc_pre.s6.comb"), 1e-6f, "comb " + tag);

    std::vector<bf16> y(kTokens * kDim);
    HcWeightedSum(x.data(), kTokens, kHc, kDim, pre.data(), y.data(), &pool);
    ExpectBf16Close(y, ReadBf16(*f, "hc_pre.s6.y"), 1, 0.005, "y " + tag);
  }
}

TEST(MhcTest, HcPostGolden) {
  auto f = OpenGolden("golden/ops/ops.safetensors");
  ASSERT_NE(f, nullptr);
  const std::vector<bf16> fo = ReadBf16(*f, "hc_post.s6.f");
  const std::vector<bf16> res = ReadBf16(*f, "hc_post.s6.residual");
  const std::vector<float> post = ReadF32(*f, "hc_post.s6.post");
  const std::vector<float> comb = ReadF32(*f, "hc_post.s6.comb");
  for (Isa isa : IsasToTest()) {
    ScopedIsa scoped(isa);
    std::vector<bf16> y(kTokens * kHc * kDim);
    HcPost(fo.data(), res.data(), kTokens, kHc, kDim, post.data(), comb.data(), y.data(), nullptr);
    ExpectBf16Close(y, ReadBf16(*f, "hc_post.s6.y"), 1, 0.005,
                    "hc_post " + std::string(IsaName(isa)));
  }
}

TEST(MhcTest, HcHeadGolden) {
  auto f = OpenGolden("golden/ops/ops.safetensors");
  ASSERT_NE(f, nullptr);
  const std::vector<bf16> x = ReadBf16(*f, "hc_head.s6.x");
  const std::vector<float> fn = ReadF32(*f, "hc_head.s6.fn");
  const std::vector<float> scale = ReadF32(*f, "hc_head.s6.scale");
  const std::vector<float> base = ReadF32(*f, "hc_head.s6.base");
  for (Isa isa : IsasToTest()) {
    ScopedIsa scoped(isa);
    std::vector<float> mixes(kTokens * kHc), pre(kTokens * kHc);
    HcMixes(x.data(), kTokens, kHc * kDim, fn.data(), kHc, kEps, mixes.data(), nullptr);
    HcHeadPre(mixes.data(), kTokens, kHc, scale[0], base.data(), kEps, pre.data());
    std::vector<bf16> y(kTokens * kDim);
    HcWeightedSum(x.data(), kTokens, kHc, kDim, pre.data(), y.data(), nullptr);
    ExpectBf16Close(y, ReadBf16(*f, "hc_head.s6.y"), 1, 0.005,
                    "hc_head " + std::string(IsaName(isa)));
  }
}

TEST(MhcTest, SinkhornEdgeRows) {
  auto f = OpenGolden("golden/ops/ops.safetensors");
  ASSERT_NE(f, nullptr);
  const int64_t rows = 8;
  const std::vector<float> mixes = ReadF32(*f, "hc_sinkhorn.edge.mixes");
  const std::vector<float> scale = ReadF32(*f, "hc_sinkhorn.edge.scale");
  const std::vector<float> base = ReadF32(*f, "hc_sinkhorn.edge.base");
  std::vector<float> pre(rows * kHc), post(rows * kHc), comb(rows * kHc * kHc);
  HcSplitSinkhorn(mixes.data(), rows, kHc, scale.data(), base.data(), 20, kEps, pre.data(),
                  post.data(), comb.data(), nullptr);
  ExpectRelClose(pre, ReadF32(*f, "hc_sinkhorn.edge.pre"), 1e-6f, "pre");
  ExpectRelClose(post, ReadF32(*f, "hc_sinkhorn.edge.post"), 1e-6f, "post");
  const std::vector<float> want = ReadF32(*f, "hc_sinkhorn.edge.comb");
  for (int64_t i = 0; i < rows * kHc * kHc; ++i) {
    // Row 4 is ill-conditioned (one-hot softmax): README §2 allows 1e-5 there.
    const float tol = (i / (kHc * kHc) == 4) ? 1e-5f : 1e-6f;
    EXPECT_NEAR(comb[i], want[i], tol) << "comb [" << i << "]";
  }
}

}  // namespace
}  // namespace dsv4::kernels
