// Sparse attention with a per-head sink (docs/model.md "Attention paths";
// tests/data/golden/ops/README.md §13).
#pragma once

#include <cstdint>

#include "base/thread_pool.h"
#include "tensor/numeric.h"

namespace dsv4::kernels {

// For each query t and head h: walk kv_rows[t, 0..list_len) in blocks of 64
// (nullptr = padding: score -inf, zero row), online softmax in FP32 with the
// probabilities rounded to BF16 for P.V only, sink exp(sink[h]-m) added to the
// denominator after the loop; o[t, h] = bf16(acc / Z).
// q [tokens, heads, dim]; kv_rows [tokens, list_len] pointers to dim-wide BF16
// rows (one latent row serves as key and value); o [tokens, heads, dim].
// REQUIRES: the first entry of every list is non-null.
void SparseAttention(const bf16* q, int64_t tokens, int64_t heads, int64_t dim,
                     const bf16* const* kv_rows, int64_t list_len, const float* sink, float scale,
                     bf16* o, ThreadPool* pool);

// True where SparseAttention runs BF16 pair dot products (AVX512-BF16 CPUs,
// docs/kernels.md "SparseAttention with BF16 dot products"), false where FP32 FMA
// or the scalar reference: which peak its FLOPs are measured against.
bool SparseAttentionUsesBf16Dots();

}  // namespace dsv4::kernels
