// SIMD kernels behind kernels/int8_gemm.h (internal to the kernels layer).
//
// Each call computes y for rows [row_begin, row_end) and output columns
// [col_begin, col_end).  Products are accumulated exactly in INT32 and scaled
// once per output with the same FP32 expression as the scalar reference, so
// every ISA gives the same bits (int8_gemm.h).
//
// AVX-512 translation units are compiled with AVX-512 flags: only plain
// functions and structs cross this header (no inline functions or templates
// with external linkage, which the linker could share with AVX2-only callers).
#pragma once

#include <cstdint>

#include "kernels/int8_gemm.h"
#include "tensor/numeric.h"

namespace dsv4::kernels::cpu {

// Columns per parallel task; the kernels work on groups of 4 columns inside.
inline constexpr int64_t kInt8Panel = 16;

struct Int8GemmArgs {
  const int8_t* x = nullptr;  // [m, w.in]
  const float* xs = nullptr;  // [m]
  int64_t m = 0;
  Int8Weight w;
  bf16* y = nullptr;  // [m, w.out]
};

void Int8GemmAvx2(const Int8GemmArgs& a, int64_t row_begin, int64_t row_end, int64_t col_begin,
                  int64_t col_end);
// AVX-512 BW + VNNI (vpdpbusd).
void Int8GemmAvx512Vnni(const Int8GemmArgs& a, int64_t row_begin, int64_t row_end,
                        int64_t col_begin, int64_t col_end);

}  // namespace dsv4::kernels::cpu
