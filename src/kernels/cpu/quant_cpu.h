// SIMD activation quantization and QAT behind kernels/quant.h (internal):
// one kernel table per ISA, built from quant_simd-inl.h in that ISA's
// translation unit.  Same contracts as the public functions and bit-exact with
// ref/ (no reduction but a max).  REQUIRES: ActQuantFp8 block % 32 == 0,
// KvQatFp8 nope % 64 == 0, Fp4Qat cols % 32 == 0 (quant.cc checks).
//
// AVX-512 translation units are compiled with AVX-512 flags: only plain
// structs and constants cross this header.
#pragma once

#include <cstdint>

#include "tensor/numeric.h"

namespace dsv4::kernels::cpu {

struct QuantKernels {
  void (*act_quant_fp8)(const bf16* x, int64_t rows, int64_t cols, int64_t block, uint8_t* codes,
                        float* scales) = nullptr;
  void (*kv_qat_fp8)(bf16* x, int64_t rows, int64_t cols, int64_t nope) = nullptr;
  void (*fp4_qat)(bf16* x, int64_t rows, int64_t cols) = nullptr;
  // W8A8 per-token quantization (int8_gemm.h ActQuantInt8PerToken), any cols.
  void (*act_quant_int8)(const bf16* x, int64_t rows, int64_t cols, int8_t* codes,
                         float* scales) = nullptr;
};

extern const QuantKernels kQuantKernelsAvx2;
extern const QuantKernels kQuantKernelsAvx512;

}  // namespace dsv4::kernels::cpu
