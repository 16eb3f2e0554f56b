// The FP4 GEMM on BF16 dot products (cpu/gemm_fp4dot-inl.h): which weights
// take it, how close it stays to the exact sum, that every path (streamed
// rows, register tiles, one row alone, a batch of GEMMs) gives a row the same
// bits, and that its activations are the scalar builder's bit for bit.  The
// exact kernels' own bits: gemm_test.cc and gemm_fp4_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/cpu_features.h"
#include "base/thread_pool.h"
#include "gemm_test_util.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/gemm.h"
#include "kernels/ref/gemm_ref.h"
#include "ops_test_util.h"

namespace dsv4::kernels {
namespace {

using gemm_testing::Misaligned;
using gemm_testing::QuantizedActivation;
using gemm_testing::RandomActivation;
using gemm_testing::RandomBytes;

bool CpuHasDots() {
  const CpuFeatures cpu = CpuFeatures::Detect();
  return ActiveIsa() == Isa::kAvx512 && cpu.avx512bf16 && cpu.avx512vbmi;
}

// w's value at (col, k) in the row layout: e2m1 · 2^(e − 127).
double WeightValue(const Fp4Weight& w, int64_t col, int64_t k) {
  const uint8_t byte = w.packed[col * (w.in / 2) + k / 2];
  const auto code = static_cast<uint8_t>(k % 2 == 0 ? byte & 0xf : byte >> 4);
  return static_cast<double>(E2M1ToF32(code)) * E8M0ToF32(w.scales[col * (w.in / 32) + k / 32]);
}

// Each output against the exact sum: the FP32 chains of at most k/8 + 2
// additions each, then one BF16 rounding.
void ExpectCloseToExact(const std::vector<bf16>& got, const QuantizedActivation& a, int64_t m,
                        const Fp4Weight& w, const std::string& what) {
  const double gamma = (static_cast<double>(w.in) / 8.0 + 2.0) * std::ldexp(1.0, -24);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < w.out; ++c) {
      double exact = 0.0, abs_sum = 0.0;
      for (int64_t k = 0; k < w.in; ++k) {
        const double t = static_cast<double>(E4M3ToF32(a.codes[r * w.in + k])) *
                         a.scales[r * (w.in / 128) + k / 128] * WeightValue(w, c, k);
        exact += t;
        abs_sum += std::fabs(t);
      }
      const double g = Bf16ToF32(got[r * w.out + c]);
      ASSERT_LE(std::fabs(g - exact), std::ldexp(std::fabs(exact), -8) + gamma * abs_sum)
          << what << " row " << r << " column " << c << " got " << g << " exact " << exact;
    }
  }
}

struct RandomFp4 {
  Misaligned packed, scales;
  Fp4Weight w;
  RandomFp4(int64_t n, int64_t k, uint8_t lo, uint8_t hi, std::mt19937* rng)
      : packed(RandomBytes(n * k / 2, rng, 0, 255, false)),
        scales(RandomBytes(n * k / 32, rng, lo, hi, false)),
        w{packed.data(), scales.data(), n, k} {}
};

TEST(Fp4Dot, CloseToExactAndEveryPathGivesARowTheSameBits) {
  if (!CpuHasDots()) GTEST_SKIP() << "no AVX512-BF16 and VBMI";
  std::mt19937 rng(71);
  for (int64_t k : {128, 1024}) {
    for (int64_t n : {16, 37, 96}) {  // one panel, a partial one, an odd pair count
      const RandomFp4 f(n, k, 110, 130, &rng);
      ASSERT_TRUE(Fp4GemmUsesBf16Dots(f.w));
      // Streamed rows (1..4 per pass), register tiles from 24 rows on with
      // tails of 1 and 2 rows, and two row blocks of the driver (67).
      for (int64_t m : {1, 2, 3, 4, 5, 9, 23, 24, 26, 31, 67}) {
        const QuantizedActivation a = RandomActivation(m, k, &rng);
        const std::string what =
            "k" + std::to_string(k) + " n" + std::to_string(n) + " m" + std::to_string(m);
        std::vector<bf16> one(m * n), all(m * n);
        for (int64_t r = 0; r < m; ++r) {
          Fp4Gemm(a.codes.data() + r * k, a.scales.data() + r * (k / 128), 1, f.w,
                  one.data() + r * n, nullptr);
        }
        ExpectCloseToExact(one, a, m, f.w, what);
        for (int threads : {1, 3}) {
          ThreadPool pool(threads);
          Fp4Gemm(a.codes.data(), a.scales.data(), m, f.w, all.data(), &pool);
          EXPECT_EQ(std::memcmp(one.data(), all.data(), one.size() * sizeof(bf16)), 0)
              << what << " threads " << threads;
        }
        // In a batch next to another GEMM on the same activations, as the MoE
        // runs an expert's gate and up projections.
        std::vector<bf16> batched(m * n), other(m * n);
        const BlockScaledGemm jobs[2] = {
            {a.codes.data(), a.scales.data(), m, nullptr, &f.w, batched.data()},
            {a.codes.data(), a.scales.data(), m, nullptr, &f.w, other.data()}};
        ThreadPool pool(2);
        BlockScaledGemmBatch(jobs, 2, &pool);
        EXPECT_EQ(std::memcmp(one.data(), batched.data(), one.size() * sizeof(bf16)), 0) << what;
        EXPECT_EQ(std::memcmp(one.data(), other.data(), one.size() * sizeof(bf16)), 0) << what;
      }
    }
  }
}

// Scales outside [kFp4Bf16MinScale, kFp4Bf16MaxScale] (values a BF16 could
// not hold exactly, products that could flush) keep the weight on the exact
// kernels: the reference's bits.  The bounds themselves take the dot kernel.
TEST(Fp4Dot, WeightsWithScalesOutOfRangeRunTheExactKernels) {
  std::mt19937 rng(72);
  const int64_t n = 32, k = 256, m = 5;
  const QuantizedActivation a = RandomActivation(m, k, &rng);
  for (int out_of_range : {0, 1, 32, 253, 254, 255}) {
    RandomFp4 f(n, k, 120, 124, &rng);
    f.scales.data()[7] = static_cast<uint8_t>(out_of_range);
    EXPECT_FALSE(Fp4GemmUsesBf16Dots(f.w)) << out_of_range;
    std::vector<bf16> want(m * n), got(m * n);
    ref::Fp4Gemm(a.codes.data(), a.scales.data(), m, f.w, want.data(), nullptr);
    Fp4Gemm(a.codes.data(), a.scales.data(), m, f.w, got.data(), nullptr);
    for (int64_t i = 0; i < m * n; ++i) {
      const bool both_nan = std::isnan(Bf16ToF32(got[i])) && std::isnan(Bf16ToF32(want[i]));
      EXPECT_TRUE(both_nan || got[i].bits == want[i].bits) << out_of_range << " element " << i;
    }
  }
  for (uint8_t bound : {kFp4Bf16MinScale, kFp4Bf16MaxScale}) {
    RandomFp4 f(n, k, 120, 124, &rng);
    f.scales.data()[7] = bound;
    EXPECT_EQ(Fp4GemmUsesBf16Dots(f.w), CpuHasDots()) << int{bound};
    if (bound == kFp4Bf16MaxScale) continue;  // 2^125 · 6 · |a| overflows FP32 anyway
    std::vector<bf16> got(m * n);
    Fp4Gemm(a.codes.data(), a.scales.data(), m, f.w, got.data(), nullptr);
    ExpectCloseToExact(got, a, m, f.w, "scale " + std::to_string(bound));
  }
  RandomFp4 f(n, k, 120, 124, &rng);
  const ::dsv4::testing::ExactFp4Kernels exact_kernels;
  EXPECT_FALSE(Fp4GemmUsesBf16Dots(f.w));
}

// A NaN activation code makes its row NaN, as in the reference.
TEST(Fp4Dot, NanActivationGivesNanRow) {
  if (!CpuHasDots()) GTEST_SKIP() << "no AVX512-BF16 and VBMI";
  std::mt19937 rng(73);
  const int64_t n = 48, k = 256;
  const RandomFp4 f(n, k, 120, 124, &rng);
  for (int64_t m : {1, 30}) {
    QuantizedActivation a = RandomActivation(m, k, &rng);
    a.codes[(m - 1) * k + 200] = 0x7f;
    std::vector<bf16> got(m * n);
    Fp4Gemm(a.codes.data(), a.scales.data(), m, f.w, got.data(), nullptr);
    for (int64_t c = 0; c < n; ++c) {
      EXPECT_TRUE(std::isnan(Bf16ToF32(got[(m - 1) * n + c]))) << "m" << m << " column " << c;
      if (m > 1) {
        EXPECT_FALSE(std::isnan(Bf16ToF32(got[c]))) << "column " << c;
      }
    }
  }
}

// The kernel's activations: the AVX-512 VBMI builder equals the scalar one
// bit for bit, NaN codes, tiny and non-power-of-two scales included.
TEST(Fp4Dot, ActivationsAvx512VbmiEqualScalarBitwise) {
  if (!CpuHasDots()) GTEST_SKIP() << "no AVX512-BF16 and VBMI";
  std::mt19937 rng(74);
  const int64_t m = 3, k = 512;
  std::vector<uint8_t> codes(m * k);
  for (auto& c : codes) c = static_cast<uint8_t>(rng());
  codes[5] = 0x7f;
  codes[6] = 0xff;
  std::vector<float> scales(m * k / 128);
  for (auto& s : scales) s = std::ldexp(1.0f, static_cast<int>(rng() % 40) - 20);
  scales[1] = 0.3f;
  scales[2] = 0x1.234566p-135f;
  scales[3] = 0x1p100f;
  std::vector<bf16> want(m * k, bf16{0x1234}), got(m * k, bf16{0x4321});
  for (int64_t r = 0; r < m; ++r) {
    cpu::Fp4DotActivationsScalar(codes.data() + r * k, scales.data() + r * (k / 128), k, m, r,
                                 want.data());
    cpu::Fp4DotActivationsAvx512Vbmi(codes.data() + r * k, scales.data() + r * (k / 128), k, m, r,
                                     got.data());
  }
  for (int64_t i = 0; i < m * k; ++i) EXPECT_EQ(got[i].bits, want[i].bits) << "element " << i;
  // Block-major: block kb of row r at (kb·m + r)·128, each code's value ·
  // scale, each 8 in the order K 0, 4, 1, 5, 2, 6, 3, 7: position 9 holds K
  // 12 of the block, position 10 K 9.
  EXPECT_EQ(want[(1 * m + 2) * 128 + 9].bits,
            F32ToBf16(E4M3ToF32(codes[2 * k + 128 + 12]) * scales[2 * (k / 128) + 1]).bits);
  EXPECT_EQ(want[(1 * m + 2) * 128 + 10].bits,
            F32ToBf16(E4M3ToF32(codes[2 * k + 128 + 9]) * scales[2 * (k / 128) + 1]).bits);
}

}  // namespace
}  // namespace dsv4::kernels
