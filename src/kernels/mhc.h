// Manifold-constrained hyper-connections (docs/model.md "Block and mHC";
// tests/data/golden/ops/README.md §12). Streams are [tokens, hc, dim] BF16, flattened stream-major
// per token.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"
#include "tensor/numeric.h"

namespace dsv4::kernels {

// mixes[t, n] = (v_t . fn[n]) * rsqrt(mean(v_t^2) + eps), v_t = the hc*dim
// upcast stream values of token t.  fn [n_mix, hc*dim] FP32.
void HcMixes(const bf16* x, int64_t tokens, int64_t width, const float* fn, int64_t n_mix,
             float eps, float* mixes, ThreadPool* pool);

// Splits mixes [tokens, (2+hc)*hc] into pre [tokens, hc], post [tokens, hc],
// comb [tokens, hc, hc] (row j = source stream) with Sinkhorn (`iters` total
// row/column rounds).  scale [3], base [(2+hc)*hc].
// Per token, so any split of the tokens over `pool` (may be null) gives the
// same bits.
void HcSplitSinkhorn(const float* mixes, int64_t tokens, int64_t hc, const float* scale,
                     const float* base, int64_t iters, float eps, float* pre, float* post,
                     float* comb, ThreadPool* pool);

// y[t] = bf16(sum_j pre[t, j] * x[t, j]), x [tokens, hc, dim], y [tokens, dim];
// tokens split over `pool` (may be null), the same bits either way.
void HcWeightedSum(const bf16* x, int64_t tokens, int64_t hc, int64_t dim, const float* pre,
                   bf16* y, ThreadPool* pool);

// y[t, k] = bf16(post[t,k]*f[t] + sum_j comb[t,j,k]*res[t,j]) (j-sum first).
// REQUIRES: y does not overlap res or f.  Elementwise, so any split over
// `pool` (may be null) gives the same bits.
void HcPost(const bf16* f, const bf16* res, int64_t tokens, int64_t hc, int64_t dim,
            const float* post, const float* comb, bf16* y, ThreadPool* pool);

// pre[t, j] = sigmoid(mixes[t, j]*scale0 + base[j]) + eps (hc_head).
void HcHeadPre(const float* mixes, int64_t tokens, int64_t hc, float scale0, const float* base,
               float eps, float* pre);

}  // namespace dsv4::kernels
