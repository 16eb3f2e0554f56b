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
// latency (4-5 cycles) on two issue ports, few enough to leave registers for
// the operands on AVX2 (16 registers).
constexpr int64_t kPeakAccumulators = 10;

// Hides v's value from the compiler, so that a multiply by a constant one is
// not folded away and a loop-invariant product (vpmaddubsw of constants) is
// computed at every step instead of once.  Emits no instruction.
template <typename R>
[[gnu::always_inline]] inline void Opaque(R& v) {
  asm volatile("" : "+x"(v));
}

// The 10 accumulators are named variables, not an array: GCC keeps arrays
// of vector accumulators in memory (docs/kernels.md "W8A8 prefill path").
template <typename S>
double RunPeak(int64_t iterations) {
  const S s;
  using A = typename S::Acc;
  A a0 = S::Zero(), a1 = S::Zero(), a2 = S::Zero(), a3 = S::Zero(), a4 = S::Zero();
  A a5 = S::Zero(), a6 = S::Zero(), a7 = S::Zero(), a8 = S::Zero(), a9 = S::Zero();
  // Ten chains with the same start and the same steps would be one value to
  // the compiler, which then runs one chain and copies it: opaque starts
  // keep ten.
  Opaque(a0), Opaque(a1), Opaque(a2), Opaque(a3), Opaque(a4);
  Opaque(a5), Opaque(a6), Opaque(a7), Opaque(a8), Opaque(a9);
  for (int64_t i = 0; i < iterations; ++i) {
    a0 = s.Step(a0);
    a1 = s.Step(a1);
    a2 = s.Step(a2);
    a3 = s.Step(a3);
    a4 = s.Step(a4);
    a5 = s.Step(a5);
    a6 = s.Step(a6);
    a7 = s.Step(a7);
    a8 = s.Step(a8);
    a9 = s.Step(a9);
  }
  return S::Sum(a0) + S::Sum(a1) + S::Sum(a2) + S::Sum(a3) + S::Sum(a4) + S::Sum(a5) + S::Sum(a6) +
         S::Sum(a7) + S::Sum(a8) + S::Sum(a9);
}

template <typename S>
constexpr PeakLoop MakePeakLoop(const char* instruction) {
  return {&RunPeak<S>, kPeakAccumulators * S::kMultiplyAddsPerStep, instruction};
}

}  // namespace
}  // namespace dsv4::kernels::cpu
