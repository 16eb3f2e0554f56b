// The one place the non-GEMM SIMD kernels choose an instruction set (built
// with the baseline flags; the tables themselves live in the ISA objects).
#include <atomic>

#include "base/cpu_features.h"
#include "kernels/cpu/ops_cpu.h"
#include "kernels/dispatch.h"

namespace dsv4::kernels::cpu {

const OpsKernels* ActiveOpsKernels() {
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      return &kOpsKernelsAvx512;
    case Isa::kAvx2:
      return &kOpsKernelsAvx2;
    case Isa::kScalar:
      break;
  }
  return nullptr;
}

namespace {
std::atomic<bool>& AttentionWithoutBf16DotSlot() {
  static std::atomic<bool> on{false};
  return on;
}
}  // namespace

AttendHeadsFn ActiveAttendHeads(const OpsKernels& k) {
  static const bool bf16 = CpuFeatures::Detect().avx512bf16;
  const bool dot = k.attend_heads_bf16dot != nullptr && bf16 &&
                   !AttentionWithoutBf16DotSlot().load(std::memory_order_relaxed);
  return dot ? k.attend_heads_bf16dot : k.attend_heads;
}

void UseAttentionWithoutBf16DotForTesting(bool on) {
  AttentionWithoutBf16DotSlot().store(on, std::memory_order_relaxed);
}

}  // namespace dsv4::kernels::cpu
