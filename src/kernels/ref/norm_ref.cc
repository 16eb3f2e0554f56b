#include "kernels/ref/norm_ref.h"

#include <cmath>

namespace dsv4::kernels::ref {

void RmsNorm(const bf16* x, int64_t rows, int64_t dim, const bf16* w, float eps, bf16* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const bf16* xr = x + r * dim;
    bf16* yr = y + r * dim;
    float sum_sq = 0.0f;
    for (int64_t i = 0; i < dim; ++i) {
      const float v = Bf16ToF32(xr[i]);
      sum_sq += v * v;
    }
    // torch.rsqrt on CPU is 1/sqrt in FP32; the mean is an FP32 division.
    const float inv = 1.0f / std::sqrt(sum_sq / static_cast<float>(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) {
      const float normed = Bf16ToF32(xr[i]) * inv;
      yr[i] = F32ToBf16(Bf16ToF32(w[i]) * normed);
    }
  }
}

void QHeadRms(bf16* q, int64_t rows, int64_t dim, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    bf16* qr = q + r * dim;
    float sum_sq = 0.0f;
    for (int64_t i = 0; i < dim; ++i) {
      const float v = Bf16ToF32(qr[i]);
      sum_sq += RoundBf16(v * v);
    }
    float ms = RoundBf16(sum_sq / static_cast<float>(dim));
    ms = RoundBf16(ms + eps);
    const float inv = RoundBf16(1.0f / std::sqrt(ms));
    for (int64_t i = 0; i < dim; ++i) qr[i] = F32ToBf16(Bf16ToF32(qr[i]) * inv);
  }
}

}  // namespace dsv4::kernels::ref
