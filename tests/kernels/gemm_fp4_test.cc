// FP4 GEMM activation records with two planes (gemm_cpu.h, kFp4PlanesAt):
// a 128-block whose integer values a = e4m3·2^9 are all multiples of 8 is
// summed from the planes of a/8 with 4 dot products per column instead of 6.
// Both kinds of block, next to each other in one row and in rows of one
// call, must give the scalar reference's bits on every ISA and every exact
// FP4 kernel variant (VBMI, plain VNNI, no VNNI), at M = 1 (whole and
// partial panels) and M > 1.  (The BF16 dot kernel: gemm_fp4dot_test.cc.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/dispatch.h"
#include "kernels/gemm.h"
#include "kernels/ref/gemm_ref.h"
#include "ops_test_util.h"

namespace dsv4::kernels {
namespace {

// A random e4m3 code whose value·2^9 is a multiple of 8: zero, or an
// exponent field >= 4 (|value| >= 2^-3, so its last mantissa bit weighs at
// least 2^-6), NaN codes excluded.
uint8_t CodeOfMultipleOf8(std::mt19937* rng) {
  for (;;) {
    const auto c = static_cast<uint8_t>((*rng)());
    if ((c & 0x7f) == 0x7f) continue;
    if ((c & 0x7f) == 0 || (c & 0x78) >= 0x20) return c;
  }
}

// Row r, block kb: kind (r + kb) % 4 — 0: multiples of 8 only (two planes),
// including ±448 (the largest a/8 = 28672); 1: the same with one code 0x01
// (a = 1) at a varying place (three planes); 2: any codes (three planes);
// 3: all zero (two planes).
std::vector<uint8_t> MixedCodes(int64_t m, int64_t k, std::mt19937* rng) {
  std::vector<uint8_t> x(m * k);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t kb = 0; kb < k / 128; ++kb) {
      uint8_t* b = x.data() + r * k + kb * 128;
      const int64_t kind = (r + kb) % 4;
      for (int64_t i = 0; i < 128; ++i) {
        uint8_t c = CodeOfMultipleOf8(rng);
        if (kind == 2) {
          c = static_cast<uint8_t>((*rng)());
          if ((c & 0x7f) == 0x7f) c &= 0xfe;
        }
        b[i] = kind == 3 ? 0 : c;
      }
      if (kind == 0) {
        b[(5 * r + kb) % 128] = 0x7e;
        b[(7 * r + 3 * kb + 1) % 128] = 0xfe;
      }
      if (kind == 1) b[(11 * r + 5 * kb) % 128] = 0x01;
    }
  }
  return x;
}

std::vector<Isa> SimdIsas() {
  std::vector<Isa> out;
  for (Isa isa : ::dsv4::testing::IsasToTest()) {
    if (isa != Isa::kScalar) out.push_back(isa);
  }
  return out;
}

int64_t Differ(const std::vector<bf16>& got, const std::vector<bf16>& want) {
  int64_t d = 0;
  for (size_t i = 0; i < want.size(); ++i) d += got[i].bits != want[i].bits;
  return d;
}

TEST(Fp4TwoPlanes, MixedBlocksEqualReferenceBitwise) {
  const ::dsv4::testing::ExactFp4Kernels exact_kernels;
  std::mt19937 rng(23);
  constexpr int64_t k = 1024;
  for (int64_t n : {16, 48, 37}) {  // whole panels, and a partial one
    std::vector<uint8_t> packed(n * k / 2), scales(n * k / 32);
    for (auto& b : packed) b = static_cast<uint8_t>(rng());
    for (auto& b : scales) b = static_cast<uint8_t>(118 + rng() % 9);
    const Fp4Weight w{packed.data(), scales.data(), n, k};
    for (int64_t m : {1, 3, 4, 9}) {
      const std::vector<uint8_t> x = MixedCodes(m, k, &rng);
      std::vector<float> x_scales(m * k / 128);
      for (auto& s : x_scales) s = static_cast<float>(1 << (rng() % 8)) * 0x1p-10f;
      // Row 0: tiny scales, where unit·sa would lose bits (the kernels then
      // keep the reference's two multiplies); row 2: a non-power of two.
      for (int64_t kb = 0; kb < k / 128; ++kb) x_scales[kb] = 0x1.234566p-135f;
      if (m > 2) x_scales[2 * (k / 128) + 2] = 0.3f;
      std::vector<bf16> want(m * n), got(m * n);
      ref::Fp4Gemm(x.data(), x_scales.data(), m, w, want.data(), nullptr);
      ThreadPool pool(2);
      for (Isa isa : SimdIsas()) {
        ::dsv4::testing::ScopedIsa scope(isa);
        for (int variant : {0, 1, 2}) {  // best, without VBMI, without VNNI
          cpu::UseFp4WithoutVbmiForTesting(variant == 1);
          cpu::UseFp4WithoutVnniForTesting(variant == 2);
          const std::string what = std::string(IsaName(isa)) + " n" + std::to_string(n) + " m" +
                                   std::to_string(m) + " variant " + std::to_string(variant);
          Fp4Gemm(x.data(), x_scales.data(), m, w, got.data(), &pool);
          EXPECT_EQ(Differ(got, want), 0) << what;
          for (int64_t r = 0; r < m; ++r) {  // each row alone: the one-row path
            Fp4Gemm(x.data() + r * k, x_scales.data() + r * (k / 128), 1, w, got.data() + r * n,
                    nullptr);
          }
          EXPECT_EQ(Differ(got, want), 0) << what << " one row";
        }
        cpu::UseFp4WithoutVbmiForTesting(false);
        cpu::UseFp4WithoutVnniForTesting(false);
      }
    }
  }
}

// Bitwise equal unless both are NaN (whose payloads the two paths need not
// share).
int64_t DifferOrNan(const std::vector<bf16>& got, const std::vector<bf16>& want) {
  int64_t d = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const bool nan = (got[i].bits & 0x7fff) > 0x7f80 && (want[i].bits & 0x7fff) > 0x7f80;
    d += got[i].bits != want[i].bits && !nan;
  }
  return d;
}

// Tiles of kFp4OuterMinRows rows or more run the AVX-512 outer-product
// kernel (gemm_fp4_outer-inl.h): the same bits as the row kernels, over
// micro-tiles of 1-2 rows and 1-4 panels (partial last panel), passes of 2
// blocks (K of 1, 8, 9 and 17 blocks: whole and partial passes), both plane
// counts in one micro-tile,
// tiny scales (two multiplies), NaN activation codes, 1 and 3 threads.
// The AVX-512 record builder writes the scalar builder's bytes: every code
// (NaNs, ±0, subnormals, ±448) in shuffled blocks, two-plane blocks (each
// sign and size), blocks with one small code among multiples of 8, and
// all-zero blocks.
TEST(Fp4Records, Avx512EqualsScalarBytewise) {
  if (BestSupportedIsa() != Isa::kAvx512) GTEST_SKIP() << "no AVX-512";
  std::mt19937 rng(21);
  constexpr int64_t kBlocks = 64, kIn = kBlocks * 128;
  std::vector<uint8_t> codes(kIn);
  for (int64_t kb = 0; kb < kBlocks; ++kb) {
    uint8_t* b = codes.data() + kb * 128;
    switch (kb % 4) {
      case 0:  // codes kb/4·128 .. + 127 of all 256, shuffled
        for (int i = 0; i < 128; ++i) b[i] = static_cast<uint8_t>((kb / 4 % 2) * 128 + i);
        std::shuffle(b, b + 128, rng);
        break;
      case 1:
        for (int i = 0; i < 128; ++i) b[i] = CodeOfMultipleOf8(&rng);
        break;
      case 2:
        for (int i = 0; i < 128; ++i) b[i] = CodeOfMultipleOf8(&rng);
        b[rng() % 128] = static_cast<uint8_t>(rng() % 8);  // a small code (or zero)
        break;
      default:
        std::fill(b, b + 128, kb % 8 == 3 ? 0x00 : 0x80);  // +0 or -0
    }
  }
  std::vector<uint8_t> want(kBlocks * cpu::kFp4RecordBytes, 0xa5), got = want;
  cpu::BuildFp4RecordsScalar(codes.data(), kIn, want.data());
  cpu::BuildFp4RecordsAvx512(codes.data(), kIn, got.data());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got[i], want[i]) << "block " << i / cpu::kFp4RecordBytes << " byte "
                               << i % cpu::kFp4RecordBytes;
  }
}

TEST(Fp4OuterProducts, EqualRowKernelsBitwise) {
  const ::dsv4::testing::ExactFp4Kernels exact_kernels;
  std::mt19937 rng(29);
  for (int64_t k : {128, 1024, 1152, 2176}) {
    for (int64_t n : {16, 64, 100, 200}) {
      std::vector<uint8_t> packed(n * k / 2), scales(n * k / 32);
      for (auto& b : packed) b = static_cast<uint8_t>(rng());
      for (auto& b : scales) b = static_cast<uint8_t>(116 + rng() % 13);
      scales[5] = 0;  // E8M0 2^-127
      const Fp4Weight w{packed.data(), scales.data(), n, k};
      for (int64_t m : {16, 17, 18, 75}) {  // micro-tiles ending in 1 and 2 rows
        std::vector<uint8_t> x = MixedCodes(m, k, &rng);
        x[3 * k + 17] = 0x7f;  // a NaN code: row 3's block 0
        std::vector<float> x_scales(m * k / 128);
        for (auto& s : x_scales) s = static_cast<float>(1 << (rng() % 8)) * 0x1p-10f;
        for (int64_t kb = 0; kb < k / 128; ++kb) x_scales[kb] = 0x1.234566p-135f;
        x_scales[(m - 1) * (k / 128)] = 0.3f;
        std::vector<bf16> want(m * n), got(m * n);
        ThreadPool pool(3);
        for (Isa isa : SimdIsas()) {
          if (isa != Isa::kAvx512) continue;
          ::dsv4::testing::ScopedIsa scope(isa);
          for (int variant : {0, 1, 2}) {  // best, without VBMI, without VNNI
            cpu::UseFp4WithoutVbmiForTesting(variant == 1);
            cpu::UseFp4WithoutVnniForTesting(variant == 2);
            cpu::UseFp4RowKernelsForTesting(true);
            Fp4Gemm(x.data(), x_scales.data(), m, w, want.data(), nullptr);
            cpu::UseFp4RowKernelsForTesting(false);
            for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
              std::fill(got.begin(), got.end(), bf16{});
              Fp4Gemm(x.data(), x_scales.data(), m, w, got.data(), p);
              EXPECT_EQ(DifferOrNan(got, want), 0)
                  << "k" << k << " n" << n << " m" << m << " variant " << variant
                  << (p != nullptr ? " 3 threads" : " 1 thread");
            }
          }
          cpu::UseFp4WithoutVbmiForTesting(false);
          cpu::UseFp4WithoutVnniForTesting(false);
        }
      }
    }
  }
}

}  // namespace
}  // namespace dsv4::kernels
