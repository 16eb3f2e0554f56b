// AVX-512 helpers shared by the kernel families compiled with AVX-512 flags
// (gemm_avx512.cc, int8_gemm_avx512.cc): a tail mask and the FP32 -> BF16
// store.  Include only from translation units built with AVX-512 flags; the
// anonymous namespace gives every such unit its own copy, so no out-of-line
// AVX-512 instance can be shared with code built for another ISA.
#pragma once

#include <cstdint>

#include "kernels/cpu/avx512_intrinsics.h"
#include "tensor/numeric.h"

namespace dsv4::kernels::cpu {
namespace {

// Lanes [0, count) of 16 (all of them when count >= 16).
[[gnu::always_inline]] inline __mmask16 TailMask16(int64_t count) {
  return count >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << count) - 1);
}

// 16 floats rounded to BF16 as F32ToBf16 does (nearest even; a NaN stays a
// quiet NaN).
[[gnu::always_inline]] inline __m256i Bf16x16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
  r = _mm512_srli_epi32(r, 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(r);
}

// Bf16x16(v), its first `count` values stored at y.
[[gnu::always_inline]] inline void StoreBf16x16(bf16* y, __m512 v, int64_t count) {
  _mm256_mask_storeu_epi16(y, TailMask16(count), Bf16x16(v));
}

// Bf16x16 of lo, then of hi: 32 values as one 64-byte store (a whole cache
// line where y is 64-byte aligned) instead of two.
[[gnu::always_inline]] inline void StoreBf16x32(bf16* y, __m512 lo, __m512 hi) {
  const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(Bf16x16(lo)), Bf16x16(hi), 1);
  _mm512_storeu_si512(y, both);
}

// Where a register tile of a many-row GEMM puts its rows once their sums are
// final: y at the tile's first row and panel, rows ldy apart, the first
// `cols` of its columns (16 per panel).  Storing each row as its tile
// finishes, rather than a whole row block after its last tile, matters where
// y's rows are a multiple of 4 KiB apart (many of the model's widths): a
// row block's 64 lines then share one L1 set, and 64 to 128 stores in a row
// stalled on its evictions (docs/performance.md "GEMM outputs: rows 4 KiB
// apart").
struct Bf16TileOut {
  bf16* y = nullptr;
  int64_t ldy = 0;
  int64_t cols = 0;
  // Row r of one panel.
  [[gnu::always_inline]] void Store(int64_t r, __m512 v) const {
    StoreBf16x16(y + r * ldy, v, cols);
  }
  // Row r of two panels side by side: one 64-byte store where both are whole.
  [[gnu::always_inline]] void Store(int64_t r, __m512 lo, __m512 hi) const {
    if (cols >= 32) return StoreBf16x32(y + r * ldy, lo, hi);
    StoreBf16x16(y + r * ldy, lo, cols);
    if (cols > 16) StoreBf16x16(y + r * ldy + 16, hi, cols - 16);
  }
};

}  // namespace
}  // namespace dsv4::kernels::cpu
