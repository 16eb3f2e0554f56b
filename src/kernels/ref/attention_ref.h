// Scalar oracle for kernels/attention.h (same contract, single-threaded).
#pragma once

#include <cstdint>

#include "tensor/numeric.h"

namespace dsv4::kernels::ref {

// The online-softmax block the attention kernel walks (docs/model.md "Attention paths").
inline constexpr int64_t kAttnBlock = 64;

void SparseAttention(const bf16* q, int64_t tokens, int64_t heads, int64_t dim,
                     const bf16* const* kv_rows, int64_t list_len, const float* sink, float scale,
                     bf16* o);

}  // namespace dsv4::kernels::ref
