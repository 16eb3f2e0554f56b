#include "kernels/mhc.h"

#include "kernels/dispatch.h"
#include "kernels/ref/mhc_ref.h"

namespace dsv4::kernels {

void HcMixes(const bf16* x, int64_t tokens, int64_t width, const float* fn, int64_t n_mix,
             float eps, float* mixes, ThreadPool* pool) {
  ParallelFor(pool, tokens, 1, [&](int64_t begin, int64_t end) {
    ref::HcMixes(x + begin * width, end - begin, width, fn, n_mix, eps, mixes + begin * n_mix);
  });
}

void HcSplitSinkhorn(const float* mixes, int64_t tokens, int64_t hc, const float* scale,
                     const float* base, int64_t iters, float eps, float* pre, float* post,
                     float* comb) {
  ref::HcSplitSinkhorn(mixes, tokens, hc, scale, base, iters, eps, pre, post, comb);
}

void HcWeightedSum(const bf16* x, int64_t tokens, int64_t hc, int64_t dim, const float* pre,
                   bf16* y) {
  ref::HcWeightedSum(x, tokens, hc, dim, pre, y);
}

void HcPost(const bf16* f, const bf16* res, int64_t tokens, int64_t hc, int64_t dim,
            const float* post, const float* comb, bf16* y) {
  ref::HcPost(f, res, tokens, hc, dim, post, comb, y);
}

void HcHeadPre(const float* mixes, int64_t tokens, int64_t hc, float scale0, const float* base,
               float eps, float* pre) {
  ref::HcHeadPre(mixes, tokens, hc, scale0, base, eps, pre);
}

}  // namespace dsv4::kernels
