// Scalar references of kernels/quant.h: the oracles for the golden tests and
// for the differential tests of the SIMD versions in cpu/.  Same contracts as
// the public functions (see quant.h, docs/model.md "Number formats",
// tests/data/golden/ops/README.md §3-§6).
#pragma once

#include <cstdint>

#include "tensor/numeric.h"

namespace dsv4::kernels::ref {

uint8_t E4M3FromF32(float x);
uint8_t E2M1FromF32(float x);
float Fp8BlockScale(float amax);
float Fp4BlockScale(float amax);

void ActQuantFp8(const bf16* x, int64_t rows, int64_t cols, int64_t block, uint8_t* codes,
                 float* scales);
void KvQatFp8(bf16* x, int64_t rows, int64_t cols, int64_t nope);
void Fp4Qat(bf16* x, int64_t rows, int64_t cols);

}  // namespace dsv4::kernels::ref
