// mHC wrappers against golden/ops §12 (bit-exact), and one whole block of
// tiny-a against the reference's stored streams.
#include "model/block.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/mhc.h"
#include "model/model.h"
#include "testing/golden.h"

namespace dsv4 {
namespace {

using testing::OpenGolden;
using testing::ReadBf16;
using testing::ReadF32;
using testing::ReadI64;

model::HcShape OpsHcShape() {
  model::HcShape s;
  s.hc = 4;
  s.dim = 256;
  s.sinkhorn_iters = 20;
  return s;
}

void ExpectBitEqual(const std::vector<bf16>& got, const std::vector<bf16>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(Bf16ToF32(got[i]), Bf16ToF32(want[i])) << "element " << i;
  }
}

TEST(MhcTest, PrePostAndHeadMatchOpsGoldens) {
  auto f = OpenGolden("golden/ops/ops.safetensors");
  ASSERT_NE(f, nullptr);
  const model::HcShape shape = OpsHcShape();
  const std::vector<bf16> x = ReadBf16(*f, "hc_pre.s6.x");
  const int64_t n = 6;
  const std::vector<float> fn = ReadF32(*f, "hc_pre.s6.fn"), base = ReadF32(*f, "hc_pre.s6.base"),
                           scale = ReadF32(*f, "hc_pre.s6.scale");
  model::HcWeights w{fn.data(), base.data(), scale.data(), 24};
  std::vector<bf16> a(static_cast<size_t>(n * 256));
  std::vector<float> post(static_cast<size_t>(n * 4)), comb(static_cast<size_t>(n * 16));
  model::Workspace ws;
  model::HcPre(shape, w, x.data(), n, a.data(), post.data(), comb.data(), ws, nullptr);
  ExpectBitEqual(a, ReadBf16(*f, "hc_pre.s6.y"));
  const std::vector<float> want_post = ReadF32(*f, "hc_pre.s6.post");
  const std::vector<float> want_comb = ReadF32(*f, "hc_pre.s6.comb");
  for (size_t i = 0; i < post.size(); ++i) {
    EXPECT_LE(std::fabs(post[i] - want_post[i]), 1e-6f * std::fabs(want_post[i]));
  }
  for (size_t i = 0; i < comb.size(); ++i) EXPECT_NEAR(comb[i], want_comb[i], 1e-6f);

  // hc_post with the golden's own post/comb copies.
  const std::vector<bf16> fpost = ReadBf16(*f, "hc_post.s6.f");
  const std::vector<bf16> res = ReadBf16(*f, "hc_post.s6.residual");
  const std::vector<float> gpost = ReadF32(*f, "hc_post.s6.post");
  const std::vector<float> gcomb = ReadF32(*f, "hc_post.s6.comb");
  std::vector<bf16> y(res.size());
  HcPost(shape, fpost.data(), res.data(), n, gpost.data(), gcomb.data(), y.data(), nullptr);
  ExpectBitEqual(y, ReadBf16(*f, "hc_post.s6.y"));

  const std::vector<float> hfn = ReadF32(*f, "hc_head.s6.fn"),
                           hbase = ReadF32(*f, "hc_head.s6.base"),
                           hscale = ReadF32(*f, "hc_head.s6.scale");
  model::HcWeights hw{hfn.data(), hbase.data(), hscale.data(), 4};
  std::vector<bf16> h(static_cast<size_t>(n * 256));
  model::HcHead(shape, hw, ReadBf16(*f, "hc_head.s6.x").data(), n, h.data(), ws, nullptr);
  ExpectBitEqual(h, ReadBf16(*f, "hc_head.s6.y"));
}

// Block 0 of tiny-a (window attention, hash routing) on the embeddings of
// prompt37 against the reference's stored output streams.
TEST(BlockTest, FirstBlockMatchesReferenceStreams) {
  auto m = model::Model::Load(testing::TestDataPath("golden/tiny-a"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const model::Model& model = **m;
  auto g = OpenGolden("golden/tiny-a/golden.safetensors");
  ASSERT_NE(g, nullptr);
  const std::vector<int64_t> ids64 = ReadI64(*g, "prompt37.ids");
  const std::vector<int32_t> ids(ids64.begin(), ids64.end());
  const auto t = static_cast<int64_t>(ids.size());
  const int64_t width = model.stream_width();
  const int64_t layers = model.num_layers();
  std::vector<bf16> in(static_cast<size_t>(t * width)), out(in.size());
  model.EmbedStreams(ids.data(), t, in.data());
  auto cache = model.NewCache(1);
  model::ForwardBatch b;
  b.Add(0, 0, ids);
  model::Workspace ws;
  model::BlockTrace trace;
  ASSERT_TRUE(model.RunBlock(0, in.data(), b, *cache, out.data(), ws, nullptr, &trace).ok());

  const std::vector<float> want = ReadF32(*g, "prefill37.layer_streams");
  double sq_diff = 0, sq_ref = 0;
  int64_t exact_rows = 0;
  for (int64_t r = 0; r < t; ++r) {
    bool exact = true;
    for (int64_t i = 0; i < width; ++i) {
      const double w = want[static_cast<size_t>((r * layers) * width + i)];
      const double d = Bf16ToF32(out[static_cast<size_t>(r * width + i)]) - w;
      sq_diff += d * d;
      sq_ref += w * w;
      exact &= d == 0;
    }
    exact_rows += exact ? 1 : 0;
  }
  // golden/README.md §7 isolated-block bound; with every rounding point
  // reproduced most tokens come out bit-identical (an FP32 summation-order
  // difference can flip an FP8 code in a few).
  EXPECT_LE(std::sqrt(sq_diff / sq_ref), 2e-2);
  EXPECT_GE(exact_rows, t * 8 / 10) << exact_rows << " of " << t << " tokens bit-identical";

  // Hash routing: the experts are exactly the tid2eid row of each token.
  const std::vector<int64_t> experts = ReadI64(*g, "prefill37.expert_ids");  // [L, T, k]
  ASSERT_EQ(trace.top_k, 2);
  for (int64_t r = 0; r < t * 2; ++r) {
    EXPECT_EQ(trace.expert_ids[static_cast<size_t>(r)], experts[static_cast<size_t>(r)]);
  }
}

}  // namespace
}  // namespace dsv4
