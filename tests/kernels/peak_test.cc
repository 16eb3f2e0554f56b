// The peak-rate loops of kernels/peak.h, on every ISA this CPU runs: each
// loop's own arithmetic counts the multiply-adds it did (1 x 1 added per
// multiply-add), which must equal PeakLoopMultiplyAdds, and a timed call
// gives a positive finite rate.
#include "kernels/peak.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "base/cpu_features.h"
#include "ops_test_util.h"

namespace dsv4::kernels {
namespace {

using testing::IsasToTest;
using testing::ScopedIsa;

constexpr PeakMix kMixes[] = {PeakMix::kFp32Fma, PeakMix::kInt8Dot, PeakMix::kBf16Dot};

bool Expected(Isa isa, PeakMix mix) {
  if (mix != PeakMix::kBf16Dot) return true;
  return isa == Isa::kAvx512 && CpuFeatures::Detect().avx512bf16;
}

TEST(PeakLoop, CountsTheMultiplyAddsItPerforms) {
  for (Isa isa : IsasToTest()) {
    ScopedIsa scoped(isa);
    for (PeakMix mix : kMixes) {
      SCOPED_TRACE(std::string(IsaName(isa)) + " " + std::string(PeakMixName(mix)));
      const bool supported = Expected(isa, mix);
      EXPECT_EQ(!PeakMixInstruction(mix).empty(), supported);
      if (!supported) {
        EXPECT_EQ(PeakLoopMultiplyAdds(mix, 100), 0);
        EXPECT_EQ(RunPeakLoop(mix, 100), 0.0);
        continue;
      }
      const int64_t per_iteration = PeakLoopMultiplyAdds(mix, 1);
      EXPECT_GT(per_iteration, 0);
      for (int64_t iterations : {0, 1, 7, 1000}) {
        EXPECT_EQ(PeakLoopMultiplyAdds(mix, iterations), per_iteration * iterations);
        // Every lane stays far below 2^24: the sum is exact.
        EXPECT_EQ(RunPeakLoop(mix, iterations), static_cast<double>(per_iteration * iterations));
      }
    }
  }
}

TEST(PeakLoop, PerIterationCountsMatchTheInstructions) {
  // 16 accumulators on AVX-512 (32 registers), 10 on AVX2; per instruction:
  // FMA 1 per FP32 lane, vpdpbusd (or its AVX2 pair) 4 per INT32 lane,
  // vdpbf16ps 2 per FP32 lane.
  for (Isa isa : IsasToTest()) {
    if (isa == Isa::kScalar) continue;
    ScopedIsa scoped(isa);
    const int64_t lanes = isa == Isa::kAvx512 ? 16 : 8;
    const int64_t chains = isa == Isa::kAvx512 ? 16 : 10;
    EXPECT_EQ(PeakLoopMultiplyAdds(PeakMix::kFp32Fma, 1), chains * lanes);
    EXPECT_EQ(PeakLoopMultiplyAdds(PeakMix::kInt8Dot, 1), chains * 4 * lanes);
    if (Expected(isa, PeakMix::kBf16Dot)) {
      EXPECT_EQ(PeakLoopMultiplyAdds(PeakMix::kBf16Dot, 1), chains * 2 * lanes);
    }
  }
}

TEST(PeakLoop, TimedRunGivesAPositiveFiniteRate) {
  for (Isa isa : IsasToTest()) {
    ScopedIsa scoped(isa);
    for (PeakMix mix : kMixes) {
      if (!Expected(isa, mix)) continue;
      SCOPED_TRACE(std::string(IsaName(isa)) + " " + std::string(PeakMixName(mix)));
      constexpr int64_t kIterations = 200000;
      const auto t0 = std::chrono::steady_clock::now();
      const double sink = RunPeakLoop(mix, kIterations);
      const double sec =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      EXPECT_GT(sink, 0.0);
      const double gflops =
          2.0 * static_cast<double>(PeakLoopMultiplyAdds(mix, kIterations)) / sec / 1e9;
      EXPECT_TRUE(std::isfinite(gflops));
      EXPECT_GT(gflops, 0.0);
    }
  }
}

}  // namespace
}  // namespace dsv4::kernels
