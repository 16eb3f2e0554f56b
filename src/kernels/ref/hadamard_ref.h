// Scalar oracle for kernels/hadamard.h.
#pragma once

#include <cstdint>

#include "tensor/numeric.h"

namespace dsv4::kernels::ref {

void HadamardBf16(bf16* x, int64_t rows, int64_t dim);

}  // namespace dsv4::kernels::ref
