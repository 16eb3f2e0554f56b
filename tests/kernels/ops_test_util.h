// Shared helpers for the non-GEMM kernel tests: the ISAs to sweep, a guard
// that restores the active ISA, and FP32/BF16 comparison utilities.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cpu/gemm_cpu.h"
#include "kernels/dispatch.h"
#include "tensor/numeric.h"
#include "testing/golden.h"

namespace dsv4::testing {

// Every ISA this CPU can run, scalar first.
inline std::vector<kernels::Isa> IsasToTest() {
  std::vector<kernels::Isa> out;
  for (int i = 0; i <= static_cast<int>(kernels::BestSupportedIsa()); ++i) {
    out.push_back(static_cast<kernels::Isa>(i));
  }
  return out;
}

// Forces an ISA for one scope, restoring the previous one after.
// Pins the FP4 GEMMs to the exact integer kernels while alive: the tests of
// their bits (where the CPU has BF16 dot products, Fp4Gemm would run the
// BF16 dot kernel on weights whose scales fit).
class ExactFp4Kernels {
 public:
  ExactFp4Kernels() { kernels::cpu::UseFp4WithoutBf16DotForTesting(true); }
  ~ExactFp4Kernels() { kernels::cpu::UseFp4WithoutBf16DotForTesting(false); }
  ExactFp4Kernels(const ExactFp4Kernels&) = delete;
  ExactFp4Kernels& operator=(const ExactFp4Kernels&) = delete;
};

class ScopedIsa {
 public:
  explicit ScopedIsa(kernels::Isa isa) : saved_(kernels::ActiveIsa()) {
    kernels::SetIsaForTesting(isa);
  }
  ~ScopedIsa() { kernels::SetIsaForTesting(saved_); }
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;

 private:
  kernels::Isa saved_;
};

// Distance in FP32 ulps on a monotonic integer line (+0 == -0).
inline int64_t F32UlpDistance(float a, float b) {
  auto key = [](float v) -> int64_t {
    const uint32_t u = F32ToBits(v);
    const int64_t mag = u & 0x7fffffffu;
    return (u & 0x80000000u) ? -mag : mag;
  };
  return std::llabs(key(a) - key(b));
}

// Golden-tolerance check of README §2: at most max_frac of the elements differ
// at all, and none by more than max_ulp.
inline void ExpectBf16Close(const std::vector<bf16>& got, const std::vector<bf16>& want,
                            int max_ulp, double max_frac, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const int64_t differ = CountUlpDiffs(got, want, 0);
  const int64_t far = CountUlpDiffs(got, want, max_ulp);
  EXPECT_EQ(far, 0) << what << ": elements more than " << max_ulp << " ulp off";
  EXPECT_LE(static_cast<double>(differ), max_frac * static_cast<double>(want.size()))
      << what << ": " << differ << " of " << want.size() << " elements differ";
}

inline std::vector<bf16> ToBf16(const std::vector<float>& v) {
  std::vector<bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = F32ToBf16(v[i]);
  return out;
}

}  // namespace dsv4::testing
