// Scalar oracles for kernels/indexer.h.
#pragma once

#include <cstdint>

#include "tensor/numeric.h"

namespace dsv4::kernels::ref {

void IndexerScores(const bf16* q, int64_t tokens, int64_t heads, int64_t dim, const bf16* w,
                   const bf16* const* key_rows, int64_t max_entries, const int64_t* n_entries,
                   float* score);
void TopKDescending(const float* score, int64_t n, int64_t k, int32_t* out);

}  // namespace dsv4::kernels::ref
