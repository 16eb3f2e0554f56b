#include "kernels/mhc.h"

#include "kernels/cpu/ops_cpu.h"
#include "kernels/dispatch.h"
#include "kernels/ref/mhc_ref.h"
#include "kernels/scratch.h"

namespace dsv4::kernels {

// Per token a [n_mix x width] FP32 projection (24 x 16384 in Flash): the rms
// pass is split over tokens, the dot products over (token, mix) items, so a
// single decode token still spreads over the pool.  Each item is one
// fixed-order dot (cpu::DotBf16F32*), hence batch invariant.
void HcMixes(const bf16* x, int64_t tokens, int64_t width, const float* fn, int64_t n_mix,
             float eps, float* mixes, ThreadPool* pool) {
  const Isa isa = ActiveIsa();
  if (isa == Isa::kScalar) {
    ParallelFor(pool, tokens, 1, [&](int64_t begin, int64_t end) {
      ref::HcMixes(x + begin * width, end - begin, width, fn, n_mix, eps, mixes + begin * n_mix);
    });
    return;
  }
  const bool wide = isa == Isa::kAvx512;
  struct Tag {};
  float* inv =
      ScratchArray<Tag, float>::Get(static_cast<size_t>(tokens));  // [tokens], not the heap
  ParallelFor(pool, tokens, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const bf16* v = x + t * width;
      inv[t] = wide ? cpu::InvRmsAvx512(v, width, eps) : cpu::InvRmsAvx2(v, width, eps);
    }
  });
  ParallelFor(pool, tokens * n_mix, 2, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const bf16* v = x + (i / n_mix) * width;
      const float* f = fn + (i % n_mix) * width;
      const float dot =
          wide ? cpu::DotBf16F32Avx512(v, f, width) : cpu::DotBf16F32Avx2(v, f, width);
      mixes[i] = dot * inv[i / n_mix];
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
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      return cpu::HcWeightedSumAvx512(x, tokens, hc, dim, pre, y);
    case Isa::kAvx2:
      return cpu::HcWeightedSumAvx2(x, tokens, hc, dim, pre, y);
    case Isa::kScalar:
      break;
  }
  ref::HcWeightedSum(x, tokens, hc, dim, pre, y);
}

void HcPost(const bf16* f, const bf16* res, int64_t tokens, int64_t hc, int64_t dim,
            const float* post, const float* comb, bf16* y) {
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      return cpu::HcPostAvx512(f, res, tokens, hc, dim, post, comb, y);
    case Isa::kAvx2:
      return cpu::HcPostAvx2(f, res, tokens, hc, dim, post, comb, y);
    case Isa::kScalar:
      break;
  }
  ref::HcPost(f, res, tokens, hc, dim, post, comb, y);
}

void HcHeadPre(const float* mixes, int64_t tokens, int64_t hc, float scale0, const float* base,
               float eps, float* pre) {
  ref::HcHeadPre(mixes, tokens, hc, scale0, base, eps, pre);
}

}  // namespace dsv4::kernels
