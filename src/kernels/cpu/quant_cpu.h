// SIMD activation quantization and QAT behind kernels/quant.h (internal).
// Same contracts as the public functions and bit-exact with ref/ (no
// reduction but a max).  REQUIRES: ActQuantFp8 block % 32 == 0, KvQatFp8
// nope % 64 == 0, Fp4Qat cols % 32 == 0 (quant.cc checks).
#pragma once

#include <cstdint>

#include "tensor/numeric.h"

namespace dsv4::kernels::cpu {

void ActQuantFp8Avx512(const bf16* x, int64_t rows, int64_t cols, int64_t block, uint8_t* codes,
                       float* scales);
void ActQuantFp8Avx2(const bf16* x, int64_t rows, int64_t cols, int64_t block, uint8_t* codes,
                     float* scales);

void KvQatFp8Avx512(bf16* x, int64_t rows, int64_t cols, int64_t nope);
void KvQatFp8Avx2(bf16* x, int64_t rows, int64_t cols, int64_t nope);
void Fp4QatAvx512(bf16* x, int64_t rows, int64_t cols);
void Fp4QatAvx2(bf16* x, int64_t rows, int64_t cols);

}  // namespace dsv4::kernels::cpu
