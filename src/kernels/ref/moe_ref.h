// Scalar oracles for kernels/moe.h.
#pragma once

#include <cstdint>

#include "tensor/numeric.h"

namespace dsv4::kernels::ref {

void SqrtSoftplus(const float* x, int64_t n, float* s);
void SwiGlu(const bf16* gate, const bf16* up, int64_t rows, int64_t dim, float limit,
            const float* row_weight, bf16* h);

}  // namespace dsv4::kernels::ref
