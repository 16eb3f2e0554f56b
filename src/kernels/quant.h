// Quantization points of the reference (docs/model.md "Number formats";
// tests/data/golden/ops/README.md §3-§6).
#pragma once

#include <cstdint>

#include "tensor/numeric.h"

namespace dsv4::kernels {

// float8_e4m3fn code of x: |x| clamped to 448, round to nearest even,
// sign kept (tiny negatives give 0x80).
uint8_t E4M3FromF32(float x);
// e2m1 code (4 bits) of x: |x| clamped to 6, round to nearest even, sign kept.
uint8_t E2M1FromF32(float x);

// Power-of-two block scales from the block's amax, computed from the FP32
// bits of max(amax, floor) * fp32(1/qmax) (ceil log2 by bit inspection).
float Fp8BlockScale(float amax);  // floor 1e-4, qmax 448
float Fp4BlockScale(float amax);  // floor 6*2^-126, qmax 6

// Activation quantization before FP8/FP4 GEMMs.  x [rows, cols] BF16,
// cols % block == 0.  codes [rows, cols] e4m3; scales [rows, cols/block].
void ActQuantFp8(const bf16* x, int64_t rows, int64_t cols, int64_t block, uint8_t* codes,
                 float* scales);

// KV QAT in place: on each row of width `cols`, columns [0, nope) in blocks
// of 64 become bf16(e4m3(x/s)*s); the remaining columns are untouched.
void KvQatFp8(bf16* x, int64_t rows, int64_t cols, int64_t nope);

// Indexer FP4 QAT in place over whole rows of width cols (cols % 32 == 0),
// blocks of 32: bf16(e2m1(x/s)*s).
void Fp4Qat(bf16* x, int64_t rows, int64_t cols);

}  // namespace dsv4::kernels
