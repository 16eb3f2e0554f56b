// The KV compressor's pooling (docs/model.md "KV compressor";
// tests/data/golden/ops/README.md §14): one compressed entry as a per-channel
// softmax-weighted sum of its source rows.  Which rows a block mixes (the ring
// layout, the overlap of ratio 4) is the model's business (model/compressor.h).
#pragma once

#include <cstdint>

#include "tensor/numeric.h"

namespace dsv4::kernels {

// Most rows one entry mixes: coff * ratio is 8 or 128 in DeepSeek-V4.
inline constexpr int64_t kMaxPoolRows = 256;

// out[c] = bf16(sum_j kv_rows[j][c] * (e_j[c] * (1 / sum_j e_j[c]))) with
// e_j[c] = exp(score_rows[j][c] - max_j score_rows[j][c]), every sum sequential
// over j in row order, all FP32: the reference's arithmetic (PyTorch's CPU
// softmax multiplies by the reciprocal of the sum).  kv_rows / score_rows
// [rows] point at d floats each.  REQUIRES: 1 <= rows <= kMaxPoolRows.
void SoftmaxPool(const float* const* kv_rows, const float* const* score_rows, int64_t rows,
                 int64_t d, bf16* out);

}  // namespace dsv4::kernels
