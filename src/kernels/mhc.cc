#include "kernels/mhc.h"

#include <algorithm>

#include "kernels/cpu/ops_cpu.h"
#include "kernels/ref/mhc_ref.h"
#include "kernels/scratch.h"

namespace dsv4::kernels {

// Per token a [n_mix x width] FP32 projection (24 x 16384 in Flash): the rms
// pass is split over tokens, the dot products over (token, mix) items, so a
// single decode token still spreads over the pool.  Each item is one
// fixed-order dot (cpu::DotBf16F32*), hence batch invariant.
void HcMixes(const bf16* x, int64_t tokens, int64_t width, const float* fn, int64_t n_mix,
             float eps, float* mixes, ThreadPool* pool) {
  const cpu::OpsKernels* simd = cpu::ActiveOpsKernels();
  if (simd == nullptr) {
    ParallelFor(pool, tokens, 1, [&](int64_t begin, int64_t end) {
      ref::HcMixes(x + begin * width, end - begin, width, fn, n_mix, eps, mixes + begin * n_mix);
    });
    return;
  }
  struct Tag {};
  float* inv =
      ScratchArray<Tag, float>::Get(static_cast<size_t>(tokens));  // [tokens], not the heap
  ParallelFor(pool, tokens, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const bf16* v = x + t * width;
      inv[t] = simd->inv_rms(v, width, eps);
    }
  });
  // Tokens in groups of 4 (or pairs), each fn row read once per group (fn is
  // [24, 16384] FP32 on Flash, 1.5 MB: L3, read by every token of every mHC
  // pre otherwise).  Every grouping gives each token DotBf16F32's bits.
  const int64_t per = simd->dot4_bf16_f32 != nullptr ? 4 : 2;
  const int64_t groups = (tokens + per - 1) / per;
  ParallelFor(pool, groups * n_mix, 2, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t t0 = per * (i / n_mix), m = i % n_mix;
      const float* f = fn + m * width;
      float dots[4];
      int64_t t = t0;
      if (per == 4 && t + 4 <= tokens) {
        simd->dot4_bf16_f32(x + t * width, width, f, width, dots);
        for (int64_t r = 0; r < 4; ++r) mixes[(t + r) * n_mix + m] = dots[r] * inv[t + r];
        continue;
      }
      for (; t + 2 <= std::min(tokens, t0 + per); t += 2) {
        simd->dot2_bf16_f32(x + t * width, width, f, width, dots);
        mixes[t * n_mix + m] = dots[0] * inv[t];
        mixes[(t + 1) * n_mix + m] = dots[1] * inv[t + 1];
      }
      if (t < std::min(tokens, t0 + per)) {
        mixes[t * n_mix + m] = simd->dot_bf16_f32(x + t * width, f, width) * inv[t];
      }
    }
  });
}

void HcSplitSinkhorn(const float* mixes, int64_t tokens, int64_t hc, const float* scale,
                     const float* base, int64_t iters, float eps, float* pre, float* post,
                     float* comb) {
  ref::HcSplitSinkhorn(mixes, tokens, hc, scale, base, iters, eps, pre, post, comb);
}

// Elementwise (4 x 4096 and 16 x 4096 multiply-adds per token): the SIMD
// versions keep the reference's per-element order and are bitwise equal to it.
void HcWeightedSum(const bf16* x, int64_t tokens, int64_t hc, int64_t dim, const float* pre,
                   bf16* y) {
  if (const cpu::OpsKernels* simd = cpu::ActiveOpsKernels()) {
    return simd->hc_weighted_sum(x, tokens, hc, dim, pre, y);
  }
  ref::HcWeightedSum(x, tokens, hc, dim, pre, y);
}

// Columns of one token per HcPost task: 4 x 1,024 outputs of 5 multiply-adds
// each (~4 us), so a decode token's 4,096 columns make 4 tasks instead of
// ~17 us on the caller while the pool waits (86 calls per token on Flash).
constexpr int64_t kHcPostColumns = 1024;

void HcPost(const bf16* f, const bf16* res, int64_t tokens, int64_t hc, int64_t dim,
            const float* post, const float* comb, bf16* y, ThreadPool* pool) {
  const cpu::OpsKernels* simd = cpu::ActiveOpsKernels();
  if (simd == nullptr) return ref::HcPost(f, res, tokens, hc, dim, post, comb, y);
  // Units: (token, column chunk); chunks start at multiples of kHcPostColumns
  // (a multiple of every lane count), as the kernel requires.
  const int64_t chunks = (dim + kHcPostColumns - 1) / kHcPostColumns;
  ParallelFor(pool, tokens * chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const int64_t t = u / chunks, d0 = (u % chunks) * kHcPostColumns;
      simd->hc_post(f + t * dim, res + t * hc * dim, hc, dim, d0,
                    std::min(dim, d0 + kHcPostColumns), post + t * hc, comb + t * hc * hc,
                    y + t * hc * dim);
    }
  });
}

void HcHeadPre(const float* mixes, int64_t tokens, int64_t hc, float scale0, const float* base,
               float eps, float* pre) {
  ref::HcHeadPre(mixes, tokens, hc, scale0, base, eps, pre);
}

}  // namespace dsv4::kernels
