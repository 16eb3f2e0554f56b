#include "kernels/ref/moe_ref.h"

#include <algorithm>
#include <cmath>

namespace dsv4::kernels::ref {

void SqrtSoftplus(const float* x, int64_t n, float* s) {
  for (int64_t i = 0; i < n; ++i) {
    // PyTorch softplus (beta 1, threshold 20): identity above the threshold.
    const float sp = x[i] > 20.0f ? x[i] : std::log1p(std::exp(x[i]));
    s[i] = std::sqrt(sp);
  }
}

void SwiGlu(const bf16* gate, const bf16* up, int64_t rows, int64_t dim, float limit,
            const float* row_weight, bf16* h) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < dim; ++i) {
      const float g = std::min(Bf16ToF32(gate[r * dim + i]), limit);
      const float u = std::clamp(Bf16ToF32(up[r * dim + i]), -limit, limit);
      // PyTorch's CPU silu: x / (1 + exp(-x)).
      float t = g / (1.0f + std::exp(-g)) * u;
      if (row_weight != nullptr) t = row_weight[r] * t;
      h[r * dim + i] = F32ToBf16(t);
    }
  }
}

}  // namespace dsv4::kernels::ref
