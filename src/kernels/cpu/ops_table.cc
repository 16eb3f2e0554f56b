// The one place the non-GEMM SIMD kernels choose an instruction set (built
// with the baseline flags; the tables themselves live in the ISA objects).
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

}  // namespace dsv4::kernels::cpu
