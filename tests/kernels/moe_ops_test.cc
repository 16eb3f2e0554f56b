// Router scoring (SqrtSoftplus + biased top-k) and SwiGLU against golden/ops
// §16-17.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "kernels/indexer.h"
#include "kernels/moe.h"
#include "kernels/ref/moe_ref.h"
#include "ops_test_util.h"
#include "testing/golden.h"

namespace dsv4::kernels {
namespace {

using testing::ExpectBf16Close;
using testing::OpenGolden;
using testing::ReadBf16;
using testing::ReadF32;
using testing::ReadI64;

struct GateCase {
  const char* name;
  int64_t k;
  bool hash;
};

std::string CaseName(const ::testing::TestParamInfo<GateCase>& param_info) {
  return param_info.param.name;
}

class GateGolden : public ::testing::TestWithParam<GateCase> {};

TEST_P(GateGolden, SelectionAndWeights) {
  auto f = OpenGolden("golden/ops/ops.safetensors");
  ASSERT_NE(f, nullptr);
  const GateCase gc = GetParam();
  const std::string p = std::string("gate.") + gc.name;
  Shape shape;
  const std::vector<float> logits = ReadF32(*f, p + ".logits", &shape);
  const int64_t tokens = shape[0], experts = shape[1];
  std::vector<float> s(logits.size());
  SqrtSoftplus(logits.data(), static_cast<int64_t>(logits.size()), s.data());
  const std::vector<int64_t> want_idx = ReadI64(*f, p + ".indices");
  const std::vector<float> want_w = ReadF32(*f, p + ".route_weights");
  std::vector<float> bias, biased(experts);
  std::vector<int64_t> ids, tid2eid;
  if (gc.hash) {
    ids = ReadI64(*f, p + ".ids");
    tid2eid = ReadI64(*f, p + ".tid2eid");
  } else {
    bias = ReadF32(*f, p + ".bias");
  }
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<int64_t> idx(gc.k);
    if (gc.hash) {
      for (int64_t j = 0; j < gc.k; ++j) idx[j] = tid2eid[ids[t] * gc.k + j];
    } else {
      for (int64_t e = 0; e < experts; ++e) biased[e] = s[t * experts + e] + bias[e];
      std::vector<int32_t> top(gc.k);
      TopKDescending(biased.data(), experts, gc.k, top.data());
      std::copy(top.begin(), top.end(), idx.begin());
    }
    float sum = 0.0f;
    for (int64_t e : idx) sum += s[t * experts + e];
    std::map<int64_t, float> got, want;
    for (int64_t e : idx) got[e] = s[t * experts + e] / sum * 1.5f;
    for (int64_t j = 0; j < gc.k; ++j) want[want_idx[t * gc.k + j]] = want_w[t * gc.k + j];
    ASSERT_EQ(got.size(), want.size()) << "token " << t;
    for (const auto& [e, w] : want) {
      ASSERT_TRUE(got.count(e)) << "token " << t << " misses expert " << e;
      EXPECT_LE(std::fabs(got[e] - w), 1e-6f * std::fabs(w)) << "token " << t << " e " << e;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, GateGolden,
                         ::testing::Values(GateCase{"e256k6", 6, false}, GateCase{"e8k2", 2, false},
                                           GateCase{"hash_e256k6", 6, true}),
                         CaseName);

TEST(SwiGluTest, RoutedAndSharedGolden) {
  auto f = OpenGolden("golden/ops/ops.safetensors");
  ASSERT_NE(f, nullptr);
  for (const std::string c : {"routed", "shared"}) {
    const std::string p = "swiglu." + c;
    Shape shape;
    const std::vector<bf16> gate = ReadBf16(*f, p + ".gate", &shape);
    const std::vector<bf16> up = ReadBf16(*f, p + ".up");
    std::vector<float> weight;
    if (c == "routed") weight = ReadF32(*f, p + ".route_weight");
    std::vector<bf16> h(gate.size());
    SwiGlu(gate.data(), up.data(), shape[0], shape[1], 10.0f,
           weight.empty() ? nullptr : weight.data(), h.data());
    ExpectBf16Close(h, ReadBf16(*f, p + ".h"), 1, 0.005, p);
  }
}

// SwiGlu takes silu from a table of every BF16 gate value: bit for bit the
// reference's expression for all 65,536 gate patterns (NaNs, infinities,
// -0, subnormals, values past the limit), with and without the routing
// weight, for a BF16 limit, one that is not BF16, and no limit, on every
// ISA (the SIMD rows gather from the table), in rows of whole vectors and
// with a tail (7 rows of 9,362 values and 2 left over).
TEST(SwiGluTest, EveryGateValueMatchesReference) {
  constexpr int64_t kValues = 1 << 16;  // 65,536 gate values
  std::vector<bf16> gate(kValues), up(kValues);
  for (int64_t i = 0; i < kValues; ++i) {
    gate[i].bits = static_cast<uint16_t>(i);
    // Up values of both signs, inside and past every limit below, and NaN.
    up[i] = i % 31 == 30 ? bf16{0x7fc1} : F32ToBf16(static_cast<float>(i % 29 - 14) * 0.75f);
  }
  const std::vector<float> weight = {0.25f, 1.5f, -0.125f, 3.0f, 1.0f, -2.0f, 0.5f};
  for (Isa isa : ::dsv4::testing::IsasToTest()) {
    ::dsv4::testing::ScopedIsa scope(isa);
    for (const int64_t rows : {4, 7}) {
      const int64_t dim = kValues / rows;
      for (const float limit : {10.0f, 7.3f, INFINITY}) {
        for (const bool weighted : {false, true}) {
          const float* w = weighted ? weight.data() : nullptr;
          std::vector<bf16> got(gate.size()), want(gate.size());
          SwiGlu(gate.data(), up.data(), rows, dim, limit, w, got.data());
          ref::SwiGlu(gate.data(), up.data(), rows, dim, limit, w, want.data());
          for (int64_t i = 0; i < rows * dim; ++i) {
            // A NaN gate times a NaN up value: which NaN a product keeps is
            // the operand order the compiler chose (x86 keeps the first);
            // any NaN is right.
            if (std::isnan(Bf16ToF32(gate[i])) && std::isnan(Bf16ToF32(up[i]))) {
              ASSERT_TRUE(std::isnan(Bf16ToF32(got[i])) && std::isnan(Bf16ToF32(want[i])));
              continue;
            }
            ASSERT_EQ(got[i].bits, want[i].bits)
                << IsaName(isa) << " rows " << rows << " gate bits " << gate[i].bits << " limit "
                << limit << " weighted " << weighted;
          }
        }
      }
    }
  }
}

TEST(SqrtSoftplusTest, ThresholdBranches) {
  const std::vector<float> x = {-30.0f, 0.0f, 20.0f, 20.5f, 79.0f};
  std::vector<float> s(x.size());
  SqrtSoftplus(x.data(), 5, s.data());
  EXPECT_FLOAT_EQ(s[1], std::sqrt(std::log(2.0f)));
  EXPECT_EQ(s[3], std::sqrt(20.5f));
  EXPECT_EQ(s[4], std::sqrt(79.0f));
  EXPECT_GT(s[0], 0.0f);
}

}  // namespace
}  // namespace dsv4::kernels
