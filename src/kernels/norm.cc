#include "kernels/norm.h"

#include "kernels/cpu/ops_cpu.h"
#include "kernels/dispatch.h"
#include "kernels/ref/norm_ref.h"

namespace dsv4::kernels {

void RmsNorm(const bf16* x, int64_t rows, int64_t dim, const bf16* w, float eps, bf16* y) {
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      return cpu::RmsNormAvx512(x, rows, dim, w, eps, y);
    case Isa::kAvx2:
      return cpu::RmsNormAvx2(x, rows, dim, w, eps, y);
    case Isa::kScalar:
      break;
  }
  ref::RmsNorm(x, rows, dim, w, eps, y);
}

// The scalar sum of 32K rounded squares per token is a latency-bound chain
// (~2 ms per decode token over 43 layers), hence the SIMD versions.
void QHeadRms(bf16* q, int64_t rows, int64_t dim, float eps) {
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      return cpu::QHeadRmsAvx512(q, rows, dim, eps);
    case Isa::kAvx2:
      return cpu::QHeadRmsAvx2(q, rows, dim, eps);
    case Isa::kScalar:
      break;
  }
  ref::QHeadRms(q, rows, dim, eps);
}

}  // namespace dsv4::kernels
