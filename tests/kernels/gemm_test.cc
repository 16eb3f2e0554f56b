// Tests of kernels/gemm.h, part 1: golden/ops §7-§8 vectors for every ISA and
// SIMD-vs-scalar differential tests over awkward sizes and misaligned
// pointers.  Batch invariance and the BF16-numerics variants:
// gemm_batch_test.cc; shared helpers: gemm_test_util.h.
#include "kernels/gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/cpu_features.h"
#include "base/thread_pool.h"
#include "gemm_test_util.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/dispatch.h"
#include "kernels/quant.h"
#include "kernels/ref/gemm_ref.h"
#include "ops_test_util.h"
#include "testing/golden.h"

namespace dsv4::kernels {
namespace {

using namespace ::dsv4::kernels::gemm_testing;  // NOLINT(build/namespaces)

using ::dsv4::testing::OpenGolden;
using ::dsv4::testing::ReadBf16;
using ::dsv4::testing::ReadF32;
using ::dsv4::testing::ReadU8;

constexpr char kOps[] = "golden/ops/ops.safetensors";

// README §2 acceptance for fp8_gemm / fp4_gemm: <= 1 ulp on <= 0.5 %.
void ExpectGemmTolerance(const std::vector<bf16>& got, const std::vector<bf16>& want,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  const UlpStats s = CompareBf16(got.data(), want.data(), static_cast<int64_t>(got.size()));
  EXPECT_LE(s.max_ulp, 1) << what;
  EXPECT_LE(static_cast<double>(s.num_differ), 0.005 * static_cast<double>(got.size()))
      << what << ": " << s.num_differ << " of " << got.size() << " differ";
}

struct GemmCase {
  int64_t m, k, n;
  std::string Name(const std::string& op) const {
    return op + ".m" + std::to_string(m) + "_k" + std::to_string(k) + "_n" + std::to_string(n);
  }
};

// The activation quantization feeding the golden GEMM must itself match.
void CheckActivation(const checkpoint::SafetensorsFile& f, const std::string& name,
                     const GemmCase& c, std::vector<uint8_t>* codes, std::vector<float>* scales) {
  const auto x = ReadBf16(f, name + ".x");
  codes->assign(c.m * c.k, 0);
  scales->assign(c.m * c.k / 128, 0.0f);
  ActQuantFp8(x.data(), c.m, c.k, 128, codes->data(), scales->data());
  EXPECT_EQ(*codes, ReadU8(f, name + ".x_codes")) << name;
  EXPECT_EQ(*scales, ReadF32(f, name + ".x_scale")) << name;
}

TEST(GemmGolden, Fp8Gemm) {
  auto f = OpenGolden(kOps);
  ASSERT_NE(f, nullptr);
  int num_cases = 0;
  for (int64_t m : {1, 3, 17}) {
    for (int64_t k : {256, 384}) {
      for (int64_t n : {128, 200}) {
        const GemmCase c{m, k, n};
        const std::string name = c.Name("fp8_gemm");
        std::vector<uint8_t> x_codes;
        std::vector<float> x_scales;
        CheckActivation(*f, name, c, &x_codes, &x_scales);
        const auto w_codes = ReadU8(*f, name + ".w_codes");
        const auto w_scales = ReadU8(*f, name + ".w_scale_e8m0");
        const auto want = ReadBf16(*f, name + ".y");
        const Fp8Weight w{w_codes.data(), w_scales.data(), n, k};
        std::vector<bf16> got(m * n);
        ref::Fp8Gemm(x_codes.data(), x_scales.data(), m, w, got.data(), nullptr);
        EXPECT_EQ(CompareBf16(got.data(), want.data(), m * n).num_differ, 0) << "ref " << name;
        ThreadPool pool(3);
        for (Isa isa : AllIsas()) {
          IsaScope scope(isa);
          std::fill(got.begin(), got.end(), bf16{0x7fc0});
          Fp8Gemm(x_codes.data(), x_scales.data(), m, w, got.data(), &pool);
          ExpectGemmTolerance(got, want, std::string(IsaName(isa)) + " " + name);
        }
        ++num_cases;
      }
    }
  }
  EXPECT_EQ(num_cases, 12);
}

TEST(GemmGolden, Fp4Gemm) {
  auto f = OpenGolden(kOps);
  ASSERT_NE(f, nullptr);
  const GemmCase cases[] = {
      {1, 256, 128}, {3, 256, 256}, {17, 128, 256}, {5, 512, 200}, {17, 384, 64}};
  for (const GemmCase& c : cases) {
    const std::string name = c.Name("fp4_gemm");
    std::vector<uint8_t> x_codes;
    std::vector<float> x_scales;
    CheckActivation(*f, name, c, &x_codes, &x_scales);
    const auto packed = ReadU8(*f, name + ".w_packed");
    const auto w_scales = ReadU8(*f, name + ".w_scale_e8m0");
    const auto want = ReadBf16(*f, name + ".y");
    const Fp4Weight w{packed.data(), w_scales.data(), c.n, c.k};
    std::vector<bf16> got(c.m * c.n);
    ref::Fp4Gemm(x_codes.data(), x_scales.data(), c.m, w, got.data(), nullptr);
    EXPECT_EQ(CompareBf16(got.data(), want.data(), c.m * c.n).num_differ, 0) << "ref " << name;
    ThreadPool pool(2);
    for (Isa isa : AllIsas()) {
      IsaScope scope(isa);
      std::fill(got.begin(), got.end(), bf16{0x7fc0});
      Fp4Gemm(x_codes.data(), x_scales.data(), c.m, w, got.data(), &pool);
      ExpectGemmTolerance(got, want, std::string(IsaName(isa)) + " " + name);
    }
  }
}

// ---------------------------------------------------------------------------
// Differential tests: every SIMD path against the scalar reference.
//
// Tolerance from the math: both sides add the same terms in FP32 in different
// orders.  A sum of n terms carries an error of at most (n-1)·2^-24·Σ|term|,
// so the two FP32 results differ by at most 2·n·2^-24·S with S = Σ|term|
// (for FP32-weight GEMMs the products themselves are rounded: one more term
// per product, covered by using n = K + 1).  After the BF16 rounding the
// outputs may additionally straddle a rounding boundary: one BF16 ulp.  And
// since FP32 order noise is ~2^-16 of a BF16 ulp on non-cancelling sums, at
// most 1 % of the elements may differ at all.

double Bf16Ulp(double v) {
  const double a = std::fabs(v);
  if (a == 0.0) return std::ldexp(1.0, -133);
  return std::ldexp(1.0, static_cast<int>(std::floor(std::log2(a))) - 7);
}

struct DiffCounter {
  int64_t num_elements = 0;
  int64_t num_differ = 0;
  void ExpectFractionSmall(const std::string& what) const {
    EXPECT_LE(static_cast<double>(num_differ), 0.01 * static_cast<double>(num_elements))
        << what << ": " << num_differ << " of " << num_elements << " elements differ";
  }
};

// got/want BF16, abs_sum[i] = S of element i.
void ExpectBf16WithinBound(const bf16* got, const bf16* want, const std::vector<double>& abs_sum,
                           int64_t terms, const std::string& what, DiffCounter* counter) {
  const double gamma = 2.0 * static_cast<double>(terms) * std::ldexp(1.0, -24);
  for (size_t i = 0; i < abs_sum.size(); ++i) {
    const double g = Bf16ToF32(got[i]), w = Bf16ToF32(want[i]);
    const double bound = gamma * abs_sum[i] + Bf16Ulp(std::max(std::fabs(g), std::fabs(w)));
    ASSERT_LE(std::fabs(g - w), bound) << what << " element " << i << " got " << g << " want " << w;
    counter->num_differ += (got[i].bits != want[i].bits) && !(g == 0.0 && w == 0.0);
  }
  counter->num_elements += static_cast<int64_t>(abs_sum.size());
}

constexpr int64_t kDiffM[] = {0, 1, 2, 3, 5, 8, 15, 16, 17, 31, 32, 33, 70};
constexpr int64_t kDiffN[] = {1, 7, 17, 33, 200};

std::vector<Isa> SimdIsas() {
  std::vector<Isa> out;
  for (Isa isa : AllIsas()) {
    if (isa != Isa::kScalar) out.push_back(isa);
  }
  return out;
}

TEST(GemmDifferential, Fp8GemmMatchesReference) {
  std::mt19937 rng(7);
  std::vector<DiffCounter> counters(SimdIsas().size());
  for (int64_t k : {128, 384}) {
    for (int64_t n : kDiffN) {
      Misaligned codes = RandomBytes(n * k, &rng, 0, 255, true);
      Misaligned scales = RandomBytes(((n + 127) / 128) * (k / 128), &rng, 116, 124, false);
      const Fp8Weight w{codes.data(), scales.data(), n, k};
      std::vector<double> wv(n * k);  // |dequantized weight|
      for (int64_t c = 0; c < n; ++c) {
        for (int64_t i = 0; i < k; ++i) {
          wv[c * k + i] = std::fabs(E4M3ToF32(codes.data()[c * k + i]) *
                                    E8M0ToF32(scales.data()[(c / 128) * (k / 128) + i / 128]));
        }
      }
      for (int64_t m : kDiffM) {
        const QuantizedActivation a = RandomActivation(m, k, &rng);
        std::vector<bf16> want(m * n), got(m * n + 1);
        ref::Fp8Gemm(a.codes.data(), a.scales.data(), m, w, want.data(), nullptr);
        const std::vector<double> xv = AbsActivation(a, m, k);
        std::vector<double> abs_sum(m * n, 0.0);
        for (int64_t r = 0; r < m; ++r) {
          for (int64_t c = 0; c < n; ++c) {
            for (int64_t i = 0; i < k; ++i) abs_sum[r * n + c] += xv[r * k + i] * wv[c * k + i];
          }
        }
        ThreadPool pool(2);
        for (size_t t = 0; t < SimdIsas().size(); ++t) {
          IsaScope scope(SimdIsas()[t]);
          Fp8Gemm(a.codes.data(), a.scales.data(), m, w, got.data() + 1, &pool);
          ExpectBf16WithinBound(got.data() + 1, want.data(), abs_sum, k,
                                std::string(IsaName(SimdIsas()[t])) + " m" + std::to_string(m) +
                                    " k" + std::to_string(k) + " n" + std::to_string(n),
                                &counters[t]);
        }
      }
    }
  }
  for (size_t t = 0; t < counters.size(); ++t)
    counters[t].ExpectFractionSmall(std::string(IsaName(SimdIsas()[t])));
}

// FP4 sums each 32-block exactly (an integer sum, rounded once), so every
// ISA, every M and every thread count must give the reference's bits, on the
// checkpoint's row layout and on the panel layout the model packs at load
// (whose last group is padded when n is not a multiple of 16).
TEST(GemmDifferential, Fp4GemmEqualsReferenceBitwise) {
  const ::dsv4::testing::ExactFp4Kernels exact_kernels;  // these bits: the exact kernels
  std::mt19937 rng(11);
  for (int64_t k : {128, 384}) {
    for (int64_t n : kDiffN) {
      Misaligned packed = RandomBytes(n * k / 2, &rng, 0, 255, false);
      Misaligned scales = RandomBytes(n * k / 32, &rng, 118, 126, false);
      const Fp4Weight w{packed.data(), scales.data(), n, k};
      std::vector<uint8_t> panel_codes(Fp4PanelPackedBytes(n, k));
      std::vector<uint8_t> panel_scales(Fp4PanelScaleBytes(n, k));
      const Fp4Weight panels = PackFp4Panels(w, panel_codes.data(), panel_scales.data());
      for (int64_t m : kDiffM) {
        const QuantizedActivation a = RandomActivation(m, k, &rng);
        std::vector<bf16> want(m * n), got(m * n + 1);
        ref::Fp4Gemm(a.codes.data(), a.scales.data(), m, w, want.data(), nullptr);
        ref::Fp4Gemm(a.codes.data(), a.scales.data(), m, panels, got.data() + 1, nullptr);
        EXPECT_EQ(CompareBf16(got.data() + 1, want.data(), m * n).num_differ, 0)
            << "reference on panels, m" << m << " k" << k << " n" << n;
        ThreadPool pool(3);
        for (Isa isa : SimdIsas()) {
          IsaScope scope(isa);
          // AVX-512 also without VBMI and without VNNI (variant 1, 2).
          for (int variant : {0, 1, 2}) {
            cpu::UseFp4WithoutVbmiForTesting(variant == 1);
            cpu::UseFp4WithoutVnniForTesting(variant == 2);
            for (const Fp4Weight* weight : {&w, &panels}) {
              std::fill(got.begin(), got.end(), bf16{});
              Fp4Gemm(a.codes.data(), a.scales.data(), m, *weight, got.data() + 1, &pool);
              EXPECT_EQ(CompareBf16(got.data() + 1, want.data(), m * n).num_differ, 0)
                  << IsaName(isa) << " m" << m << " k" << k << " n" << n << " " << variant
                  << (weight == &panels ? " panels" : " rows");
            }
          }
          cpu::UseFp4WithoutVbmiForTesting(false);
          cpu::UseFp4WithoutVnniForTesting(false);
        }
      }
    }
  }
}

// The panel layout (docs/kernels.md): group block g = c/16·in/128 + kb is
// 1 KiB at g·1024, byte b of column c's 128-block at (b/4)·64 + (c%16)·4 + b%4
// in it; its scales at (g·16 + c%16)·4; a padded last group of +0 codes with
// scale 2^0.
TEST(Fp4Panels, LayoutAndPadding) {
  std::mt19937 rng(5);
  const int64_t n = 20, k = 256;
  Misaligned packed = RandomBytes(n * k / 2, &rng, 0, 255, false);
  Misaligned scales = RandomBytes(n * k / 32, &rng, 0, 255, false);
  const Fp4Weight w{packed.data(), scales.data(), n, k};
  ASSERT_EQ(Fp4PanelPackedBytes(n, k), 32 * k / 2);
  ASSERT_EQ(Fp4PanelScaleBytes(n, k), 32 * k / 32 + 1);  // the scales, then the flag byte
  std::vector<uint8_t> codes(Fp4PanelPackedBytes(n, k)), sc(Fp4PanelScaleBytes(n, k), 0xee);
  const Fp4Weight p = PackFp4Panels(w, codes.data(), sc.data());
  EXPECT_EQ(p.layout, Fp4Layout::kPanels);
  // Random scale bytes include ones outside [33, 252]: the flag says so.
  EXPECT_EQ(sc.back(), 0);
  EXPECT_FALSE(Fp4PanelsFitBf16(p));
  const std::vector<uint8_t> random_scales(scales.data(), scales.data() + n * k / 32);
  for (int64_t i = 0; i < n * k / 32; ++i) scales.data()[i] = static_cast<uint8_t>(33 + i % 220);
  PackFp4Panels(w, codes.data(), sc.data());
  EXPECT_EQ(sc.back(), 1);
  EXPECT_TRUE(Fp4PanelsFitBf16(p));
  std::copy(random_scales.begin(), random_scales.end(), scales.data());
  PackFp4Panels(w, codes.data(), sc.data());
  for (int64_t c = 0; c < 32; ++c) {
    for (int64_t kb = 0; kb < k / 128; ++kb) {
      // Group block g·(k/128) + kb is 1 KiB: byte b of the column's 64 at
      // chunk b/4 (64 bytes each), the column's 4 bytes at 4·(c % 16).
      const int64_t group_block = (c / 16) * (k / 128) + kb;
      for (int64_t b = 0; b < 64; ++b) {
        ASSERT_EQ(codes[group_block * 1024 + (b / 4) * 64 + (c % 16) * 4 + b % 4],
                  c < n ? packed.data()[c * k / 2 + kb * 64 + b] : 0)
            << c << " " << kb << " " << b;
      }
      const int64_t at = group_block * 16 + c % 16;
      for (int64_t j = 0; j < 4; ++j) {
        ASSERT_EQ(sc[at * 4 + j], c < n ? scales.data()[c * k / 32 + kb * 4 + j] : 127);
      }
    }
  }
  for (int64_t c = 0; c < n; ++c) {
    for (int64_t j = 0; j < k / 32; ++j) {
      ASSERT_EQ(Fp4ScaleOf(p, c, j), Fp4ScaleOf(w, c, j));
      ASSERT_EQ(Fp4CodesOf(p, c, j), Fp4CodesOf(w, c, j));
    }
  }
}

// The BF16 dot kernel's activations: the AVX-512 VBMI decoder writes the
// scalar one's bits (every code twice, NaNs and both zeros included) into
// the same block-major places, and nothing else (row 1 of 3: rows 0 and 2
// keep their fill).
TEST(Fp8DotActivations, Avx512VbmiEqualsScalarBitwise) {
  const CpuFeatures cpu = CpuFeatures::Detect();
  if (BestSupportedIsa() != Isa::kAvx512 || !cpu.avx512vbmi) GTEST_SKIP() << "no AVX512-VBMI";
  constexpr int64_t kIn = 512, kRows = 3;
  std::vector<uint8_t> codes(kIn);
  for (int64_t i = 0; i < kIn; ++i) codes[i] = static_cast<uint8_t>((i * 37 + i / 256) & 0xff);
  std::vector<bf16> want(kRows * kIn, bf16{0x1234}), got = want;
  cpu::Fp8DotActivationsScalar(codes.data(), nullptr, kIn, kRows, 1, want.data());
  cpu::Fp8DotActivationsAvx512Vbmi(codes.data(), nullptr, kIn, kRows, 1, got.data());
  for (int64_t i = 0; i < kRows * kIn; ++i) {
    ASSERT_EQ(got[i].bits, want[i].bits) << i;
    // Row 1's block kb sits at (kb·3 + 1)·128; the rest keeps its fill.
    ASSERT_EQ(want[i].bits == 0x1234, i / 128 % 3 != 1) << i;
  }
}

// With the row's block scales folded in (Fp8GemmArgs::x_scaled): the
// AVX-512 VBMI decoder writes the scalar one's bits, which are each code's
// value times its block's scale exactly (NaNs and zeros as they were), for
// scales across the fold range, its two ends included.
TEST(Fp8DotActivations, ScaledAvx512VbmiEqualsScalarAndIsExact) {
  constexpr int64_t kIn = 768, kRows = 2;
  std::vector<uint8_t> codes(kIn);
  for (int64_t i = 0; i < kIn; ++i) codes[i] = static_cast<uint8_t>((i * 53 + i / 256) & 0xff);
  const std::vector<float> scales = {cpu::kFp8FoldMinScale, 0x1p-9f, 1.0f, 0x1p17f, 0x1p63f,
                                     cpu::kFp8FoldMaxScale};
  ASSERT_EQ(static_cast<int64_t>(scales.size()), kIn / 128);
  std::vector<bf16> want(kRows * kIn, bf16{0x1234});
  cpu::Fp8DotActivationsScalar(codes.data(), scales.data(), kIn, kRows, 1, want.data());
  for (int64_t kb = 0; kb < kIn / 128; ++kb) {
    for (int64_t i = 0; i < 128; ++i) {
      const uint8_t c = codes[kb * 128 + i];
      const float v = Bf16ToF32(want[(kb * kRows + 1) * 128 + i]);
      if ((c & 0x7f) == 0x7f) {
        ASSERT_TRUE(std::isnan(v)) << int{c};
      } else {
        ASSERT_EQ(v, E4M3ToF32(c) * scales[kb]) << int{c} << " block " << kb;
        ASSERT_EQ(std::signbit(v), (c & 0x80) != 0) << int{c};
      }
    }
  }
  const CpuFeatures cpu = CpuFeatures::Detect();
  if (BestSupportedIsa() != Isa::kAvx512 || !cpu.avx512vbmi) GTEST_SKIP() << "no AVX512-VBMI";
  std::vector<bf16> got(kRows * kIn, bf16{0x1234});
  cpu::Fp8DotActivationsAvx512Vbmi(codes.data(), scales.data(), kIn, kRows, 1, got.data());
  for (int64_t i = 0; i < kRows * kIn; ++i) ASSERT_EQ(got[i].bits, want[i].bits) << i;
}

// The FP8 panel layout (docs/kernels.md): a group's blocks are 2 KiB each
// from (c/16·in/128)·2048 on, in pairs (2i, 2i + 1) whose 32 chunks of 64
// bytes alternate, an odd last block's chunks side by side; element e of
// column c's 128-block is element e % 2 of K pair e/2, in chunk e/4 at byte
// 16·(w/8) + 8·(e/2 % 2) + w % 8 with w = 2·(c % 16) + e % 2; a padded last
// group of +0 codes; the scales untouched.  Three blocks: one pair, one
// alone.
TEST(Fp8Panels, LayoutAndPadding) {
  std::mt19937 rng(6);
  const int64_t n = 20, k = 384;
  Misaligned codes = RandomBytes(n * k, &rng, 0, 255, false);
  Misaligned scales = RandomBytes(1 * (k / 128), &rng, 0, 255, false);
  const Fp8Weight w{codes.data(), scales.data(), n, k};
  ASSERT_EQ(Fp8PanelBytes(n, k), 32 * k);
  std::vector<uint8_t> packed(Fp8PanelBytes(n, k), 0xaa);
  const Fp8Weight p = PackFp8Panels(w, packed.data());
  EXPECT_EQ(p.layout, Fp8Layout::kPanels);
  EXPECT_EQ(p.scales, w.scales);
  for (int64_t c = 0; c < 32; ++c) {
    for (int64_t i = 0; i < k; ++i) {
      const int64_t kb = i / 128, e = i % 128;
      const int64_t pair_at = ((c / 16) * (k / 128) + kb / 2 * 2) * 2048;
      const int64_t chunk_at = kb == 2 ? (e / 4) * 64 : (e / 4) * 128 + (kb % 2) * 64;
      const int64_t word = 2 * (c % 16) + e % 2;
      const int64_t at = pair_at + chunk_at + 16 * (word / 8) + 8 * (e / 2 % 2) + word % 8;
      ASSERT_EQ(packed[at], c < n ? codes.data()[c * k + i] : 0) << c << " " << i;
      if (c < n) {
        ASSERT_EQ(Fp8CodeOf(p, c, i), Fp8CodeOf(w, c, i));
      }
    }
  }
  std::vector<uint8_t> rows(n * k);
  const Fp8Weight r = UnpackFp8Rows(p, rows.data());
  EXPECT_EQ(r.layout, Fp8Layout::kRows);
  EXPECT_EQ(std::memcmp(rows.data(), codes.data(), rows.size()), 0);
}

// The sums are exact where a sequential FP32 sum is not: in row 0 against
// columns 0-15, each 32-block is 16 products ±448·6 (the sign alternating
// between blocks) and then 16 products 2^-9·0.5, each under half an ulp of
// the running sum; a sequential FP32 sum drops them all and the blocks
// cancel to 0, the exact sums leave 16·2^-10 per block.  Rows 1-2 cover
// every e4m3 code (NaN codes aside) against random e2m1 codes.  Bitwise the
// reference on every ISA, and the reference is the exact sum.
TEST(GemmDifferential, Fp4SumsAreExact) {
  const ::dsv4::testing::ExactFp4Kernels exact_kernels;  // these bits: the exact kernels
  constexpr int64_t k = 256, n = 48;
  std::mt19937 rng(3);
  std::vector<uint8_t> packed(n * k / 2), scales(n * k / 32, 127);
  for (auto& b : packed) b = static_cast<uint8_t>(rng());
  for (int64_t c = 0; c < 16; ++c) {  // columns 0-15: 16 of ±6, then 16 of 0.5
    for (int64_t b = 0; b < k / 2; ++b) {
      packed[c * (k / 2) + b] = b % 16 >= 8 ? 0x11 : (b / 16) % 2 == 0 ? 0x77 : 0xff;
    }
  }
  constexpr int64_t m = 3;
  std::vector<uint8_t> x_codes(m * k);
  for (int64_t i = 0; i < k; ++i) {
    x_codes[i] = i % 32 < 16 ? 0x7e : 0x01;                      // 448s, then 2^-9s
    x_codes[k + i] = static_cast<uint8_t>(i);                    // every code (0x7f: NaN below)
    x_codes[2 * k + i] = static_cast<uint8_t>((i * 37) & 0xff);  // shuffled
  }
  for (int64_t r = 1; r < m; ++r) {
    for (int64_t i = 0; i < k; ++i) {
      uint8_t& c = x_codes[r * k + i];
      if ((c & 0x7f) == 0x7f) c &= 0xfe;
    }
  }
  const std::vector<float> x_scales(m * k / 128, 1.0f);
  const Fp4Weight w{packed.data(), scales.data(), n, k};
  std::vector<bf16> want(m * n), got(m * n);
  ref::Fp4Gemm(x_codes.data(), x_scales.data(), m, w, want.data(), nullptr);
  for (int64_t c = 0; c < 16; ++c) {  // row 0: the exact sum (a double holds it exactly)
    double exact = 0.0;
    for (int64_t i = 0; i < k; ++i) {
      const uint8_t byte = packed[c * (k / 2) + i / 2];
      exact += static_cast<double>(E4M3ToF32(x_codes[i])) *
               E2M1ToF32(static_cast<uint8_t>((i & 1) ? byte >> 4 : byte & 0xf));
    }
    EXPECT_NE(exact, 0.0);
    EXPECT_EQ(want[c].bits, F32ToBf16(static_cast<float>(exact)).bits) << "column " << c;
  }
  ThreadPool pool(2);
  for (Isa isa : SimdIsas()) {
    IsaScope scope(isa);
    for (int64_t r = 0; r < m; ++r) {  // each row alone (the one-row path), then all rows
      Fp4Gemm(x_codes.data() + r * k, x_scales.data() + r * (k / 128), 1, w, got.data() + r * n,
              nullptr);
    }
    EXPECT_EQ(CompareBf16(got.data(), want.data(), m * n).num_differ, 0) << IsaName(isa);
    Fp4Gemm(x_codes.data(), x_scales.data(), m, w, got.data(), &pool);
    EXPECT_EQ(CompareBf16(got.data(), want.data(), m * n).num_differ, 0) << IsaName(isa);
  }
}

TEST(GemmDifferential, DenseGemmsMatchReference) {
  std::mt19937 rng(13);
  std::vector<DiffCounter> counters(SimdIsas().size());
  for (int64_t k : {1, 15, 17, 130, 300}) {
    for (int64_t n : kDiffN) {
      const DenseWeights w = RandomDense(n * k, &rng);
      for (int64_t m : kDiffM) {
        const int64_t ldx = k + 3, ldy = n + 2;
        const std::vector<bf16> x = RandomBf16(m * ldx, &rng);
        std::vector<bf16> xc(m * k);  // contiguous copy for the unstrided APIs
        for (int64_t r = 0; r < m; ++r) std::memcpy(&xc[r * k], &x[r * ldx], k * sizeof(bf16));
        std::vector<double> sum_bf16(m * n, 0.0), sum_f32(m * n, 0.0);
        for (int64_t r = 0; r < m; ++r) {
          for (int64_t c = 0; c < n; ++c) {
            for (int64_t i = 0; i < k; ++i) {
              const double xv = Bf16ToF32(x[r * ldx + i]);
              sum_bf16[r * n + c] += std::fabs(xv * w.Bf16At(c * k + i));
              sum_f32[r * n + c] += std::fabs(xv * w.F32At(c * k + i));
            }
          }
        }
        std::vector<bf16> want_y(m * ldy), got_y(m * ldy);
        std::vector<float> want_f(m * n), got_f(m * n);
        ref::GemmBf16(x.data(), ldx, m, k, w.Bf16(), n, want_y.data(), ldy, nullptr);
        ThreadPool pool(2);
        for (size_t t = 0; t < SimdIsas().size(); ++t) {
          const std::string what = std::string(IsaName(SimdIsas()[t])) + " m" + std::to_string(m) +
                                   " k" + std::to_string(k) + " n" + std::to_string(n);
          IsaScope scope(SimdIsas()[t]);
          std::vector<bf16> got_rows(m * n), want_rows(m * n);
          std::fill(got_y.begin(), got_y.end(), bf16{0x1234});
          GemmBf16(x.data(), ldx, m, k, w.Bf16(), n, got_y.data(), ldy, &pool);
          for (int64_t r = 0; r < m; ++r) {
            for (int64_t c = 0; c < n; ++c) {
              got_rows[r * n + c] = got_y[r * ldy + c];
              want_rows[r * n + c] = want_y[r * ldy + c];
            }
            for (int64_t c = n; c < ldy; ++c) ASSERT_EQ(got_y[r * ldy + c].bits, 0x1234) << what;
          }
          ExpectBf16WithinBound(got_rows.data(), want_rows.data(), sum_bf16, k, "GemmBf16 " + what,
                                &counters[t]);
          ref::GemmBf16F32(xc.data(), m, k, w.Bf16(), n, want_f.data(), nullptr);
          GemmBf16F32(xc.data(), m, k, w.Bf16(), n, got_f.data(), &pool);
          ExpectF32WithinBound(got_f.data(), want_f.data(), sum_bf16, k, "GemmBf16F32 " + what);
          ref::GemmBf16xF32(xc.data(), m, k, w.F32(), n, want_f.data(), nullptr);
          GemmBf16xF32(xc.data(), m, k, w.F32(), n, got_f.data(), &pool);
          ExpectF32WithinBound(got_f.data(), want_f.data(), sum_f32, k + 1, "GemmBf16xF32 " + what);
        }
      }
    }
  }
  for (size_t t = 0; t < counters.size(); ++t)
    counters[t].ExpectFractionSmall(std::string(IsaName(SimdIsas()[t])));
}

// Every E8M0 scale byte with every e2m1 code, alone in its row and against one
// activation element (1, 448 and the smallest e4m3 subnormal): the result
// must equal, bit for bit, (e2m1·x)·2^(s-127) (the exact block sum, then the
// weight scale: the reference's expression), including subnormal results,
// overflow to infinity and the NaN scale 255 (any NaN).  A zero sum gives +0.
TEST(GemmDifferential, Fp4EveryScaleAndCodeExact) {
  const ::dsv4::testing::ExactFp4Kernels exact_kernels;  // these bits: the exact kernels
  constexpr int64_t k = 128, n = 256 * 16;
  std::vector<uint8_t> packed(n * k / 2, 0), scales(n * k / 32, 127);
  for (int64_t s = 0; s < 256; ++s) {
    for (int64_t c = 0; c < 16; ++c) {
      const int64_t row = s * 16 + c;
      packed[row * (k / 2)] = static_cast<uint8_t>(c);
      scales[row * (k / 32)] = static_cast<uint8_t>(s);
    }
  }
  const Fp4Weight w{packed.data(), scales.data(), n, k};
  const uint8_t x_first[] = {0x38, 0x7e, 0x01, 0xb8};  // 1, 448, 2^-9, -1
  const int64_t m = 4;
  std::vector<uint8_t> x_codes(m * k, 0);
  std::vector<float> x_scales(m, 1.0f);
  for (int64_t r = 0; r < m; ++r) x_codes[r * k] = x_first[r];
  ThreadPool pool(2);
  for (Isa isa : SimdIsas()) {
    IsaScope scope(isa);
    std::vector<bf16> got(m * n);
    Fp4Gemm(x_codes.data(), x_scales.data(), m, w, got.data(), &pool);
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t row = 0; row < n; ++row) {
        const int64_t s = row / 16, c = row % 16;
        float p = (E2M1ToF32(static_cast<uint8_t>(c)) * E4M3ToF32(x_first[r])) *
                  E8M0ToF32(static_cast<uint8_t>(s));
        if (p == 0.0f) p = 0.0f;  // +0 + -0 = +0
        const bf16 g = got[r * n + row];
        if (std::isnan(p)) {
          EXPECT_TRUE(std::isnan(Bf16ToF32(g))) << IsaName(isa) << " s" << s << " c" << c;
        } else {
          EXPECT_EQ(g.bits, F32ToBf16(p).bits) << IsaName(isa) << " x" << r << " s" << s << " c"
                                               << c << " want " << p << " got " << Bf16ToF32(g);
        }
      }
    }
  }
}

// Every e4m3 weight code (subnormals, ±0, ±448; not the NaN codes, which
// checkpoints do not hold and the FMA kernel reads as finite) at its own place in
// its row, against activations that vary by position: every output is one exact
// product, so every kernel (the BF16 dot one and the FMA one, one row, a few
// rows, a tile) must give it exactly; this pins the dot kernel's decode
// tables and its activation order (a product paired with the wrong position
// meets a zero).
TEST(GemmDifferential, Fp8EveryCodeExact) {
  constexpr int64_t k = 256, n = 256;
  std::vector<uint8_t> codes(n * k, 0), scales((n / 128) * (k / 128), 127);
  const auto is_nan = [](int64_t c) { return (c & 0x7f) == 0x7f; };
  for (int64_t c = 0; c < n; ++c) {
    if (!is_nan(c)) codes[c * k + (c * 37) % k] = static_cast<uint8_t>(c);
  }
  // 1, 448, 2^-9, -1, 7·2^-9 (largest subnormal), 2^-6 (smallest normal).
  const uint8_t x_code[] = {0x38, 0x7e, 0x01, 0xb8, 0x07, 0x08};
  constexpr int64_t kRows = 6;
  std::vector<uint8_t> x_codes(kRows * k);
  // Row r, position i: x_code[(r + i) % kRows], so a product taken at the
  // wrong position has the wrong value.
  const auto x_at = [&](int64_t r, int64_t i) { return x_code[(r + i) % kRows]; };
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t i = 0; i < k; ++i) x_codes[r * k + i] = x_at(r, i);
  }
  const std::vector<float> x_scales(kRows * (k / 128), 1.0f);
  ThreadPool pool(2);
  // The weight in rows 64-byte aligned and 1, 16 and 63 bytes past (the
  // checkpoint's tensors sit anywhere), and in the panel layout (offset -1);
  // each kernel converts the layout it does not read.
  std::vector<uint8_t> store(n * k + 128), panels(Fp8PanelBytes(n, k));
  const uintptr_t aligned = (reinterpret_cast<uintptr_t>(store.data()) + 63) & ~uintptr_t{63};
  for (int64_t offset : {0, 1, 16, 63, -1}) {
    uint8_t* at = reinterpret_cast<uint8_t*>(aligned) + std::max<int64_t>(offset, 0);
    std::copy(codes.begin(), codes.end(), at);
    Fp8Weight w{at, scales.data(), n, k};
    if (offset < 0) w = PackFp8Panels(w, panels.data());
    for (Isa isa : SimdIsas()) {
      IsaScope scope(isa);
      for (bool fma : {false, true}) {
        cpu::UseFp8WithoutBf16DotForTesting(fma);
        for (int64_t m : {int64_t{1}, int64_t{3}, kRows}) {
          std::vector<bf16> got(m * n);
          Fp8Gemm(x_codes.data(), x_scales.data(), m, w, got.data(), &pool);
          for (int64_t r = 0; r < m; ++r) {
            for (int64_t c = 0; c < n; ++c) {
              float p = is_nan(c)
                            ? 0.0f
                            : E4M3ToF32(static_cast<uint8_t>(c)) * E4M3ToF32(x_at(r, (c * 37) % k));
              if (p == 0.0f) p = 0.0f;  // +0 + -0 = +0
              const bf16 g = got[r * n + c];
              EXPECT_EQ(g.bits, F32ToBf16(p).bits)
                  << IsaName(isa) << (fma ? " fma" : "") << " offset " << offset << " m" << m
                  << " row " << r << " code " << c << " want " << p << " got " << Bf16ToF32(g);
            }
          }
        }
      }
      cpu::UseFp8WithoutBf16DotForTesting(false);
    }
  }
}

}  // namespace
}  // namespace dsv4::kernels
