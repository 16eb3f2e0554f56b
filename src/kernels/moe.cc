#include "kernels/moe.h"

#include "kernels/ref/moe_ref.h"

namespace dsv4::kernels {

// Elementwise and tiny next to the expert GEMMs: the scalar code is the kernel.
void SqrtSoftplus(const float* x, int64_t n, float* s) { ref::SqrtSoftplus(x, n, s); }

void SwiGlu(const bf16* gate, const bf16* up, int64_t rows, int64_t dim, float limit,
            const float* row_weight, bf16* h) {
  ref::SwiGlu(gate, up, rows, dim, limit, row_weight, h);
}

}  // namespace dsv4::kernels
