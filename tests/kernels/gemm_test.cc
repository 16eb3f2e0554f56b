// Tests of kernels/gemm.h: golden/ops §7-§8 vectors for every ISA,
// SIMD-vs-scalar differential tests over awkward sizes and misaligned
// pointers, and batch invariance (a row's result never depends on M or on the
// thread count).
#include "kernels/gemm.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/thread_pool.h"
#include "kernels/dispatch.h"
#include "kernels/quant.h"
#include "kernels/ref/gemm_ref.h"
#include "testing/golden.h"

namespace dsv4::kernels {
namespace {

using ::dsv4::testing::OpenGolden;
using ::dsv4::testing::ReadBf16;
using ::dsv4::testing::ReadF32;
using ::dsv4::testing::ReadU8;

constexpr char kOps[] = "golden/ops/ops.safetensors";

std::vector<Isa> AllIsas() {
  std::vector<Isa> out;
  for (int i = 0; i <= static_cast<int>(BestSupportedIsa()); ++i) out.push_back(static_cast<Isa>(i));
  return out;
}

class IsaScope {
 public:
  explicit IsaScope(Isa isa) : saved_(ActiveIsa()) { SetIsaForTesting(isa); }
  ~IsaScope() { SetIsaForTesting(saved_); }
  IsaScope(const IsaScope&) = delete;
  IsaScope& operator=(const IsaScope&) = delete;

 private:
  Isa saved_;
};

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
void CheckActivation(const SafetensorsFile& f, const std::string& name, const GemmCase& c,
                     std::vector<uint8_t>* codes, std::vector<float>* scales) {
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
  const GemmCase cases[] = {{1, 256, 128}, {3, 256, 256}, {17, 128, 256}, {5, 512, 200},
                            {17, 384, 64}};
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

}  // namespace
}  // namespace dsv4::kernels
