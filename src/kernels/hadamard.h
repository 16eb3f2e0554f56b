// Walsh-Hadamard transform (Sylvester order) with scale dim^-0.5, FP32 math,
// one BF16 rounding (tests/data/golden/ops/README.md §11).  dim is a power of two.
#pragma once

#include <cstdint>

#include "tensor/numeric.h"

namespace dsv4::kernels {

void HadamardBf16(bf16* x, int64_t rows, int64_t dim);

}  // namespace dsv4::kernels
