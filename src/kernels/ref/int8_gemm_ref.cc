#include "kernels/ref/int8_gemm_ref.h"

#include <algorithm>
#include <cmath>

namespace dsv4::kernels::ref {

void ActQuantInt8PerToken(const bf16* x, int64_t m, int64_t k, int8_t* codes, float* scales) {
  for (int64_t r = 0; r < m; ++r) {
    const bf16* row = x + r * k;
    float amax = 0;
    for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(Bf16ToF32(row[i])));
    const float scale = std::max(amax, 1e-4f) / 127.0f;
    scales[r] = scale;
    for (int64_t i = 0; i < k; ++i) {
      // rint under the default mode = round half to even (torch.round).
      const float q = std::rint(Bf16ToF32(row[i]) / scale);
      codes[r * k + i] = static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
    }
  }
}

int32_t Int8Dot(const int8_t* a, const int8_t* b, int64_t k) {
  int32_t acc = 0;
  for (int64_t i = 0; i < k; ++i) acc += static_cast<int32_t>(a[i]) * static_cast<int32_t>(b[i]);
  return acc;
}

void Int8Gemm(const int8_t* x_codes, const float* x_scales, int64_t m, const Int8Weight& w, bf16* y,
              ThreadPool* /*pool*/) {
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t n = 0; n < w.out; ++n) {
      const int32_t acc = Int8Dot(x_codes + r * w.in, w.codes + n * w.in, w.in);
      y[r * w.out + n] = F32ToBf16((static_cast<float>(acc) * x_scales[r]) * w.scales[n]);
    }
  }
}

}  // namespace dsv4::kernels::ref
