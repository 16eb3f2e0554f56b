// AVX-512 ActQuantFp8: per 128-block (or 64) amax, power-of-two scale
// (scalar, shared with the reference), then a branch-free e4m3 encoder that
// reproduces ref::E4M3FromF32 bit for bit.
// GCC 12's AVX-512 headers initialise "undefined" vectors from themselves,
// which -Wuninitialized reports inside the intrinsics (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "kernels/cpu/quant_cpu.h"
#include "kernels/ref/quant_ref.h"

namespace dsv4::kernels::cpu {
namespace {

[[gnu::always_inline]] inline __m512 LoadBf16x16(const bf16* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// e4m3 codes of v (|v| <= 448 after the clamp): the normal range rounds the
// FP32 mantissa to 3 bits (ties to even) by integer add; below 2^-6 the
// value is rounded on the subnormal grid 2^-9 with cvtps2dq (round to
// nearest even, the MXCSR default).
[[gnu::always_inline]] inline __m512i EncodeE4M3(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(bits, 24), _mm512_set1_epi32(0x80));
  const __m512i mag = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff));
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(mag, 20), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(_mm512_add_epi32(mag, _mm512_set1_epi32(0x7ffff)), lsb);
  const __m512i normal = _mm512_sub_epi32(_mm512_srli_epi32(rounded, 20), _mm512_set1_epi32(120 << 3));
  const __m512i sub = _mm512_cvtps_epi32(
      _mm512_mul_ps(_mm512_castsi512_ps(mag), _mm512_set1_ps(512.0f)));
  const __mmask16 is_sub = _mm512_cmplt_epi32_mask(mag, _mm512_set1_epi32(0x3c800000));  // 2^-6
  return _mm512_or_si512(_mm512_mask_blend_epi32(is_sub, normal, sub), sign);
}

void QuantizeBlock(const bf16* x, int64_t block, uint8_t* codes, float* scale) {
  __m512 amax = _mm512_setzero_ps();
  for (int64_t i = 0; i < block; i += 16) amax = _mm512_max_ps(amax, _mm512_abs_ps(LoadBf16x16(x + i)));
  const float s = ref::Fp8BlockScale(_mm512_reduce_max_ps(amax));
  // s is a power of two in [2^-22, 2^120], so 1/s is exact and x·(1/s)
  // rounds exactly like x/s.
  const __m512 inv = _mm512_set1_ps(1.0f / s);
  const __m512 lim = _mm512_set1_ps(448.0f);
  for (int64_t i = 0; i < block; i += 16) {
    __m512 q = _mm512_mul_ps(LoadBf16x16(x + i), inv);
    q = _mm512_min_ps(_mm512_max_ps(q, _mm512_sub_ps(_mm512_setzero_ps(), lim)), lim);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), _mm512_cvtepi32_epi8(EncodeE4M3(q)));
  }
  *scale = s;
}

}  // namespace

void ActQuantFp8Avx512(const bf16* x, int64_t rows, int64_t cols, int64_t block, uint8_t* codes,
                       float* scales) {
  const int64_t num_blocks = cols / block;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < num_blocks; ++b) {
      QuantizeBlock(x + r * cols + b * block, block, codes + r * cols + b * block,
                    scales + r * num_blocks + b);
    }
  }
}

}  // namespace dsv4::kernels::cpu
