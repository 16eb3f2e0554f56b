// SIMD activation quantization behind kernels/quant.h (internal).  Same
// contract as ActQuantFp8, bit-exact with ref::ActQuantFp8 (no reduction but
// a max).  REQUIRES: block % 32 == 0 (the callers fall back to the scalar
// reference otherwise).
#pragma once

#include <cstdint>

#include "tensor/numeric.h"

namespace dsv4::kernels::cpu {

void ActQuantFp8Avx512(const bf16* x, int64_t rows, int64_t cols, int64_t block, uint8_t* codes,
                       float* scales);
void ActQuantFp8Avx2(const bf16* x, int64_t rows, int64_t cols, int64_t block, uint8_t* codes,
                     float* scales);

}  // namespace dsv4::kernels::cpu
