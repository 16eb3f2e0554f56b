// Router, experts and the whole MoE against golden/ops §16-17 (bit-exact), and
// batch invariance of the MoE.
#include "model/moe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/quant.h"
#include "model/workspace.h"
#include "testing/golden.h"

namespace dsv4 {
namespace {

using testing::OpenGolden;
using testing::ReadBf16;
using testing::ReadF32;
using testing::ReadI64;
using testing::ReadU8;

std::vector<int32_t> ToI32(const std::vector<int64_t>& v) {
  return std::vector<int32_t>(v.begin(), v.end());
}

void ExpectBitEqual(const std::vector<bf16>& got, const std::vector<bf16>& want,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t diffs = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (Bf16ToF32(got[i]) != Bf16ToF32(want[i])) ++diffs;
  }
  EXPECT_EQ(diffs, 0) << what << ": " << diffs << " of " << got.size() << " elements differ";
}

struct GateCase {
  const char* name;
  int64_t k;
  bool hash;
};

class GateGoldenTest : public ::testing::TestWithParam<GateCase> {};

TEST_P(GateGoldenTest, MatchesReferenceGate) {
  auto f = OpenGolden("golden/ops/ops.safetensors");
  ASSERT_NE(f, nullptr);
  const GateCase gc = GetParam();
  const std::string p = std::string("gate.") + gc.name;
  Shape xs, ws_shape;
  const std::vector<bf16> x = ReadBf16(*f, p + ".x", &xs);
  const std::vector<bf16> w = ReadBf16(*f, p + ".w", &ws_shape);
  const int64_t n = xs[0];
  model::MoeShape shape;
  shape.dim = xs[1];
  shape.num_experts = ws_shape[0];
  shape.top_k = gc.k;
  shape.route_scale = 1.5f;
  model::RouterWeights rw;
  rw.gate = w.data();
  std::vector<float> bias;
  std::vector<int32_t> table, ids;
  if (gc.hash) {
    Shape ts;
    table = ToI32(ReadI64(*f, p + ".tid2eid", &ts));
    rw.tid2eid = table.data();
    rw.vocab = ts[0];
    ids = ToI32(ReadI64(*f, p + ".ids"));
  } else {
    bias = ReadF32(*f, p + ".bias");
    rw.bias = bias.data();
  }
  std::vector<int32_t> got_ids(static_cast<size_t>(n * gc.k));
  std::vector<float> got_w(got_ids.size()), got_logits(static_cast<size_t>(n * shape.num_experts));
  model::Workspace ws;
  Route(shape, rw, x.data(), gc.hash ? ids.data() : nullptr, n, got_ids.data(), got_w.data(),
        got_logits.data(), ws, nullptr);

  const std::vector<float> want_logits = ReadF32(*f, p + ".logits");
  for (size_t i = 0; i < want_logits.size(); ++i) {
    ASSERT_NEAR(got_logits[i], want_logits[i], 1e-5f) << "logit " << i;
  }
  const std::vector<int64_t> want_ids = ReadI64(*f, p + ".indices");
  const std::vector<float> want_w = ReadF32(*f, p + ".route_weights");
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < gc.k; ++j) {
      // Compare as sets: find the golden position of each selected id.
      const size_t a = static_cast<size_t>(t * gc.k + j);
      const auto* begin = want_ids.data() + t * gc.k;
      const auto* it = std::find(begin, begin + gc.k, got_ids[a]);
      ASSERT_NE(it, begin + gc.k) << "token " << t << " selected expert " << got_ids[a];
      const float want = want_w[static_cast<size_t>(t * gc.k + (it - begin))];
      EXPECT_LE(std::fabs(got_w[a] - want), 1e-6f * std::fabs(want)) << "token " << t;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, GateGoldenTest,
                         ::testing::Values(GateCase{"e256k6", 6, false}, GateCase{"e8k2", 2, false},
                                           GateCase{"hash_e256k6", 6, true}),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

// The ops goldens' MoE geometry: hidden 256, 8 experts of width 128, top-2.
model::MoeShape OpsMoeShape() {
  model::MoeShape s;
  s.dim = 256;
  s.inter = 128;
  s.shared_inter = 128;
  s.num_experts = 8;
  s.top_k = 2;
  s.route_scale = 1.5f;
  s.swiglu_limit = 10.0f;
  return s;
}

kernels::Fp4Weight Fp4(const std::vector<uint8_t>& packed, const std::vector<uint8_t>& scales,
                       int64_t index, int64_t out, int64_t in) {
  kernels::Fp4Weight w;
  w.packed = packed.data() + index * out * in / 2;
  w.scales = scales.data() + index * out * in / 32;
  w.out = out;
  w.in = in;
  return w;
}

kernels::Fp8Weight Fp8(const std::vector<uint8_t>& codes, const std::vector<uint8_t>& scales,
                       int64_t out, int64_t in) {
  kernels::Fp8Weight w;
  w.codes = codes.data();
  w.scales = scales.data();
  w.out = out;
  w.in = in;
  return w;
}

// Holds the ops-golden tensors an expert or MoE view points into.
struct OpsExperts {
  std::vector<uint8_t> w1, w1s, w2, w2s, w3, w3s;  // routed, all experts
  std::vector<uint8_t> s1, s1s, s2, s2s, s3, s3s;  // shared
};

TEST(ExpertGoldenTest, RoutedFp4AndSharedFp8MatchBitExactly) {
  auto f = OpenGolden("golden/ops/ops.safetensors");
  ASSERT_NE(f, nullptr);
  const model::MoeShape shape = OpsMoeShape();
  for (const bool routed : {true, false}) {
    const std::string p = routed ? "expert.routed_fp4." : "expert.shared_fp8.";
    Shape xs;
    const std::vector<bf16> x = ReadBf16(*f, p + "x", &xs);
    const int64_t m = xs[0];
    std::vector<uint8_t> codes(x.size());
    std::vector<float> scales(static_cast<size_t>(m * shape.dim / 128));
    kernels::ActQuantFp8(x.data(), m, shape.dim, 128, codes.data(), scales.data());
    std::vector<bf16> y(x.size());
    model::Workspace ws;
    if (routed) {
      OpsExperts e;
      e.w1 = ReadU8(*f, p + "w1_packed");
      e.w1s = ReadU8(*f, p + "w1_scale_e8m0");
      e.w2 = ReadU8(*f, p + "w2_packed");
      e.w2s = ReadU8(*f, p + "w2_scale_e8m0");
      e.w3 = ReadU8(*f, p + "w3_packed");
      e.w3s = ReadU8(*f, p + "w3_scale_e8m0");
      model::RoutedExpertWeights w{Fp4(e.w1, e.w1s, 0, 128, 256), Fp4(e.w2, e.w2s, 0, 256, 128),
                                   Fp4(e.w3, e.w3s, 0, 128, 256)};
      const std::vector<float> rw = ReadF32(*f, p + "route_weight");
      model::RoutedExpertForward(shape, w, codes.data(), scales.data(), m, rw.data(), y.data(), ws,
                                 nullptr);
    } else {
      OpsExperts e;
      e.s1 = ReadU8(*f, p + "w1_codes");
      e.s1s = ReadU8(*f, p + "w1_scale_e8m0");
      e.s2 = ReadU8(*f, p + "w2_codes");
      e.s2s = ReadU8(*f, p + "w2_scale_e8m0");
      e.s3 = ReadU8(*f, p + "w3_codes");
      e.s3s = ReadU8(*f, p + "w3_scale_e8m0");
      model::SharedExpertWeights w{Fp8(e.s1, e.s1s, 128, 256), Fp8(e.s2, e.s2s, 256, 128),
                                   Fp8(e.s3, e.s3s, 128, 256)};
      model::SharedExpertForward(shape, w, codes.data(), scales.data(), m, y.data(), ws, nullptr);
    }
    ExpectBitEqual(y, ReadBf16(*f, p + "y"), p + "y");
  }
}

class MoeGoldenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    f_ = OpenGolden("golden/ops/ops.safetensors");
    ASSERT_NE(f_, nullptr);
    const std::string c = "moe.common.";
    Shape xs;
    x_ = ReadBf16(*f_, c + "x", &xs);
    n_ = xs[0];
    ids_ = ToI32(ReadI64(*f_, c + "ids"));
    gate_ = ReadBf16(*f_, c + "gate_weight");
    bias_ = ReadF32(*f_, c + "gate_bias");
    table_ = ToI32(ReadI64(*f_, c + "tid2eid"));
    e_.w1 = ReadU8(*f_, c + "experts_w1_packed");
    e_.w1s = ReadU8(*f_, c + "experts_w1_scale_e8m0");
    e_.w2 = ReadU8(*f_, c + "experts_w2_packed");
    e_.w2s = ReadU8(*f_, c + "experts_w2_scale_e8m0");
    e_.w3 = ReadU8(*f_, c + "experts_w3_packed");
    e_.w3s = ReadU8(*f_, c + "experts_w3_scale_e8m0");
    e_.s1 = ReadU8(*f_, c + "shared_w1_codes");
    e_.s1s = ReadU8(*f_, c + "shared_w1_scale_e8m0");
    e_.s2 = ReadU8(*f_, c + "shared_w2_codes");
    e_.s2s = ReadU8(*f_, c + "shared_w2_scale_e8m0");
    e_.s3 = ReadU8(*f_, c + "shared_w3_codes");
    e_.s3s = ReadU8(*f_, c + "shared_w3_scale_e8m0");
  }

  model::MoeWeights Weights(bool hash) const {
    model::MoeWeights w;
    w.router.gate = gate_.data();
    if (hash) {
      w.router.tid2eid = table_.data();
      w.router.vocab = static_cast<int64_t>(table_.size()) / 2;
    } else {
      w.router.bias = bias_.data();
    }
    for (int64_t e = 0; e < 8; ++e) {
      w.experts.push_back({Fp4(e_.w1, e_.w1s, e, 128, 256), Fp4(e_.w2, e_.w2s, e, 256, 128),
                           Fp4(e_.w3, e_.w3s, e, 128, 256)});
    }
    w.shared = {Fp8(e_.s1, e_.s1s, 128, 256), Fp8(e_.s2, e_.s2s, 256, 128),
                Fp8(e_.s3, e_.s3s, 128, 256)};
    return w;
  }

  std::unique_ptr<checkpoint::SafetensorsFile> f_;
  std::vector<bf16> x_, gate_;
  std::vector<float> bias_;
  std::vector<int32_t> ids_, table_;
  int64_t n_ = 0;
  OpsExperts e_;
};

TEST_F(MoeGoldenTest, ScoreAndHashRoutingMatchBitExactly) {
  const model::MoeShape shape = OpsMoeShape();
  for (const bool hash : {false, true}) {
    const std::string p = hash ? "moe.hash." : "moe.score.";
    const model::MoeWeights w = Weights(hash);
    std::vector<bf16> y(x_.size());
    std::vector<int32_t> experts(static_cast<size_t>(n_ * shape.top_k));
    model::Workspace ws;
    model::MoeForward(shape, w, x_.data(), ids_.data(), n_, y.data(), experts.data(), ws, nullptr);
    ExpectBitEqual(y, ReadBf16(*f_, p + "y"), p + "y");
    const std::vector<int64_t> want = ReadI64(*f_, p + "indices");
    for (int64_t t = 0; t < n_; ++t) {
      std::vector<int64_t> sorted(want.begin() + t * 2, want.begin() + t * 2 + 2);
      std::sort(sorted.begin(), sorted.end());
      EXPECT_EQ(experts[static_cast<size_t>(t * 2)], sorted[0]) << p << " token " << t;
      EXPECT_EQ(experts[static_cast<size_t>(t * 2 + 1)], sorted[1]) << p << " token " << t;
    }
  }
}

TEST_F(MoeGoldenTest, EachTokenAloneEqualsTheBatch) {
  const model::MoeShape shape = OpsMoeShape();
  const model::MoeWeights w = Weights(false);
  const int64_t d = shape.dim;
  std::vector<bf16> batch(x_.size());
  model::Workspace ws;
  ThreadPool pool(2);
  model::MoeForward(shape, w, x_.data(), ids_.data(), n_, batch.data(), nullptr, ws, &pool);
  for (int64_t t = 0; t < n_; ++t) {
    std::vector<bf16> one(static_cast<size_t>(d));
    model::MoeForward(shape, w, x_.data() + t * d, ids_.data() + t, 1, one.data(), nullptr, ws,
                      nullptr);
    for (int64_t c = 0; c < d; ++c) {
      ASSERT_EQ(one[static_cast<size_t>(c)].bits, batch[static_cast<size_t>(t * d + c)].bits)
          << "token " << t << " channel " << c;
    }
  }
}

// Short calls (decode, speculative verify) run the experts batched, long ones
// one expert at a time; fused gate-up weights (the sidecar's w13) and
// separate w1/w3 must agree too.  Every split of a 40-row batch (the
// per-expert loop) into calls of 1..16 rows (the batched path), with and
// without fused weights and a pool, gives the same bits.
TEST_F(MoeGoldenTest, BatchedAndPerExpertPathsAgree) {
  const model::MoeShape shape = OpsMoeShape();
  const int64_t d = shape.dim, in = shape.inter, n = 40;
  std::vector<bf16> x(static_cast<size_t>(n * d));
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    const int64_t src = (t * 7) % n_;  // the golden rows, reordered and repeated
    std::copy_n(x_.begin() + src * d, d, x.begin() + t * d);
    ids[static_cast<size_t>(t)] = ids_[static_cast<size_t>(src)];
  }
  const model::MoeWeights plain = Weights(false);
  // Fused copies: per expert, w1's rows then w3's rows (packed and scales).
  std::vector<uint8_t> w13, w13s, s13, s13s;
  const int64_t pb = in * d / 2, sb = in * d / 32;  // one routed [in, d] weight's bytes
  for (int64_t e = 0; e < 8; ++e) {
    w13.insert(w13.end(), e_.w1.begin() + e * pb, e_.w1.begin() + (e + 1) * pb);
    w13.insert(w13.end(), e_.w3.begin() + e * pb, e_.w3.begin() + (e + 1) * pb);
    w13s.insert(w13s.end(), e_.w1s.begin() + e * sb, e_.w1s.begin() + (e + 1) * sb);
    w13s.insert(w13s.end(), e_.w3s.begin() + e * sb, e_.w3s.begin() + (e + 1) * sb);
  }
  s13 = e_.s1;
  s13.insert(s13.end(), e_.s3.begin(), e_.s3.end());
  s13s = e_.s1s;
  s13s.insert(s13s.end(), e_.s3s.begin(), e_.s3s.end());
  model::MoeWeights fused = Weights(false);
  for (int64_t e = 0; e < 8; ++e) {
    model::RoutedExpertWeights& r = fused.experts[static_cast<size_t>(e)];
    r.w13 = Fp4(w13, w13s, e, 2 * in, d);
    r.w1 = {};
    r.w3 = {};
  }
  fused.shared.w13 = Fp8(s13, s13s, 2 * in, d);
  fused.shared.w1 = {};
  fused.shared.w3 = {};

  std::vector<bf16> want(x.size());
  model::Workspace ws;
  model::MoeForward(shape, plain, x.data(), ids.data(), n, want.data(), nullptr, ws, nullptr);
  ThreadPool pool(2);
  for (const model::MoeWeights* w : std::vector<const model::MoeWeights*>{&plain, &fused}) {
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      std::vector<bf16> whole(x.size());
      model::MoeForward(shape, *w, x.data(), ids.data(), n, whole.data(), nullptr, ws, p);
      ASSERT_EQ(std::memcmp(whole.data(), want.data(), want.size() * sizeof(bf16)), 0)
          << "40 rows, fused " << (w == &fused);
      for (int64_t chunk : {1, 2, 3, 16}) {
        std::vector<bf16> got(x.size());
        for (int64_t t = 0; t < n; t += chunk) {
          const int64_t m = std::min(chunk, n - t);
          model::MoeForward(shape, *w, x.data() + t * d, ids.data() + t, m, got.data() + t * d,
                            nullptr, ws, p);
        }
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_EQ(got[i].bits, want[i].bits) << "chunk " << chunk << " fused " << (w == &fused)
                                               << " pool " << (p != nullptr) << " element " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace dsv4
