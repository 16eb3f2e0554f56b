#include "kernels/mhc.h"

#include <algorithm>

#include "kernels/cpu/ops_cpu.h"
#include "kernels/ref/mhc_ref.h"
#include "kernels/scratch.h"

namespace dsv4::kernels {

namespace {

// A prefill's token groups: kMixGroupsPerBlock groups of 4 tokens go over fn
// together, kMixColumnsPerPass columns at a time (24 x 8 KiB of fn on Flash,
// which stays in the L2 while every group of the block passes over it, where
// a whole fn is 1.5 MiB and came from the L3 once per group: ~384 MiB per
// 1k-token mHC pre).  A block's carried accumulators take 8 x 24 KiB.
constexpr int64_t kMixGroupsPerBlock = 8;
constexpr int64_t kMixColumnsPerPass = 2048;  // a multiple of 4·kLanes

// mixes of tokens [0, tokens) (a multiple of 4) through dot4_bf16_f32_cols:
// the same dot products as one dot4_bf16_f32 call per group and mix, in
// column passes, so the same bits.
void MixesInColumnPasses(const cpu::OpsKernels& simd, const bf16* x, int64_t tokens, int64_t width,
                         const float* fn, int64_t n_mix, const float* inv, float* mixes,
                         ThreadPool* pool) {
  constexpr int64_t kStateFloats = 4 * 4 * 16;  // 4 rows x 4 vectors of up to 16 lanes
  ParallelFor(pool, tokens / 4, kMixGroupsPerBlock, [&](int64_t begin, int64_t end) {
    struct StateTag {};
    float* state = ScratchArray<StateTag, float>::Get(
        static_cast<size_t>(kMixGroupsPerBlock * n_mix * kStateFloats));
    for (int64_t b0 = begin; b0 < end; b0 += kMixGroupsPerBlock) {
      const int64_t b1 = std::min(end, b0 + kMixGroupsPerBlock);
      int64_t c0 = 0;
      do {  // at least once: width 0 still writes its mixes
        const int64_t c1 = width - c0 > kMixColumnsPerPass ? c0 + kMixColumnsPerPass : width;
        for (int64_t g = b0; g < b1; ++g) {
          const int64_t t = 4 * g;
          for (int64_t m = 0; m < n_mix; ++m) {
            float dots[4];
            simd.dot4_bf16_f32_cols(x + t * width, width, fn + m * width, width, c0, c1,
                                    state + ((g - b0) * n_mix + m) * kStateFloats, dots);
            if (c1 < width) continue;
            for (int64_t r = 0; r < 4; ++r) mixes[(t + r) * n_mix + m] = dots[r] * inv[t + r];
          }
        }
        c0 = c1;
      } while (c0 < width);
    }
  });
}

}  // namespace

// Per token a [n_mix x width] FP32 projection (24 x 16384 in Flash): the rms
// pass is split over tokens, the dot products over (token, mix) items, so a
// single decode token still spreads over the pool; from 64 tokens on, whole
// groups of 4 go in column passes (MixesInColumnPasses) and the rest as
// items.  Each token's dot is one fixed-order dot (cpu::DotBf16F32*) either
// way, hence batch invariant.
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
  // Column passes split the work over blocks of 8 groups only: below two
  // blocks (64 tokens, one per thread of a 2-thread pool) the (group, mix)
  // items spread better over the pool, and fn's reads are few.
  int64_t first = 0;  // tokens before it went through the column passes
  if (simd->dot4_bf16_f32_cols != nullptr && tokens >= 2 * kMixGroupsPerBlock * 4) {
    first = tokens / 4 * 4;
    MixesInColumnPasses(*simd, x, first, width, fn, n_mix, inv, mixes, pool);
  }
  const int64_t groups = (tokens - first + per - 1) / per;
  ParallelFor(pool, groups * n_mix, 2, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t t0 = first + per * (i / n_mix), m = i % n_mix;
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

// Tokens per task of the per-token mHC steps below: a few microseconds each,
// so a prefill's tokens spread over the pool (on one thread they were a
// serial share of every mHC pre) and a decode token stays inline.
constexpr int64_t kHcTokensPerTask = 16;

void HcSplitSinkhorn(const float* mixes, int64_t tokens, int64_t hc, const float* scale,
                     const float* base, int64_t iters, float eps, float* pre, float* post,
                     float* comb, ThreadPool* pool) {
  const int64_t n_mix = (2 + hc) * hc;
  ParallelFor(pool, tokens, kHcTokensPerTask, [&](int64_t begin, int64_t end) {
    ref::HcSplitSinkhorn(mixes + begin * n_mix, end - begin, hc, scale, base, iters, eps,
                         pre + begin * hc, post + begin * hc, comb + begin * hc * hc);
  });
}

// Elementwise (4 x 4096 and 16 x 4096 multiply-adds per token): the SIMD
// versions keep the reference's per-element order and are bitwise equal to it.
void HcWeightedSum(const bf16* x, int64_t tokens, int64_t hc, int64_t dim, const float* pre,
                   bf16* y, ThreadPool* pool) {
  const cpu::OpsKernels* simd = cpu::ActiveOpsKernels();
  ParallelFor(pool, tokens, kHcTokensPerTask, [&](int64_t begin, int64_t end) {
    const bf16* xb = x + begin * hc * dim;
    if (simd != nullptr) {
      simd->hc_weighted_sum(xb, end - begin, hc, dim, pre + begin * hc, y + begin * dim);
    } else {
      ref::HcWeightedSum(xb, end - begin, hc, dim, pre + begin * hc, y + begin * dim);
    }
  });
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
