#include "kernels/ref/mhc_ref.h"

#include <algorithm>
#include <cmath>

namespace dsv4::kernels::ref {

namespace {

float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// C [hc, hc] row-major: softmax per row + eps, column pass, then iters-1
// (row, column) rounds, eps added to every later sum (docs/model.md "Block and mHC").
void Sinkhorn(float* c, int64_t hc, int64_t iters, float eps) {
  for (int64_t j = 0; j < hc; ++j) {
    float* row = c + j * hc;
    float mx = row[0];
    for (int64_t k = 1; k < hc; ++k) mx = std::max(mx, row[k]);
    float sum = 0.0f;
    for (int64_t k = 0; k < hc; ++k) {
      row[k] = std::exp(row[k] - mx);
      sum += row[k];
    }
    for (int64_t k = 0; k < hc; ++k) row[k] = row[k] / sum + eps;
  }
  auto col_pass = [&] {
    for (int64_t k = 0; k < hc; ++k) {
      float sum = 0.0f;
      for (int64_t j = 0; j < hc; ++j) sum += c[j * hc + k];
      const float denom = sum + eps;
      for (int64_t j = 0; j < hc; ++j) c[j * hc + k] /= denom;
    }
  };
  col_pass();
  for (int64_t it = 1; it < iters; ++it) {
    for (int64_t j = 0; j < hc; ++j) {
      float sum = 0.0f;
      for (int64_t k = 0; k < hc; ++k) sum += c[j * hc + k];
      const float denom = sum + eps;
      for (int64_t k = 0; k < hc; ++k) c[j * hc + k] /= denom;
    }
    col_pass();
  }
}

}  // namespace

void HcMixes(const bf16* x, int64_t tokens, int64_t width, const float* fn, int64_t n_mix,
             float eps, float* mixes) {
  for (int64_t t = 0; t < tokens; ++t) {
    const bf16* v = x + t * width;
    float sum_sq = 0.0f;
    for (int64_t i = 0; i < width; ++i) {
      const float a = Bf16ToF32(v[i]);
      sum_sq += a * a;
    }
    const float inv = 1.0f / std::sqrt(sum_sq / static_cast<float>(width) + eps);
    for (int64_t n = 0; n < n_mix; ++n) {
      const float* f = fn + n * width;
      float dot = 0.0f;
      for (int64_t i = 0; i < width; ++i) dot += Bf16ToF32(v[i]) * f[i];
      mixes[t * n_mix + n] = dot * inv;
    }
  }
}

void HcSplitSinkhorn(const float* mixes, int64_t tokens, int64_t hc, const float* scale,
                     const float* base, int64_t iters, float eps, float* pre, float* post,
                     float* comb) {
  const int64_t n_mix = (2 + hc) * hc;
  for (int64_t t = 0; t < tokens; ++t) {
    const float* m = mixes + t * n_mix;
    for (int64_t j = 0; j < hc; ++j) {
      pre[t * hc + j] = Sigmoid(m[j] * scale[0] + base[j]) + eps;
      post[t * hc + j] = 2.0f * Sigmoid(m[hc + j] * scale[1] + base[hc + j]);
    }
    float* c = comb + t * hc * hc;
    for (int64_t i = 0; i < hc * hc; ++i) c[i] = m[2 * hc + i] * scale[2] + base[2 * hc + i];
    Sinkhorn(c, hc, iters, eps);
  }
}

void HcWeightedSum(const bf16* x, int64_t tokens, int64_t hc, int64_t dim, const float* pre,
                   bf16* y) {
  for (int64_t t = 0; t < tokens; ++t) {
    const bf16* xt = x + t * hc * dim;
    const float* p = pre + t * hc;
    for (int64_t d = 0; d < dim; ++d) {
      float acc = p[0] * Bf16ToF32(xt[d]);
      for (int64_t j = 1; j < hc; ++j) acc += p[j] * Bf16ToF32(xt[j * dim + d]);
      y[t * dim + d] = F32ToBf16(acc);
    }
  }
}

void HcPost(const bf16* f, const bf16* res, int64_t tokens, int64_t hc, int64_t dim,
            const float* post, const float* comb, bf16* y) {
  for (int64_t t = 0; t < tokens; ++t) {
    const bf16* ft = f + t * dim;
    const bf16* rt = res + t * hc * dim;
    const float* c = comb + t * hc * hc;
    for (int64_t k = 0; k < hc; ++k) {
      const float pk = post[t * hc + k];
      bf16* yk = y + (t * hc + k) * dim;
      for (int64_t d = 0; d < dim; ++d) {
        float mix = c[k] * Bf16ToF32(rt[d]);
        for (int64_t j = 1; j < hc; ++j) mix += c[j * hc + k] * Bf16ToF32(rt[j * dim + d]);
        yk[d] = F32ToBf16(pk * Bf16ToF32(ft[d]) + mix);
      }
    }
  }
}

void HcHeadPre(const float* mixes, int64_t tokens, int64_t hc, float scale0, const float* base,
               float eps, float* pre) {
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < hc; ++j) {
      pre[t * hc + j] = Sigmoid(mixes[t * hc + j] * scale0 + base[j]) + eps;
    }
  }
}

}  // namespace dsv4::kernels::ref
