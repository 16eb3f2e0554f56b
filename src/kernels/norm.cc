#include "kernels/norm.h"

#include "kernels/dispatch.h"
#include "kernels/ref/norm_ref.h"

namespace dsv4::kernels {

void RmsNorm(const bf16* x, int64_t rows, int64_t dim, const bf16* w, float eps, bf16* y) {
  ref::RmsNorm(x, rows, dim, w, eps, y);
}

void QHeadRms(bf16* q, int64_t rows, int64_t dim, float eps) { ref::QHeadRms(q, rows, dim, eps); }

}  // namespace dsv4::kernels
