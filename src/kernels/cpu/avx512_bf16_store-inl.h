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

// Rounds 16 floats to BF16 as F32ToBf16 does (nearest even; a NaN stays a
// quiet NaN) and stores the first `count` of them.
[[gnu::always_inline]] inline void StoreBf16x16(bf16* y, __m512 v, int64_t count) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
  r = _mm512_srli_epi32(r, 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  _mm256_mask_storeu_epi16(y, TailMask16(count), _mm512_cvtepi32_epi16(r));
}

}  // namespace
}  // namespace dsv4::kernels::cpu
