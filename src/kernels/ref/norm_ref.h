// Scalar oracles for kernels/norm.h: the reference's arithmetic written out
// element by element, sequential FP32 sums.
#pragma once

#include <cstdint>

#include "tensor/numeric.h"

namespace dsv4::kernels::ref {

void RmsNorm(const bf16* x, int64_t rows, int64_t dim, const bf16* w, float eps, bf16* y);
void QHeadRms(bf16* q, int64_t rows, int64_t dim, float eps);

}  // namespace dsv4::kernels::ref
