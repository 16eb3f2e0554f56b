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

// The panel path: a register-blocked outer-product kernel over weights in
// the panel layout, packed at load (kPanels) or per task from rows
// (int8_gemm_avx512.cc).  Same bits as the others.
//
// Rows of one micro-tile and output columns of one packed block.
inline constexpr int64_t kInt8PackedRows = 6;
inline constexpr int64_t kInt8PackedCols = kInt8PanelColumns;

struct Int8PackedArgs {
  // [m, ldx] activation codes offset to unsigned (code XOR 0x80 = code +
  // 128), ldx = w.in rounded up to 4 (the padding holds any bytes: padded k
  // lanes meet zero weights); or, with x_signed, the signed codes themselves
  // ([m, w.in], w.in a multiple of 4), offset by the tiles as they broadcast
  // them (no pass of their own).
  const uint8_t* xu = nullptr;
  int64_t ldx = 0;
  bool x_signed = false;
  const float* xs = nullptr;  // [m]
  int64_t m = 0;
  Int8Weight w;
  bf16* y = nullptr;  // [m, w.out]
};

// Rows [row_begin, row_end) of the activation codes x ([.., k] int8) offset
// to unsigned into xu ([.., ldx]: code XOR 0x80, then zeros up to ldx).  A
// byte loop the portable driver's -O2 build leaves scalar took 6 % of a
// 1,024-row GEMM.
void Int8OffsetRowsAvx512(const int8_t* x, int64_t k, int64_t ldx, int64_t row_begin,
                          int64_t row_end, uint8_t* xu);

// The block of the panel layout holding columns [col_begin, col_begin + 64)
// of a kRows weight, written to `block` (Int8PanelBlockBytes(w.in) bytes,
// 64-byte aligned): the same bytes as PackInt8Panels' portable loop, with
// 16 x 16 transposes (AVX-512 BW + VNNI).
void Int8PackPanelBlockAvx512Vnni(const Int8Weight& w, int64_t col_begin, int8_t* block);

// Rows [row_begin, row_end) (row_begin a multiple of kInt8PackedRows) of the
// columns [col_begin, col_end) (col_begin a multiple of kInt8PackedCols,
// at most kInt8PackedCols of them).  scratch: for a kRows weight,
// Int8PanelBlockBytes(w.in) bytes, 64-byte aligned, owned by the calling
// thread (the block is packed there); unused for kPanels.
void Int8GemmAvx512VnniPacked(const Int8PackedArgs& a, int64_t row_begin, int64_t row_end,
                              int64_t col_begin, int64_t col_end, void* scratch);

}  // namespace dsv4::kernels::cpu
