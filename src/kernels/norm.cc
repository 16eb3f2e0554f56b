#include "kernels/norm.h"

#include "kernels/cpu/ops_cpu.h"
#include "kernels/dispatch.h"
#include "kernels/ref/norm_ref.h"

namespace dsv4::kernels {

void RmsNorm(const bf16* x, int64_t rows, int64_t dim, const bf16* w, float eps, bf16* y) {
  switch (ActiveIsa()) {
    case Isa::kAvx512: return cpu::RmsNormAvx512(x, rows, dim, w, eps, y);
    case Isa::kAvx2: return cpu::RmsNormAvx2(x, rows, dim, w, eps, y);
    case Isa::kScalar: break;
  }
  ref::RmsNorm(x, rows, dim, w, eps, y);
}

// 64 heads x 512 per token with five BF16 roundings: cheap next to wq_b, so
// the scalar reference is the kernel.
void QHeadRms(bf16* q, int64_t rows, int64_t dim, float eps) { ref::QHeadRms(q, rows, dim, eps); }

}  // namespace dsv4::kernels
