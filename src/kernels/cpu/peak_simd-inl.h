// The peak-rate loop of kernels/peak.h, written once over a small "step"
// type per instruction mix and ISA (peak_avx2.cc, peak_avx512.cc).  Internal
// linkage only, as in gemm_simd_common-inl.h: each ISA translation unit gets
// its own copy compiled with its own flags.
//
// A step type S provides Acc (the accumulator register), Zero(), Step(acc)
// (one instruction mix adding exactly kMultiplyAddsPerStep multiply-adds of
// 1 x 1 to acc's lanes) and Sum(acc) (its lanes, as a double).
#pragma once

#include <stdint.h>

#include "kernels/cpu/peak_cpu.h"

namespace dsv4::kernels::cpu {
namespace {

// Independent accumulators per loop: enough to cover a multiply-add's
// latency on two issue ports.  AVX-512 has 32 registers and takes 16: with
// 10, vdpbf16ps (latency ~6 cycles on Zen 5) issued 1.65 instead of 2 per
// cycle and vpdpbusd 6 % below its rate, so the peak, and every "% of peak"
// derived from it, was understated by that much (docs/performance.md
// "Peak loops: 16 chains").  AVX2 (16 registers) keeps 10, leaving
// registers for the operands.
constexpr int kPeakChainsAvx2 = 10;
constexpr int kPeakChainsAvx512 = 16;

// Hides v's value from the compiler, so that a multiply by a constant one is
// not folded away and a loop-invariant product (vpmaddubsw of constants) is
// computed at every step instead of once.  Emits no instruction.
template <typename R>
[[gnu::always_inline]] inline void Opaque(R& v) {
  asm volatile("" : "+x"(v));
}

// kChains independent chains of S::Step.  The accumulators are an array
// indexed only by constants of fully unrolled loops, so GCC keeps each in a
// register (an array indexed by a loop counter stays in memory: docs/kernels.md
// "W8A8 prefill path"); the opaque starts stop it from seeing kChains equal
// chains and running one.
template <typename S, int kChains>
double RunPeak(int64_t iterations) {
  const S s;
  using A = typename S::Acc;
  A a[kChains];
#pragma GCC unroll 16
  for (int c = 0; c < kChains; ++c) {
    a[c] = S::Zero();
    Opaque(a[c]);
  }
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int c = 0; c < kChains; ++c) a[c] = s.Step(a[c]);
  }
  double sum = 0;
#pragma GCC unroll 16
  for (int c = 0; c < kChains; ++c) sum += S::Sum(a[c]);
  return sum;
}

template <typename S, int kChains>
constexpr PeakLoop MakePeakLoop(const char* instruction) {
  return {&RunPeak<S, kChains>, kChains * S::kMultiplyAddsPerStep, instruction};
}

}  // namespace
}  // namespace dsv4::kernels::cpu
