// Tests of kernels/gemm.h: golden/ops §7-§8 vectors for every ISA,
// SIMD-vs-scalar differential tests over awkward sizes and misaligned
// pointers, and batch invariance (a row's result never depends on M or on the
// thread count).
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
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/dispatch.h"
#include "kernels/quant.h"
#include "kernels/ref/gemm_ref.h"
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

// BF16 ulp distance on the monotonic integer line (+0 == -0).
int64_t Bf16UlpDistance(bf16 a, bf16 b) {
  auto key = [](bf16 v) -> int64_t {
    const int64_t mag = v.bits & 0x7fff;
    return (v.bits & 0x8000) ? -mag : mag;
  };
  return std::llabs(key(a) - key(b));
}

struct UlpStats {
  int64_t num_differ = 0;
  int64_t max_ulp = 0;
};

UlpStats CompareBf16(const bf16* got, const bf16* want, int64_t n) {
  UlpStats s;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t d = Bf16UlpDistance(got[i], want[i]);
    s.num_differ += d != 0;
    s.max_ulp = std::max(s.max_ulp, d);
  }
  return s;
}

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

void ExpectF32WithinBound(const float* got, const float* want, const std::vector<double>& abs_sum,
                          int64_t terms, const std::string& what) {
  const double gamma = 2.0 * static_cast<double>(terms) * std::ldexp(1.0, -24);
  for (size_t i = 0; i < abs_sum.size(); ++i) {
    ASSERT_LE(std::fabs(static_cast<double>(got[i]) - want[i]), gamma * abs_sum[i])
        << what << " element " << i << " got " << got[i] << " want " << want[i];
  }
}

// Random BF16 activations quantized by the (golden-tested) reference:
// rows ~N(0,1)·10^U(-2,2), every fifth row zero.
struct QuantizedActivation {
  std::vector<uint8_t> codes;  // [m, k]
  std::vector<float> scales;   // [m, k/128]
};

QuantizedActivation RandomActivation(int64_t m, int64_t k, std::mt19937* rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> decade(-2.0f, 2.0f);
  std::vector<bf16> x(m * k);
  for (int64_t r = 0; r < m; ++r) {
    const float scale = (r % 5 == 4) ? 0.0f : std::pow(10.0f, decade(*rng));
    for (int64_t i = 0; i < k; ++i) x[r * k + i] = F32ToBf16(normal(*rng) * scale);
  }
  QuantizedActivation a;
  a.codes.resize(m * k);
  a.scales.resize(m * k / 128);
  ActQuantFp8(x.data(), m, k, 128, a.codes.data(), a.scales.data());
  return a;
}

// |q·s| of every activation element, [m, k].
std::vector<double> AbsActivation(const QuantizedActivation& a, int64_t m, int64_t k) {
  std::vector<double> v(m * k);
  for (int64_t i = 0; i < m * k; ++i) v[i] = std::fabs(E4M3ToF32(a.codes[i]) * a.scales[i / 128]);
  return v;
}

// Random bytes at a deliberately odd address (safetensors offsets).
struct Misaligned {
  std::vector<uint8_t> storage;
  uint8_t* data() { return storage.data() + 1; }
};

Misaligned RandomBytes(int64_t n, std::mt19937* rng, uint8_t lo, uint8_t hi, bool no_nan) {
  std::uniform_int_distribution<int> byte(lo, hi);
  Misaligned b;
  b.storage.resize(n + 1);
  for (int64_t i = 0; i < n; ++i) {
    uint8_t v = static_cast<uint8_t>(byte(*rng));
    if (no_nan && (v & 0x7f) == 0x7f) v &= 0xfe;  // e4m3 NaN codes
    b.storage[i + 1] = v;
  }
  return b;
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
// ISA, every M and every thread count must give the reference's bits.
TEST(GemmDifferential, Fp4GemmEqualsReferenceBitwise) {
  std::mt19937 rng(11);
  for (int64_t k : {128, 384}) {
    for (int64_t n : kDiffN) {
      Misaligned packed = RandomBytes(n * k / 2, &rng, 0, 255, false);
      Misaligned scales = RandomBytes(n * k / 32, &rng, 118, 126, false);
      const Fp4Weight w{packed.data(), scales.data(), n, k};
      for (int64_t m : kDiffM) {
        const QuantizedActivation a = RandomActivation(m, k, &rng);
        std::vector<bf16> want(m * n), got(m * n + 1);
        ref::Fp4Gemm(a.codes.data(), a.scales.data(), m, w, want.data(), nullptr);
        ThreadPool pool(3);
        for (Isa isa : SimdIsas()) {
          IsaScope scope(isa);
          // AVX-512 also without VBMI and without VNNI (variant 1, 2).
          for (int variant : {0, 1, 2}) {
            cpu::UseFp4WithoutVbmiForTesting(variant == 1);
            cpu::UseFp4WithoutVnniForTesting(variant == 2);
            Fp4Gemm(a.codes.data(), a.scales.data(), m, w, got.data() + 1, &pool);
            EXPECT_EQ(CompareBf16(got.data() + 1, want.data(), m * n).num_differ, 0)
                << IsaName(isa) << " m" << m << " k" << k << " n" << n << " " << variant;
          }
          cpu::UseFp4WithoutVbmiForTesting(false);
          cpu::UseFp4WithoutVnniForTesting(false);
        }
      }
    }
  }
}

// The sums are exact where a sequential FP32 sum is not: in row 0 against
// columns 0-15, each 32-block is 16 products ±448·6 (the sign alternating
// between blocks) and then 16 products 2^-9·0.5, each under half an ulp of
// the running sum; a sequential FP32 sum drops them all and the blocks
// cancel to 0, the exact sums leave 16·2^-10 per block.  Rows 1-2 cover
// every e4m3 code (NaN codes aside) against random e2m1 codes.  Bitwise the
// reference on every ISA, and the reference is the exact sum.
TEST(GemmDifferential, Fp4SumsAreExact) {
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

std::vector<bf16> RandomBf16(int64_t n, std::mt19937* rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<bf16> v(n);
  for (auto& e : v) e = F32ToBf16(normal(*rng));
  return v;
}

// Dense weights at misaligned addresses: BF16 at an odd byte, FP32 at 2 mod 4.
struct DenseWeights {
  std::vector<uint8_t> bf16_storage, f32_storage;
  const bf16* Bf16() const { return reinterpret_cast<const bf16*>(bf16_storage.data() + 1); }
  const float* F32() const { return reinterpret_cast<const float*>(f32_storage.data() + 2); }
  float F32At(int64_t i) const {
    float v;
    std::memcpy(&v, f32_storage.data() + 2 + 4 * i, 4);
    return v;
  }
  float Bf16At(int64_t i) const {
    uint16_t u;
    std::memcpy(&u, bf16_storage.data() + 1 + 2 * i, 2);
    return Bf16ToF32(bf16{u});
  }
};

DenseWeights RandomDense(int64_t n, std::mt19937* rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  DenseWeights d;
  d.bf16_storage.resize(2 * n + 1);
  d.f32_storage.resize(4 * n + 2);
  for (int64_t i = 0; i < n; ++i) {
    const float v = normal(*rng);
    const uint16_t u = F32ToBf16(v).bits;
    std::memcpy(d.bf16_storage.data() + 1 + 2 * i, &u, 2);
    std::memcpy(d.f32_storage.data() + 2 + 4 * i, &v, 4);
  }
  return d;
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

// ---------------------------------------------------------------------------
// Batch invariance: on every ISA, row r of an M-row call is bitwise equal to
// the M = 1 call on that row alone, for 1, 2 and 3 threads.  N is large
// enough that the thread pool really splits the panels; M = 2..4 take the
// few-row path (a verify step's tail and drafts), M = 13 mixes row pairs and
// a single tail row, M = 65 crosses a 64-row tile and ends with a one-row
// tile (the GEMV code path inside a batch), M = 67 with a three-row tile.

template <typename T, typename Call>
void ExpectRowsInvariant(int64_t m, int64_t n, Call call, const std::string& what) {
  for (Isa isa : AllIsas()) {
    // The scalar reference is a plain per-element loop; one size suffices.
    if (isa == Isa::kScalar && m > 16) continue;
    IsaScope scope(isa);
    std::vector<T> single(m * n);
    for (int64_t r = 0; r < m; ++r) call(r, 1, single.data() + r * n, nullptr);
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      std::vector<T> batch(m * n);
      call(0, m, batch.data(), &pool);
      ASSERT_EQ(std::memcmp(batch.data(), single.data(), m * n * sizeof(T)), 0)
          << what << " " << IsaName(isa) << " threads " << threads;
    }
  }
}

// Every E8M0 scale byte with every e2m1 code, alone in its row and against one
// activation element (1, 448 and the smallest e4m3 subnormal): the result
// must equal, bit for bit, (e2m1·x)·2^(s-127) (the exact block sum, then the
// weight scale: the reference's expression), including subnormal results,
// overflow to infinity and the NaN scale 255 (any NaN).  A zero sum gives +0.
TEST(GemmDifferential, Fp4EveryScaleAndCodeExact) {
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
  // The weight 64-byte aligned and 1, 16 and 63 bytes past (the dot
  // kernel's one-row walk reads misaligned rows through aligned lines).
  std::vector<uint8_t> store(n * k + 128);
  const uintptr_t aligned = (reinterpret_cast<uintptr_t>(store.data()) + 63) & ~uintptr_t{63};
  for (int64_t offset : {0, 1, 16, 63}) {
    uint8_t* at = reinterpret_cast<uint8_t*>(aligned) + offset;
    std::copy(codes.begin(), codes.end(), at);
    const Fp8Weight w{at, scales.data(), n, k};
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

// BlockScaledGemmBatch is the separate Fp8Gemm / Fp4Gemm calls, bit for bit:
// mixed kinds, shared and distinct activations, M = 0, 1, 3 and 70 (two row
// blocks), every ISA and thread count.
TEST(GemmBatch, EqualsOneCallPerGemm) {
  std::mt19937 rng(41);
  constexpr int64_t k4 = 256, k8 = 384;
  struct Weights {
    Misaligned codes, scales;
  };
  std::vector<Fp4Weight> w4;
  std::vector<Fp8Weight> w8;
  std::vector<Weights> keep;
  for (int64_t n : {33, 200, 128}) {
    keep.push_back({RandomBytes(n * k4 / 2, &rng, 0, 255, false),
                    RandomBytes(n * k4 / 32, &rng, 118, 126, false)});
    w4.push_back({keep.back().codes.data(), keep.back().scales.data(), n, k4});
  }
  for (int64_t n : {17, 256}) {
    keep.push_back({RandomBytes(n * k8, &rng, 0, 255, true),
                    RandomBytes(((n + 127) / 128) * (k8 / 128), &rng, 116, 124, false)});
    w8.push_back({keep.back().codes.data(), keep.back().scales.data(), n, k8});
  }
  for (int64_t m : {0, 1, 3, 70}) {
    const QuantizedActivation a4 = RandomActivation(m, k4, &rng);
    const QuantizedActivation b4 = RandomActivation(m + 1, k4, &rng);
    const QuantizedActivation a8 = RandomActivation(m, k8, &rng);
    struct Entry {
      const QuantizedActivation* a;
      int64_t m;
      const Fp8Weight* fp8;
      const Fp4Weight* fp4;
    };
    // w4[0] and w4[1] share a4 (one decode); w8[0] and w8[1] share a8.
    const std::vector<Entry> entries = {{&a4, m, nullptr, &w4[0]}, {&a8, m, &w8[0], nullptr},
                                        {&a4, m, nullptr, &w4[1]}, {&b4, m + 1, nullptr, &w4[2]},
                                        {&a8, m, &w8[1], nullptr}, {&a4, m, nullptr, &w4[2]}};
    for (Isa isa : AllIsas()) {
      if (isa == Isa::kScalar && m > 3) continue;
      IsaScope scope(isa);
      std::vector<std::vector<bf16>> want, got;
      for (const Entry& e : entries) {
        const int64_t out = e.fp4 != nullptr ? e.fp4->out : e.fp8->out;
        want.emplace_back(e.m * out, bf16{0x1234});
        if (e.fp4 != nullptr) {
          Fp4Gemm(e.a->codes.data(), e.a->scales.data(), e.m, *e.fp4, want.back().data(), nullptr);
        } else {
          Fp8Gemm(e.a->codes.data(), e.a->scales.data(), e.m, *e.fp8, want.back().data(), nullptr);
        }
      }
      for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        std::vector<BlockScaledGemm> batch;
        got.clear();
        for (const Entry& e : entries) {
          const int64_t out = e.fp4 != nullptr ? e.fp4->out : e.fp8->out;
          got.emplace_back(e.m * out, bf16{0x1234});
          batch.push_back(
              {e.a->codes.data(), e.a->scales.data(), e.m, e.fp8, e.fp4, got.back().data()});
        }
        BlockScaledGemmBatch(batch.data(), static_cast<int64_t>(batch.size()), &pool);
        for (size_t i = 0; i < entries.size(); ++i) {
          ASSERT_EQ(got[i].size(), want[i].size());
          // An m = 0 entry's empty vectors may hold a null data(), which memcmp must not see.
          EXPECT_TRUE(got[i].empty() ||
                      std::memcmp(got[i].data(), want[i].data(), got[i].size() * sizeof(bf16)) == 0)
              << IsaName(isa) << " m" << m << " entry " << i << " threads " << threads;
        }
      }
    }
  }
}

TEST(GemmBatchInvariance, AllKernels) {
  std::mt19937 rng(17);
  const int64_t n = 1100;
  for (int64_t m : {2, 3, 4, 13, 65, 67}) {
    const int64_t k = 512;
    const QuantizedActivation a = RandomActivation(m, k, &rng);
    Misaligned codes = RandomBytes(n * k, &rng, 0, 255, true);
    Misaligned fp8_scales = RandomBytes(((n + 127) / 128) * (k / 128), &rng, 116, 124, false);
    const Fp8Weight w8{codes.data(), fp8_scales.data(), n, k};
    ExpectRowsInvariant<bf16>(
        m, n,
        [&](int64_t r0, int64_t rows, bf16* y, ThreadPool* pool) {
          Fp8Gemm(a.codes.data() + r0 * k, a.scales.data() + r0 * (k / 128), rows, w8, y, pool);
        },
        "Fp8Gemm m" + std::to_string(m));
    Misaligned packed = RandomBytes(n * k / 2, &rng, 0, 255, false);
    Misaligned fp4_scales = RandomBytes(n * k / 32, &rng, 118, 126, false);
    const Fp4Weight w4{packed.data(), fp4_scales.data(), n, k};
    ExpectRowsInvariant<bf16>(
        m, n,
        [&](int64_t r0, int64_t rows, bf16* y, ThreadPool* pool) {
          Fp4Gemm(a.codes.data() + r0 * k, a.scales.data() + r0 * (k / 128), rows, w4, y, pool);
        },
        "Fp4Gemm m" + std::to_string(m));
    const int64_t kd = 300;
    const DenseWeights wd = RandomDense(n * kd, &rng);
    const std::vector<bf16> x = RandomBf16(m * kd, &rng);
    ExpectRowsInvariant<bf16>(
        m, n,
        [&](int64_t r0, int64_t rows, bf16* y, ThreadPool* pool) {
          GemmBf16(x.data() + r0 * kd, kd, rows, kd, wd.Bf16(), n, y, n, pool);
        },
        "GemmBf16 m" + std::to_string(m));
    ExpectRowsInvariant<float>(
        m, n,
        [&](int64_t r0, int64_t rows, float* y, ThreadPool* pool) {
          GemmBf16F32(x.data() + r0 * kd, rows, kd, wd.Bf16(), n, y, pool);
        },
        "GemmBf16F32 m" + std::to_string(m));
    ExpectRowsInvariant<float>(
        m, n,
        [&](int64_t r0, int64_t rows, float* y, ThreadPool* pool) {
          GemmBf16xF32(x.data() + r0 * kd, rows, kd, wd.F32(), n, y, pool);
        },
        "GemmBf16xF32 m" + std::to_string(m));
  }
}

}  // namespace
}  // namespace dsv4::kernels

namespace dsv4::kernels {
namespace {

// Inputs whose dot products cancel: in every 128-block the products at j and
// j + 64 (j < 56) are exact negatives of each other and large (~10^5), the
// other 16 products tiny (~2^-11).  What survives is the rounding residue of
// the large partial sums, which depends on the summation order in nearly
// every output: any order difference between code paths shows up bitwise
// (random data would only flip a BF16 output once in ~10^4).
enum class Slot { kBig, kMirror, kTiny };
Slot SlotOf(int64_t k) {
  const int64_t j = k % 128;
  if (j < 56) return Slot::kBig;
  if (j >= 64 && j < 120) return Slot::kMirror;
  return Slot::kTiny;
}

struct CancellingFp8 {
  std::vector<uint8_t> x_codes, w_codes, w_scales, w_packed, w4_scales;
  std::vector<float> x_scales;
};

CancellingFp8 MakeCancelling(int64_t m, int64_t n, int64_t k, std::mt19937* rng) {
  std::uniform_int_distribution<int> big(0x60, 0x7e), tiny(0x01, 0x0f), nibble(4, 7);
  CancellingFp8 c;
  c.x_codes.resize(m * k);
  c.w_codes.resize(n * k);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t i = 0; i < k; ++i) {
      const uint8_t sign = static_cast<uint8_t>((*rng)() & 0x80);
      const Slot s = SlotOf(i);
      c.x_codes[r * k + i] = s == Slot::kMirror ? c.x_codes[r * k + i - 64]
                             : s == Slot::kBig  ? static_cast<uint8_t>(big(*rng) | sign)
                                                : static_cast<uint8_t>(0x08 | sign);
    }
  }
  std::vector<uint8_t> nibbles(n * k);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t i = 0; i < k; ++i) {
      const uint8_t sign = static_cast<uint8_t>((*rng)() & 0x80);
      const Slot s = SlotOf(i);
      c.w_codes[r * k + i] = s == Slot::kMirror ? c.w_codes[r * k + i - 64] ^ 0x80
                             : s == Slot::kBig  ? static_cast<uint8_t>(big(*rng) | sign)
                                                : static_cast<uint8_t>(tiny(*rng) | sign);
      nibbles[r * k + i] = s == Slot::kMirror ? nibbles[r * k + i - 64] ^ 0x8
                           : s == Slot::kBig  ? static_cast<uint8_t>(nibble(*rng) | (sign >> 4))
                                              : static_cast<uint8_t>(0x1 | (sign >> 4));
    }
  }
  c.x_scales.assign(m * k / 128, 1.0f);
  c.w_scales.assign(((n + 127) / 128) * (k / 128), 127);
  c.w4_scales.assign(n * k / 32, 127);
  c.w_packed.resize(n * k / 2);
  for (int64_t i = 0; i < n * k / 2; ++i) {
    c.w_packed[i] = static_cast<uint8_t>(nibbles[2 * i] | (nibbles[2 * i + 1] << 4));
  }
  return c;
}

// The FP8 one-row path walks each column over stretches of 32 K blocks
// (GemvPanel): K = 33 blocks makes a full and a one-block stretch, N = 131 a
// last panel of a column pair and a single column; M = 3 compares it with
// the few-row path, on random and on order-sensitive data.
TEST(GemmBatchInvariance, Fp8GemvLongRows) {
  std::mt19937 rng(37);
  const int64_t m = 3, n = 131, k = 33 * 128;
  const QuantizedActivation a = RandomActivation(m, k, &rng);
  Misaligned codes = RandomBytes(n * k, &rng, 0, 255, true);
  Misaligned scales = RandomBytes(((n + 127) / 128) * (k / 128), &rng, 116, 124, false);
  const Fp8Weight w{codes.data(), scales.data(), n, k};
  ExpectRowsInvariant<bf16>(
      m, n,
      [&](int64_t r0, int64_t rows, bf16* y, ThreadPool* pool) {
        Fp8Gemm(a.codes.data() + r0 * k, a.scales.data() + r0 * (k / 128), rows, w, y, pool);
      },
      "Fp8Gemm long rows");
  const CancellingFp8 c = MakeCancelling(m, n, k, &rng);
  const Fp8Weight wc{c.w_codes.data(), c.w_scales.data(), n, k};
  ExpectRowsInvariant<bf16>(
      m, n,
      [&](int64_t r0, int64_t rows, bf16* y, ThreadPool* pool) {
        Fp8Gemm(c.x_codes.data() + r0 * k, c.x_scales.data() + r0 * (k / 128), rows, wc, y, pool);
      },
      "Fp8Gemm cancelling long rows");
  // Block sums that depend on the order the blocks are added in: +B, tiny,
  // -B (the exact mirror), tiny, ... (tiny < half an ulp of B), so the
  // result is the tiny blocks after the last cancellation only in K order.
  std::vector<uint8_t> xb(m * k), wb(n * k);
  for (int64_t i = 0; i < k; ++i) {
    const int64_t j = i / 128;
    const bool big = j % 2 == 0 && j + 1 < k / 128;
    for (int64_t r = 0; r < m; ++r) xb[r * k + i] = big ? 0x70 : 0x08;  // 128 or 2^-6
    for (int64_t col = 0; col < n; ++col) {
      const uint8_t sign = static_cast<uint8_t>((col * 7 + i) & 0x80);
      const uint8_t flip = j % 4 == 2 ? 0x80 : 0;
      wb[col * k + i] = big ? static_cast<uint8_t>(0x70 | (sign ^ flip)) : 0x08;
    }
  }
  const std::vector<float> sb(m * k / 128, 1.0f);
  const std::vector<uint8_t> wsb(((n + 127) / 128) * (k / 128), 127);
  const Fp8Weight wo{wb.data(), wsb.data(), n, k};
  ExpectRowsInvariant<bf16>(
      m, n,
      [&](int64_t r0, int64_t rows, bf16* y, ThreadPool* pool) {
        Fp8Gemm(xb.data() + r0 * k, sb.data() + r0 * (k / 128), rows, wo, y, pool);
      },
      "Fp8Gemm block-order sensitive long rows");
}

TEST(GemmBatchInvariance, OrderSensitiveData) {
  std::mt19937 rng(23);
  const int64_t m = 13, n = 1100, k = 256;
  const CancellingFp8 c = MakeCancelling(m, n, k, &rng);
  // The data must really be order sensitive: the SIMD paths, which sum in a
  // different order than the reference, differ from it in most outputs.
  std::vector<bf16> want(m * n), got(m * n);
  ref::Fp8Gemm(c.x_codes.data(), c.x_scales.data(), m,
               Fp8Weight{c.w_codes.data(), c.w_scales.data(), n, k}, want.data(), nullptr);
  if (BestSupportedIsa() != Isa::kScalar) {
    IsaScope scope(BestSupportedIsa());
    Fp8Gemm(c.x_codes.data(), c.x_scales.data(), m,
            Fp8Weight{c.w_codes.data(), c.w_scales.data(), n, k}, got.data(), nullptr);
    EXPECT_GT(CompareBf16(got.data(), want.data(), m * n).num_differ, m * n / 4);
  }
  const Fp8Weight w8{c.w_codes.data(), c.w_scales.data(), n, k};
  const Fp4Weight w4{c.w_packed.data(), c.w4_scales.data(), n, k};
  // The first 2..4 rows take the few-row path, all 13 the tiled one.
  for (const int64_t rows_m : {int64_t{2}, int64_t{3}, int64_t{4}, m}) {
    ExpectRowsInvariant<bf16>(
        rows_m, n,
        [&](int64_t r0, int64_t rows, bf16* y, ThreadPool* pool) {
          Fp8Gemm(c.x_codes.data() + r0 * k, c.x_scales.data() + r0 * (k / 128), rows, w8, y, pool);
        },
        "Fp8Gemm cancelling m" + std::to_string(rows_m));
    ExpectRowsInvariant<bf16>(
        rows_m, n,
        [&](int64_t r0, int64_t rows, bf16* y, ThreadPool* pool) {
          Fp4Gemm(c.x_codes.data() + r0 * k, c.x_scales.data() + r0 * (k / 128), rows, w4, y, pool);
        },
        "Fp4Gemm cancelling m" + std::to_string(rows_m));
  }
  // The same pattern in BF16 for the dense kernels.
  std::vector<bf16> x(m * k), wb(n * k);
  for (int64_t i = 0; i < m * k; ++i) x[i] = F32ToBf16(E4M3ToF32(c.x_codes[i]));
  for (int64_t i = 0; i < n * k; ++i) wb[i] = F32ToBf16(E4M3ToF32(c.w_codes[i]));
  // Row subsets: the one-row calls take the column-by-column GEMV.
  for (const int64_t rows_m : {int64_t{2}, int64_t{3}, int64_t{4}, m}) {
    ExpectRowsInvariant<bf16>(
        rows_m, n,
        [&](int64_t r0, int64_t rows, bf16* y, ThreadPool* pool) {
          GemmBf16(x.data() + r0 * k, k, rows, k, wb.data(), n, y, n, pool);
        },
        "GemmBf16 cancelling m" + std::to_string(rows_m));
  }
}

// Narrow outputs of long batches (the mHC mixes: N = 24) are split over row
// blocks instead of panels; the rows must still not notice.
TEST(GemmBatchInvariance, NarrowOutputSplitOverRows) {
  std::mt19937 rng(19);
  const int64_t m = 200, n = 24, k = 4096;
  const DenseWeights w = RandomDense(n * k, &rng);
  const std::vector<bf16> x = RandomBf16(m * k, &rng);
  ExpectRowsInvariant<float>(
      m, n,
      [&](int64_t r0, int64_t rows, float* y, ThreadPool* pool) {
        GemmBf16xF32(x.data() + r0 * k, rows, k, w.F32(), n, y, pool);
      },
      "GemmBf16xF32 narrow");
}

// ---------------------------------------------------------------------------
// GemmBf16Fp8 reads the FP8 weight in place and must equal GemmBf16 on the
// dequantized BF16 copy bit for bit, on every ISA (scalar included), for any
// M, thread count, strides and misaligned codes.

TEST(GemmBf16Fp8, EqualsGemmBf16OnDequantizedWeight) {
  std::mt19937 rng(29);
  for (int64_t k : {128, 384}) {
    for (int64_t n : {1, 17, 130, 300}) {
      Misaligned codes = RandomBytes(n * k, &rng, 0, 255, true);
      const int64_t ld_scale = k / 128;
      Misaligned scales = RandomBytes(((n + 127) / 128) * ld_scale, &rng, 112, 128, false);
      scales.data()[0] = 10;  // the exact range's ends
      if (n > 128) scales.data()[ld_scale] = 246;
      const Fp8Weight w{codes.data(), scales.data(), n, k};
      ASSERT_TRUE(Fp8IsExactBf16(w));
      std::vector<bf16> deq(n * k);
      for (int64_t c = 0; c < n; ++c) {
        for (int64_t i = 0; i < k; ++i) {
          const float v = E4M3ToF32(codes.data()[c * k + i]) *
                          E8M0ToF32(scales.data()[(c / 128) * ld_scale + i / 128]);
          deq[c * k + i] = F32ToBf16(v);
          ASSERT_EQ(Bf16ToF32(deq[c * k + i]), v);
        }
      }
      for (int64_t m : {1, 2, 13, 65}) {
        const int64_t ldx = k + 3, ldy = n + 2;
        const std::vector<bf16> x = RandomBf16(m * ldx, &rng);
        for (Isa isa : AllIsas()) {
          if (isa == Isa::kScalar && m > 13) continue;
          IsaScope scope(isa);
          std::vector<bf16> want(m * ldy, bf16{0x1234});
          GemmBf16(x.data(), ldx, m, k, deq.data(), n, want.data(), ldy, nullptr);
          for (int threads : {1, 2, 3}) {
            ThreadPool pool(threads);
            std::vector<bf16> got(m * ldy, bf16{0x1234});
            GemmBf16Fp8(x.data(), ldx, m, w, got.data(), ldy, &pool);
            ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(bf16)), 0)
                << IsaName(isa) << " m" << m << " k" << k << " n" << n << " threads " << threads;
          }
        }
      }
    }
  }
}

// The grouped entry point (wo_a in one dispatch) is the per-group calls,
// bit for bit, whichever ISA, M, thread count, strides and group count
// (tiles straddle group boundaries when a thread's chunk does).
TEST(GemmBf16Fp8, GroupedEqualsOneCallPerGroup) {
  std::mt19937 rng(31);
  for (int64_t groups : {1, 3}) {
    for (int64_t k : {128, 384}) {
      const int64_t rows = 128 * (groups == 1 ? 2 : 1), n = groups * rows;
      Misaligned codes = RandomBytes(n * k, &rng, 0, 255, true);
      Misaligned scales = RandomBytes((n / 128) * (k / 128), &rng, 112, 128, false);
      const Fp8Weight w{codes.data(), scales.data(), n, k};
      ASSERT_TRUE(Fp8IsExactBf16(w));
      for (int64_t m : {1, 2, 13, 70}) {
        const int64_t ldx = groups * k + 5, ldy = n + 3;
        const std::vector<bf16> x = RandomBf16(m * ldx, &rng);
        for (Isa isa : AllIsas()) {
          if (isa == Isa::kScalar && m > 13) continue;
          IsaScope scope(isa);
          std::vector<bf16> want(m * ldy, bf16{0x1234});
          for (int64_t g = 0; g < groups; ++g) {
            const Fp8Weight part{codes.data() + g * rows * k,
                                 scales.data() + g * (rows / 128) * (k / 128), rows, k};
            GemmBf16Fp8(x.data() + g * k, ldx, m, part, want.data() + g * rows, ldy, nullptr);
          }
          for (int threads : {1, 2, 3}) {
            ThreadPool pool(threads);
            std::vector<bf16> got(m * ldy, bf16{0x1234});
            GemmBf16Fp8Grouped(x.data(), ldx, m, groups, w, got.data(), ldy, &pool);
            ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(bf16)), 0)
                << IsaName(isa) << " groups " << groups << " m" << m << " k" << k << " threads "
                << threads;
          }
        }
      }
    }
  }
}

TEST(GemmBf16Fp8, ExactnessCheck) {
  std::vector<uint8_t> codes(256 * 128, 0x38), scales(2, 120);
  const Fp8Weight w{codes.data(), scales.data(), 256, 128};
  EXPECT_TRUE(Fp8IsExactBf16(w));
  for (uint8_t bad_scale : {0, 9, 247, 255}) {
    scales[1] = bad_scale;
    EXPECT_FALSE(Fp8IsExactBf16(w)) << int{bad_scale};
  }
  scales[1] = 246;
  EXPECT_TRUE(Fp8IsExactBf16(w));
  for (uint8_t nan_code : {0x7f, 0xff}) {
    codes[200 * 128 + 5] = nan_code;
    EXPECT_FALSE(Fp8IsExactBf16(w)) << int{nan_code};
  }
}

// The approximate head kernel (MTP draft logits): within the summation-order
// bound of the exact FP32 result, batch and thread-count invariant, and
// GemmBf16F32 itself wherever the CPU or the ISA level lacks AVX512-BF16.
TEST(GemmBf16F32Approx, CloseToExactBatchInvariantExactWithoutBf16Dots) {
  std::mt19937 rng(29);
  const bool dots = BestSupportedIsa() == Isa::kAvx512 && CpuFeatures::Detect().avx512bf16;
  for (int64_t k : {256, 300, 64, 20}) {
    for (int64_t n : {1, 17, 1100}) {
      const DenseWeights w = RandomDense(n * k, &rng);
      for (int64_t m : {1, 2, 3, 4, 5, 9}) {
        const std::vector<bf16> x = RandomBf16(m * k, &rng);
        std::vector<double> abs_sum(m * n, 0.0);
        for (int64_t r = 0; r < m; ++r) {
          for (int64_t c = 0; c < n; ++c) {
            for (int64_t i = 0; i < k; ++i) {
              abs_sum[r * n + c] +=
                  std::fabs(static_cast<double>(Bf16ToF32(x[r * k + i])) * w.Bf16At(c * k + i));
            }
          }
        }
        const std::string what =
            "m" + std::to_string(m) + " n" + std::to_string(n) + " k" + std::to_string(k);
        std::vector<float> want(m * n), exact(m * n), got(m * n);
        ref::GemmBf16F32(x.data(), m, k, w.Bf16(), n, want.data(), nullptr);
        for (Isa isa : AllIsas()) {
          IsaScope scope(isa);
          GemmBf16F32(x.data(), m, k, w.Bf16(), n, exact.data(), nullptr);
          GemmBf16F32Approx(x.data(), m, k, w.Bf16(), n, got.data(), nullptr);
          if (isa == Isa::kAvx512 && dots) {
            ExpectF32WithinBound(got.data(), want.data(), abs_sum, k, "approx " + what);
          } else {
            ASSERT_EQ(std::memcmp(got.data(), exact.data(), got.size() * sizeof(float)), 0)
                << IsaName(isa) << " " << what;
          }
        }
        ExpectRowsInvariant<float>(
            m, n,
            [&](int64_t r0, int64_t rows, float* y, ThreadPool* pool) {
              GemmBf16F32Approx(x.data() + r0 * k, rows, k, w.Bf16(), n, y, pool);
            },
            "approx " + what);
      }
    }
  }
}

}  // namespace
}  // namespace dsv4::kernels
