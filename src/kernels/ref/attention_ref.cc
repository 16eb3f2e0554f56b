#include "kernels/ref/attention_ref.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace dsv4::kernels::ref {

namespace {

// One (query, head): blocks of 64 list entries, FP32 running max / denominator,
// probabilities rounded to BF16 for P.V only.
void AttendOne(const bf16* qh, int64_t dim, const bf16* const* rows, int64_t list_len, float sink,
               float scale, float* acc, float* pv, bf16* out) {
  const float kNegInf = -std::numeric_limits<float>::infinity();
  float l[kAttnBlock];
  float m = kNegInf;
  float z = 0.0f;
  std::fill(acc, acc + dim, 0.0f);
  for (int64_t b0 = 0; b0 < list_len; b0 += kAttnBlock) {
    const int64_t n = std::min(kAttnBlock, list_len - b0);
    float block_max = kNegInf;
    for (int64_t j = 0; j < n; ++j) {
      const bf16* kv = rows[b0 + j];
      if (kv == nullptr) {
        l[j] = kNegInf;
        continue;
      }
      float dot = 0.0f;
      for (int64_t d = 0; d < dim; ++d) dot += Bf16ToF32(qh[d]) * Bf16ToF32(kv[d]);
      l[j] = dot * scale;
      block_max = std::max(block_max, l[j]);
    }
    const float m_new = std::max(m, block_max);
    const float alpha = std::exp(m - m_new);
    float p_sum = 0.0f;
    std::fill(pv, pv + dim, 0.0f);
    for (int64_t j = 0; j < n; ++j) {
      const float p = std::exp(l[j] - m_new);
      p_sum += p;
      const bf16* kv = rows[b0 + j];
      if (kv == nullptr) continue;
      const float p_bf = RoundBf16(p);
      for (int64_t d = 0; d < dim; ++d) pv[d] += p_bf * Bf16ToF32(kv[d]);
    }
    z = z * alpha + p_sum;
    for (int64_t d = 0; d < dim; ++d) acc[d] = acc[d] * alpha + pv[d];
    m = m_new;
  }
  z += std::exp(sink - m);
  for (int64_t d = 0; d < dim; ++d) out[d] = F32ToBf16(acc[d] / z);
}

}  // namespace

void SparseAttention(const bf16* q, int64_t tokens, int64_t heads, int64_t dim,
                     const bf16* const* kv_rows, int64_t list_len, const float* sink, float scale,
                     bf16* o) {
  std::vector<float> acc(dim), pv(dim);  // [dim] each
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t off = (t * heads + h) * dim;
      AttendOne(q + off, dim, kv_rows + t * list_len, list_len, sink[h], scale, acc.data(),
                pv.data(), o + off);
    }
  }
}

}  // namespace dsv4::kernels::ref
