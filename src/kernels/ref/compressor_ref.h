// Scalar oracle for kernels/compressor.h.
#pragma once

#include <cstdint>

#include "tensor/numeric.h"

namespace dsv4::kernels::ref {

void SoftmaxPool(const float* const* kv_rows, const float* const* score_rows, int64_t rows,
                 int64_t d, bf16* out);

}  // namespace dsv4::kernels::ref
