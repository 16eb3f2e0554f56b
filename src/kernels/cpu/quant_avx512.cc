// AVX-512 activation quantization and QAT: per block amax, power-of-two
// scale (scalar, shared with the reference), then branch-free e4m3 / e2m1
// rounding that reproduces ref::E4M3FromF32 / E2M1FromF32 bit for bit.
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
  const __m512i normal =
      _mm512_sub_epi32(_mm512_srli_epi32(rounded, 20), _mm512_set1_epi32(120 << 3));
  const __m512i sub =
      _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_castsi512_ps(mag), _mm512_set1_ps(512.0f)));
  const __mmask16 is_sub = _mm512_cmplt_epi32_mask(mag, _mm512_set1_epi32(0x3c800000));  // 2^-6
  return _mm512_or_si512(_mm512_mask_blend_epi32(is_sub, normal, sub), sign);
}

// v rounded to the nearest e4m3 value (ties to even) as FP32, i.e.
// E4M3ToF32(E4M3FromF32(v)) for |v| <= 448: the same integer rounding as
// EncodeE4M3, keeping the rounded FP32 bits instead of re-biasing them.
[[gnu::always_inline]] inline __m512 RoundE4M3(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i sign = _mm512_and_si512(bits, _mm512_set1_epi32(static_cast<int32_t>(0x80000000u)));
  const __m512i mag = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff));
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(mag, 20), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(_mm512_add_epi32(mag, _mm512_set1_epi32(0x7ffff)), lsb);
  const __m512i normal =
      _mm512_and_si512(rounded, _mm512_set1_epi32(static_cast<int32_t>(0xfff00000u)));
  const __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtps_epi32(_mm512_mul_ps(
                                       _mm512_castsi512_ps(mag), _mm512_set1_ps(512.0f)))),
                                   _mm512_set1_ps(1.0f / 512.0f));
  const __mmask16 is_sub = _mm512_cmplt_epi32_mask(mag, _mm512_set1_epi32(0x3c800000));  // 2^-6
  const __m512i r = _mm512_mask_blend_epi32(is_sub, normal, _mm512_castps_si512(sub));
  return _mm512_castsi512_ps(_mm512_or_si512(r, sign));
}

// v rounded to the nearest e2m1 value (ties to even code) as FP32, |v| <= 6:
// one mantissa bit from 1 up, spacing 0.5 below 1.
[[gnu::always_inline]] inline __m512 RoundE2M1(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i sign = _mm512_and_si512(bits, _mm512_set1_epi32(static_cast<int32_t>(0x80000000u)));
  const __m512i mag = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff));
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(mag, 22), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(_mm512_add_epi32(mag, _mm512_set1_epi32(0x1fffff)), lsb);
  const __m512i normal =
      _mm512_and_si512(rounded, _mm512_set1_epi32(static_cast<int32_t>(0xffc00000u)));
  const __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtps_epi32(_mm512_add_ps(
                                       _mm512_castsi512_ps(mag), _mm512_castsi512_ps(mag)))),
                                   _mm512_set1_ps(0.5f));
  const __mmask16 is_sub = _mm512_cmplt_epi32_mask(mag, _mm512_set1_epi32(0x3f800000));  // 1.0
  const __m512i r = _mm512_mask_blend_epi32(is_sub, normal, _mm512_castps_si512(sub));
  return _mm512_castsi512_ps(_mm512_or_si512(r, sign));
}

// F32ToBf16 on 16 lanes (round to nearest even, NaN stays a quiet NaN).
[[gnu::always_inline]] inline void StoreBf16x16(bf16* p, __m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r =
      _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(r));
}

// In-place quantize-dequantize of one block of n (multiple of 16) values:
// bf16(round(clamp(x/s, ±qmax))·s).
template <typename Scale, typename Round>
[[gnu::always_inline]] inline void QatBlock(bf16* x, int64_t n, float qmax, Scale scale_of,
                                            Round round) {
  __m512 amax = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) amax = _mm512_max_ps(amax, _mm512_abs_ps(LoadBf16x16(x + i)));
  const float s = scale_of(_mm512_reduce_max_ps(amax));
  const __m512 inv = _mm512_set1_ps(1.0f / s);  // exact: s is a power of two
  const __m512 vs = _mm512_set1_ps(s);
  const __m512 hi = _mm512_set1_ps(qmax);
  const __m512 lo = _mm512_set1_ps(-qmax);
  for (int64_t i = 0; i < n; i += 16) {
    const __m512 q = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(LoadBf16x16(x + i), inv), lo), hi);
    StoreBf16x16(x + i, _mm512_mul_ps(round(q), vs));
  }
}

void QuantizeBlock(const bf16* x, int64_t block, uint8_t* codes, float* scale) {
  __m512 amax = _mm512_setzero_ps();
  for (int64_t i = 0; i < block; i += 16)
    amax = _mm512_max_ps(amax, _mm512_abs_ps(LoadBf16x16(x + i)));
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

void KvQatFp8Avx512(bf16* x, int64_t rows, int64_t cols, int64_t nope) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nope; b += 64) {
      QatBlock(x + r * cols + b, 64, 448.0f, ref::Fp8BlockScale,
               [](__m512 q) { return RoundE4M3(q); });
    }
  }
}

void Fp4QatAvx512(bf16* x, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows * cols; i += 32) {
    QatBlock(x + i, 32, 6.0f, ref::Fp4BlockScale, [](__m512 q) { return RoundE2M1(q); });
  }
}

}  // namespace dsv4::kernels::cpu
