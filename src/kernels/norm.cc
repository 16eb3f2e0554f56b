#include "kernels/norm.h"

#include "kernels/cpu/ops_cpu.h"
#include "kernels/ref/norm_ref.h"

namespace dsv4::kernels {

void RmsNorm(const bf16* x, int64_t rows, int64_t dim, const bf16* w, float eps, bf16* y) {
  if (const cpu::OpsKernels* simd = cpu::ActiveOpsKernels()) {
    return simd->rms_norm(x, rows, dim, w, eps, y);
  }
  ref::RmsNorm(x, rows, dim, w, eps, y);
}

// The scalar sum of 32K rounded squares per token is a latency-bound chain
// (~2 ms per decode token over 43 layers), hence the SIMD versions.
void QHeadRms(bf16* q, int64_t rows, int64_t dim, float eps) {
  if (const cpu::OpsKernels* simd = cpu::ActiveOpsKernels()) {
    return simd->q_head_rms(q, rows, dim, eps);
  }
  ref::QHeadRms(q, rows, dim, eps);
}

}  // namespace dsv4::kernels
