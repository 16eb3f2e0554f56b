// A 16 x 16 dword transpose in registers, for kernels built with AVX-512
// flags (int8_gemm_avx512.cc's weight packing).  Include
// only from such translation units; the anonymous namespace gives each its own
// copy (see avx512_bf16_store-inl.h).
#pragma once

#include "kernels/cpu/avx512_intrinsics.h"

namespace dsv4::kernels::cpu {
namespace {

// In place: r[i] holds 16 dwords of row i; afterwards r[q] holds dword q of
// rows 0..15 (lane i = row i).  Pairs, then quads within 128-bit lanes, then
// the 128-bit lanes across registers.
[[gnu::always_inline]] inline void Transpose16x16(__m512i* r) {
  __m512i t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // u[4g + s], 128-bit lane L: dword 4L + s of rows 4g .. 4g + 3.
  __m512i u[16];
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    u[4 * g + 0] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
#pragma GCC unroll 4
  for (int s = 0; s < 4; ++s) {
    const __m512i lo01 = _mm512_shuffle_i32x4(u[s], u[4 + s], 0x44);
    const __m512i lo23 = _mm512_shuffle_i32x4(u[8 + s], u[12 + s], 0x44);
    const __m512i hi01 = _mm512_shuffle_i32x4(u[s], u[4 + s], 0xee);
    const __m512i hi23 = _mm512_shuffle_i32x4(u[8 + s], u[12 + s], 0xee);
    r[0 + s] = _mm512_shuffle_i32x4(lo01, lo23, 0x88);
    r[4 + s] = _mm512_shuffle_i32x4(lo01, lo23, 0xdd);
    r[8 + s] = _mm512_shuffle_i32x4(hi01, hi23, 0x88);
    r[12 + s] = _mm512_shuffle_i32x4(hi01, hi23, 0xdd);
  }
}

}  // namespace
}  // namespace dsv4::kernels::cpu
