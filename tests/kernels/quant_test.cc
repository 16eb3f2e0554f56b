// Golden tests of kernels/quant.h (golden/ops README §3-§6: bit-exact), run
// for every ISA this CPU supports, plus SIMD-vs-scalar differential tests of
// ActQuantFp8 (exact: no reduction but a max).
#include "kernels/quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/ref/quant_ref.h"
#include "ops_test_util.h"
#include "testing/golden.h"

namespace dsv4::kernels {
namespace {

using ::dsv4::testing::OpenGolden;
using ::dsv4::testing::ReadBf16;
using ::dsv4::testing::ReadF32;
using ::dsv4::testing::ReadU8;

constexpr char kOps[] = "golden/ops/ops.safetensors";

// The ISA sweep and guard shared with the other kernel tests.
using IsaScope = ::dsv4::testing::ScopedIsa;
std::vector<Isa> AllIsas() { return ::dsv4::testing::IsasToTest(); }

// Bit patterns of BF16 vectors, so a failure prints comparable numbers;
// compared numerically except for the sign of zero, which README §1 says is
// insignificant outside code bytes.
std::vector<float> Values(const std::vector<bf16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = Bf16ToF32(v[i]);
  return out;
}

TEST(QuantGolden, Fp8Cast) {
  auto f = OpenGolden(kOps);
  ASSERT_NE(f, nullptr);
  const auto x = ReadF32(*f, "fp8_cast.all.x");
  const auto value = ReadF32(*f, "fp8_cast.all.value");
  const auto code = ReadU8(*f, "fp8_cast.all.code");
  ASSERT_EQ(x.size(), 1104u);
  for (size_t i = 0; i < x.size(); ++i) {
    const uint8_t c = E4M3FromF32(x[i]);
    ASSERT_EQ(c, code[i]) << "i=" << i << " x=" << x[i];
    ASSERT_EQ(F32ToBits(E4M3ToF32(c)), F32ToBits(value[i])) << "i=" << i;
  }
}

TEST(QuantGolden, Fp4Cast) {
  auto f = OpenGolden(kOps);
  ASSERT_NE(f, nullptr);
  const auto x = ReadF32(*f, "fp4_cast.all.x");
  const auto value = ReadF32(*f, "fp4_cast.all.value");
  const auto code = ReadU8(*f, "fp4_cast.all.code");
  ASSERT_EQ(x.size(), 187u);
  for (size_t i = 0; i < x.size(); ++i) {
    const uint8_t c = E2M1FromF32(x[i]);
    ASSERT_EQ(c, code[i]) << "i=" << i << " x=" << x[i];
    ASSERT_EQ(F32ToBits(E2M1ToF32(c)), F32ToBits(value[i])) << "i=" << i;
  }
}

void CheckActQuant(const std::string& which) {
  auto f = OpenGolden(kOps);
  ASSERT_NE(f, nullptr);
  Shape shape;
  const auto x = ReadBf16(*f, "act_quant." + which + ".x", &shape);
  const auto codes = ReadU8(*f, "act_quant." + which + ".codes");
  const auto scale = ReadF32(*f, "act_quant." + which + ".scale");
  const auto scale_e8m0 = ReadU8(*f, "act_quant." + which + ".scale_e8m0");
  const auto deq = ReadF32(*f, "act_quant." + which + ".deq");
  ASSERT_EQ(shape.size(), 2u);
  const int64_t rows = shape[0], cols = shape[1];
  for (Isa isa : AllIsas()) {
    IsaScope scope(isa);
    std::vector<uint8_t> got_codes(rows * cols);
    std::vector<float> got_scale(rows * cols / 128);
    ActQuantFp8(x.data(), rows, cols, 128, got_codes.data(), got_scale.data());
    for (int64_t i = 0; i < rows * cols; ++i) {
      ASSERT_EQ(got_codes[i], codes[i]) << IsaName(isa) << " " << which << " element " << i;
      const float s = got_scale[i / 128];
      ASSERT_EQ(E4M3ToF32(got_codes[i]) * s, deq[i]) << which << " element " << i;
    }
    for (size_t b = 0; b < got_scale.size(); ++b) {
      ASSERT_EQ(F32ToBits(got_scale[b]), F32ToBits(scale[b])) << IsaName(isa) << " block " << b;
      ASSERT_EQ((F32ToBits(got_scale[b]) >> 23) & 0xff, scale_e8m0[b]) << "block " << b;
    }
  }
}

TEST(QuantGolden, ActQuantRand) { CheckActQuant("rand"); }
TEST(QuantGolden, ActQuantEdge) { CheckActQuant("edge"); }

void CheckKvQat(const std::string& which) {
  auto f = OpenGolden(kOps);
  ASSERT_NE(f, nullptr);
  Shape shape;
  const auto x = ReadBf16(*f, "act_quant_kv." + which + ".x", &shape);
  const auto y = ReadBf16(*f, "act_quant_kv." + which + ".y");
  const auto codes = ReadU8(*f, "act_quant_kv." + which + ".codes");
  const auto scale = ReadF32(*f, "act_quant_kv." + which + ".scale");
  const int64_t rows = shape[0], cols = shape[1], nope = cols - 64;
  for (Isa isa : AllIsas()) {
    IsaScope scope(isa);
    std::vector<bf16> got = x;
    KvQatFp8(got.data(), rows, cols, nope);
    EXPECT_EQ(Values(got), Values(y)) << IsaName(isa) << " " << which;
  }
  // The codes and scales of the same blocks (the inplace=False call) through
  // the block-64 activation quantizer.
  std::vector<bf16> nope_x(rows * nope);
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(&nope_x[r * nope], &x[r * cols], nope * sizeof(bf16));
  }
  for (Isa isa : AllIsas()) {
    IsaScope scope(isa);
    std::vector<uint8_t> got_codes(rows * nope);
    std::vector<float> got_scale(rows * nope / 64);
    ActQuantFp8(nope_x.data(), rows, nope, 64, got_codes.data(), got_scale.data());
    EXPECT_EQ(got_codes, codes) << IsaName(isa) << " " << which;
    EXPECT_EQ(got_scale, scale) << IsaName(isa) << " " << which;
  }
}

TEST(QuantGolden, KvQatD512) { CheckKvQat("d512"); }
TEST(QuantGolden, KvQatD128) { CheckKvQat("d128"); }

void CheckFp4Quant(const std::string& which) {
  auto f = OpenGolden(kOps);
  ASSERT_NE(f, nullptr);
  Shape shape;
  const auto x = ReadBf16(*f, "fp4_quant." + which + ".x", &shape);
  const auto y = ReadBf16(*f, "fp4_quant." + which + ".y");
  const auto codes = ReadU8(*f, "fp4_quant." + which + ".codes");
  const auto scale = ReadF32(*f, "fp4_quant." + which + ".scale");
  const int64_t cols = shape.back();
  const int64_t rows = static_cast<int64_t>(x.size()) / cols;
  for (Isa isa : AllIsas()) {
    IsaScope scope(isa);
    std::vector<bf16> got = x;
    Fp4Qat(got.data(), rows, cols);
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(Bf16ToF32(got[i]), Bf16ToF32(y[i]))
          << IsaName(isa) << " " << which << " element " << i;
    }
  }
  for (size_t b = 0; b < scale.size(); ++b) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(Bf16ToF32(x[b * 32 + i])));
    const float s = Fp4BlockScale(amax);
    ASSERT_EQ(F32ToBits(s), F32ToBits(scale[b])) << which << " block " << b;
    for (int i = 0; i < 32; ++i) {
      const float v = std::clamp(Bf16ToF32(x[b * 32 + i]) / s, -6.0f, 6.0f);
      ASSERT_EQ(E2M1FromF32(v), codes[b * 32 + i]) << which << " element " << b * 32 + i;
    }
  }
}

TEST(QuantGolden, Fp4QuantRand) { CheckFp4Quant("rand"); }
TEST(QuantGolden, Fp4QuantEdge) { CheckFp4Quant("edge"); }

}  // namespace
}  // namespace dsv4::kernels

namespace dsv4::kernels {
namespace {

// BF16 rows whose 32-blocks span the whole dynamic range (including zero
// blocks, e4m3-subnormal results and ties), stored at an odd bf16 offset.
std::vector<bf16> RandomRows(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-40, 40);
  std::vector<bf16> x(rows * cols + 1);
  for (int64_t b = 0; b < rows * cols; b += 32) {
    const float scale = std::ldexp(1.0f, exponent(rng));
    const int kind = static_cast<int>(rng() % 8);
    for (int64_t i = 0; i < 32; ++i) {
      float v = normal(rng) * scale;
      if (kind == 0) v = 0.0f;
      if (kind == 1 && i % 3 == 0) v = -0.0f;
      // kind 2: e4m3 grid midpoints (exact ties after scaling).
      if (kind == 2) v = (static_cast<float>(rng() % 64) + 0.5f) * 0x1p-9f * scale;
      // kind 3: e2m1 ties; amax 4·scale makes the FP4 block scale `scale`.
      if (kind == 3) {
        static constexpr float kTies[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f};
        v = (i == 0 ? 4.0f : kTies[rng() % 6]) * scale * ((rng() & 1) ? -1.0f : 1.0f);
      }
      x[1 + b + i] = F32ToBf16(v);
    }
  }
  return x;
}

TEST(QuantDifferential, ActQuantFp8MatchesReferenceExactly) {
  for (int64_t block : {32, 64, 128}) {
    for (int64_t rows : {0, 1, 3, 7}) {
      const int64_t cols = block * 3;
      const auto storage = RandomRows(rows, cols, static_cast<uint32_t>(block * 31 + rows));
      const bf16* x = storage.data() + 1;  // misaligned by one element
      std::vector<uint8_t> want_codes(rows * cols + 1, 0xff), got_codes(rows * cols + 1);
      std::vector<float> want_scales(rows * 3), got_scales(rows * 3);
      ref::ActQuantFp8(x, rows, cols, block, want_codes.data() + 1, want_scales.data());
      for (Isa isa : AllIsas()) {
        IsaScope scope(isa);
        std::fill(got_codes.begin(), got_codes.end(), 0xff);
        ActQuantFp8(x, rows, cols, block, got_codes.data() + 1, got_scales.data());
        EXPECT_EQ(got_codes, want_codes) << IsaName(isa) << " block " << block << " rows " << rows;
        EXPECT_EQ(got_scales, want_scales) << IsaName(isa) << " block " << block;
      }
    }
  }
}

}  // namespace
}  // namespace dsv4::kernels

namespace dsv4::kernels {
namespace {

// QAT is exact arithmetic: every ISA must reproduce the reference bit for
// bit, including the sign of zero, on data with ties, zero blocks and a
// 2^±40 dynamic range, at a misaligned address.
TEST(QuantDifferential, QatMatchesReferenceExactly) {
  for (int64_t rows : {0, 1, 3, 5}) {
    const auto storage = RandomRows(rows, 576, static_cast<uint32_t>(100 + rows));
    std::vector<bf16> x(storage.begin() + 1, storage.end());
    std::vector<bf16> want_kv = x, want_fp4 = x;
    ref::KvQatFp8(want_kv.data(), rows, 576, 512);
    ref::Fp4Qat(want_fp4.data(), rows, 576);
    for (Isa isa : AllIsas()) {
      IsaScope scope(isa);
      std::vector<bf16> got = storage;  // QAT on the misaligned copy
      KvQatFp8(got.data() + 1, rows, 576, 512);
      for (int64_t i = 0; i < rows * 576; ++i) {
        ASSERT_EQ(got[i + 1].bits, want_kv[i].bits) << IsaName(isa) << " kv element " << i;
      }
      got = storage;
      Fp4Qat(got.data() + 1, rows, 576);
      for (int64_t i = 0; i < rows * 576; ++i) {
        ASSERT_EQ(got[i + 1].bits, want_fp4[i].bits) << IsaName(isa) << " fp4 element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace dsv4::kernels
