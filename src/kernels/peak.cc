#include "kernels/peak.h"

#include <cmath>

#include "base/cpu_features.h"
#include "kernels/cpu/peak_cpu.h"
#include "kernels/dispatch.h"

namespace dsv4::kernels {
namespace {

// Scalar ISA: one FP32 FMA chain and one INT32 multiply-add chain per
// accumulator (the reference kernels' arithmetic, one element at a time).
constexpr int64_t kScalarAccumulators = 8;

double ScalarFp32Fma(int64_t iterations) {
  volatile float one_source = 1.0f;  // not a compile-time constant
  const float one = one_source;
  float acc[kScalarAccumulators] = {};
  for (int64_t i = 0; i < iterations; ++i) {
    for (float& a : acc) a = std::fma(one, one, a);
  }
  double sum = 0;
  for (float a : acc) sum += a;
  return sum;
}

double ScalarInt8Dot(int64_t iterations) {
  volatile int32_t one_source = 1;
  const int32_t one = one_source;
  uint32_t acc[kScalarAccumulators] = {};
  for (int64_t i = 0; i < iterations; ++i) {
    for (uint32_t& a : acc) {
      a += static_cast<uint32_t>(one * one);
      asm volatile("" : "+r"(a));  // no closed form for the loop (a = iterations)
    }
  }
  double sum = 0;
  for (uint32_t a : acc) sum += a;
  return sum;
}

const cpu::PeakLoop kScalarFp32Fma = {&ScalarFp32Fma, kScalarAccumulators, "fmaf"};
const cpu::PeakLoop kScalarInt8Dot = {&ScalarInt8Dot, kScalarAccumulators, "imul+add"};
const cpu::PeakLoop kNone = {};

// The loop the active ISA runs for mix (run == nullptr: none).
const cpu::PeakLoop& ActiveLoop(PeakMix mix) {
  static const CpuFeatures features = CpuFeatures::Detect();
  switch (ActiveIsa()) {
    case Isa::kAvx512: {
      const cpu::PeakLoops& t = cpu::kPeakLoopsAvx512;
      if (mix == PeakMix::kFp32Fma) return t.fp32_fma;
      if (mix == PeakMix::kInt8Dot) {
        return features.avx512vnni ? t.int8_dot : t.int8_dot_without_vnni;
      }
      return features.avx512bf16 ? t.bf16_dot : kNone;
    }
    case Isa::kAvx2: {
      const cpu::PeakLoops& t = cpu::kPeakLoopsAvx2;
      if (mix == PeakMix::kFp32Fma) return t.fp32_fma;
      if (mix == PeakMix::kInt8Dot) return t.int8_dot;
      return kNone;
    }
    case Isa::kScalar:
      break;
  }
  if (mix == PeakMix::kFp32Fma) return kScalarFp32Fma;
  if (mix == PeakMix::kInt8Dot) return kScalarInt8Dot;
  return kNone;
}

}  // namespace

std::string_view PeakMixName(PeakMix mix) {
  switch (mix) {
    case PeakMix::kFp32Fma:
      return "fp32 fma";
    case PeakMix::kInt8Dot:
      return "int8 dot";
    case PeakMix::kBf16Dot:
      return "bf16 dot";
  }
  return "?";
}

std::string_view PeakMixInstruction(PeakMix mix) {
  const cpu::PeakLoop& loop = ActiveLoop(mix);
  return loop.run != nullptr ? loop.instruction : "";
}

int64_t PeakLoopMultiplyAdds(PeakMix mix, int64_t iterations) {
  const cpu::PeakLoop& loop = ActiveLoop(mix);
  return loop.run != nullptr ? loop.multiply_adds_per_iteration * iterations : 0;
}

double RunPeakLoop(PeakMix mix, int64_t iterations) {
  const cpu::PeakLoop& loop = ActiveLoop(mix);
  return loop.run != nullptr ? loop.run(iterations) : 0.0;
}

}  // namespace dsv4::kernels
