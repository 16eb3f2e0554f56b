// AVX-512 traits of quant_simd-inl.h (16 lanes): the branch-free e4m3 / e2m1
// rounding that reproduces ref::E4M3FromF32 / E2M1FromF32 bit for bit.
#include "kernels/cpu/avx512_intrinsics.h"
#include "kernels/cpu/quant_simd-inl.h"

namespace dsv4::kernels::cpu {
namespace {

struct QuantAvx512 {
  using F = __m512;
  using I = __m512i;
  static constexpr int64_t kLanes = 16;
  static constexpr int kCodeVecs = 1;

  [[gnu::always_inline]] static F Zero() { return _mm512_setzero_ps(); }
  [[gnu::always_inline]] static F Set1(float v) { return _mm512_set1_ps(v); }
  [[gnu::always_inline]] static F Mul(F a, F b) { return _mm512_mul_ps(a, b); }
  [[gnu::always_inline]] static F Div(F a, F b) { return _mm512_div_ps(a, b); }
  [[gnu::always_inline]] static F RoundEven(F v) {
    return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  [[gnu::always_inline]] static void StoreInt8(int8_t* p, F v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(v)));
  }
  [[gnu::always_inline]] static F Min(F a, F b) { return _mm512_min_ps(a, b); }
  [[gnu::always_inline]] static F Max(F a, F b) { return _mm512_max_ps(a, b); }
  [[gnu::always_inline]] static F Abs(F v) { return _mm512_abs_ps(v); }
  [[gnu::always_inline]] static float ReduceMax(F v) { return _mm512_reduce_max_ps(v); }
  [[gnu::always_inline]] static F LoadBf16(const bf16* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }

  // e4m3 codes of v (|v| <= 448 after the clamp): the normal range rounds the
  // FP32 mantissa to 3 bits (ties to even) by integer add; below 2^-6 the
  // value is rounded on the subnormal grid 2^-9 with cvtps2dq (round to
  // nearest even, the MXCSR default).
  [[gnu::always_inline]] static I EncodeE4M3(F v) {
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(bits, 24), _mm512_set1_epi32(0x80));
    const __m512i mag = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff));
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(mag, 20), _mm512_set1_epi32(1));
    const __m512i rounded =
        _mm512_add_epi32(_mm512_add_epi32(mag, _mm512_set1_epi32(0x7ffff)), lsb);
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
  [[gnu::always_inline]] static F RoundE4M3(F v) {
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i sign =
        _mm512_and_si512(bits, _mm512_set1_epi32(static_cast<int32_t>(0x80000000u)));
    const __m512i mag = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff));
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(mag, 20), _mm512_set1_epi32(1));
    const __m512i rounded =
        _mm512_add_epi32(_mm512_add_epi32(mag, _mm512_set1_epi32(0x7ffff)), lsb);
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
  [[gnu::always_inline]] static F RoundE2M1(F v) {
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i sign =
        _mm512_and_si512(bits, _mm512_set1_epi32(static_cast<int32_t>(0x80000000u)));
    const __m512i mag = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff));
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(mag, 22), _mm512_set1_epi32(1));
    const __m512i rounded =
        _mm512_add_epi32(_mm512_add_epi32(mag, _mm512_set1_epi32(0x1fffff)), lsb);
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
  [[gnu::always_inline]] static void StoreBf16(bf16* p, F v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(r));
  }

  [[gnu::always_inline]] static void StoreCodes(uint8_t* p, const I* c) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(c[0]));
  }
};

}  // namespace

constinit const QuantKernels kQuantKernelsAvx512 = QuantKernelTable<QuantAvx512>();

}  // namespace dsv4::kernels::cpu
