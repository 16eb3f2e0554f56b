// Scalar oracles for kernels/rope.h.  The table builder is the only
// implementation (it runs once per layer profile), so it lives in rope.cc.
#pragma once

#include <cstdint>

#include "tensor/numeric.h"

namespace dsv4::kernels::ref {

void ApplyRope(bf16* x, int64_t rows, int64_t heads, int64_t head_dim, int64_t rope_dim,
               const int64_t* positions, const float* freqs, bool inverse);

}  // namespace dsv4::kernels::ref
