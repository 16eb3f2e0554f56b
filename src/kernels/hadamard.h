// Walsh-Hadamard transform (Sylvester order) with scale dim^-0.5, FP32 math,
// one BF16 rounding (tests/data/golden/ops/README.md §11).  dim is a power of two.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"
#include "tensor/numeric.h"

namespace dsv4::kernels {

// Rows are independent: any split over `pool` (may be null) gives the same bits.
void HadamardBf16(bf16* x, int64_t rows, int64_t dim, ThreadPool* pool);

}  // namespace dsv4::kernels
