// AVX2 traits of quant_simd-inl.h (8 lanes; the algorithms are explained in
// quant_avx512.cc's traits).
#include <immintrin.h>

#include "kernels/cpu/quant_simd-inl.h"

namespace dsv4::kernels::cpu {
namespace {

struct QuantAvx2 {
  using F = __m256;
  using I = __m256i;
  static constexpr int64_t kLanes = 8;
  // Codes are stored 32 at a time: two packs and one permute for 4 vectors.
  static constexpr int kCodeVecs = 4;

  [[gnu::always_inline]] static F Zero() { return _mm256_setzero_ps(); }
  [[gnu::always_inline]] static F Set1(float v) { return _mm256_set1_ps(v); }
  [[gnu::always_inline]] static F Mul(F a, F b) { return _mm256_mul_ps(a, b); }
  [[gnu::always_inline]] static F Div(F a, F b) { return _mm256_div_ps(a, b); }
  [[gnu::always_inline]] static F RoundEven(F v) {
    return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // 8 integral values in [-127, 127]: to INT32, then narrowed twice (the
  // saturating packs change nothing in that range) and stored as 8 bytes.
  [[gnu::always_inline]] static void StoreInt8(int8_t* p, F v) {
    const __m256i i32 = _mm256_cvtps_epi32(v);
    const __m128i i16 =
        _mm_packs_epi32(_mm256_castsi256_si128(i32), _mm256_extracti128_si256(i32, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_packs_epi16(i16, i16));
  }
  [[gnu::always_inline]] static F Min(F a, F b) { return _mm256_min_ps(a, b); }
  [[gnu::always_inline]] static F Max(F a, F b) { return _mm256_max_ps(a, b); }
  [[gnu::always_inline]] static F Abs(F v) {
    return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
  }
  [[gnu::always_inline]] static F LoadBf16(const bf16* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }

  // Bit-exact twin of ref::E4M3FromF32 for |v| <= 448 (see the AVX-512 traits).
  [[gnu::always_inline]] static I EncodeE4M3(F v) {
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(bits, 24), _mm256_set1_epi32(0x80));
    const __m256i mag = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(mag, 20), _mm256_set1_epi32(1));
    const __m256i rounded =
        _mm256_add_epi32(_mm256_add_epi32(mag, _mm256_set1_epi32(0x7ffff)), lsb);
    const __m256i normal =
        _mm256_sub_epi32(_mm256_srli_epi32(rounded, 20), _mm256_set1_epi32(120 << 3));
    const __m256i sub =
        _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_castsi256_ps(mag), _mm256_set1_ps(512.0f)));
    const __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x3c800000), mag);  // mag < 2^-6
    return _mm256_or_si256(_mm256_blendv_epi8(normal, sub, is_sub), sign);
  }

  [[gnu::always_inline]] static float ReduceMax(F v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
  }

  // E4M3ToF32(E4M3FromF32(v)) for |v| <= 448 (see the AVX-512 traits).
  [[gnu::always_inline]] static F RoundE4M3(F v) {
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i sign =
        _mm256_and_si256(bits, _mm256_set1_epi32(static_cast<int32_t>(0x80000000u)));
    const __m256i mag = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(mag, 20), _mm256_set1_epi32(1));
    const __m256i rounded =
        _mm256_add_epi32(_mm256_add_epi32(mag, _mm256_set1_epi32(0x7ffff)), lsb);
    const __m256i normal =
        _mm256_and_si256(rounded, _mm256_set1_epi32(static_cast<int32_t>(0xfff00000u)));
    const __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtps_epi32(_mm256_mul_ps(
                                         _mm256_castsi256_ps(mag), _mm256_set1_ps(512.0f)))),
                                     _mm256_set1_ps(1.0f / 512.0f));
    const __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x3c800000), mag);  // mag < 2^-6
    const __m256i r = _mm256_blendv_epi8(normal, _mm256_castps_si256(sub), is_sub);
    return _mm256_castsi256_ps(_mm256_or_si256(r, sign));
  }

  // E2M1ToF32(E2M1FromF32(v)) for |v| <= 6.
  [[gnu::always_inline]] static F RoundE2M1(F v) {
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i sign =
        _mm256_and_si256(bits, _mm256_set1_epi32(static_cast<int32_t>(0x80000000u)));
    const __m256i mag = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(mag, 22), _mm256_set1_epi32(1));
    const __m256i rounded =
        _mm256_add_epi32(_mm256_add_epi32(mag, _mm256_set1_epi32(0x1fffff)), lsb);
    const __m256i normal =
        _mm256_and_si256(rounded, _mm256_set1_epi32(static_cast<int32_t>(0xffc00000u)));
    const __m256 fmag = _mm256_castsi256_ps(mag);
    const __m256 sub = _mm256_mul_ps(
        _mm256_cvtepi32_ps(_mm256_cvtps_epi32(_mm256_add_ps(fmag, fmag))), _mm256_set1_ps(0.5f));
    const __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x3f800000), mag);  // mag < 1
    const __m256i r = _mm256_blendv_epi8(normal, _mm256_castps_si256(sub), is_sub);
    return _mm256_castsi256_ps(_mm256_or_si256(r, sign));
  }

  // F32ToBf16 on 8 lanes (round to nearest even, NaN stays a quiet NaN).
  [[gnu::always_inline]] static void StoreBf16(bf16* p, F v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    r = _mm256_blendv_epi8(r, quiet, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }

  // packus works per 128-bit lane: the dwords come out as
  // [c0 lo, c1 lo, c2 lo, c3 lo | c0 hi, ...]; the permute restores order.
  [[gnu::always_inline]] static void StoreCodes(uint8_t* p, const I* c) {
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256i w01 = _mm256_packus_epi32(c[0], c[1]);
    const __m256i w23 = _mm256_packus_epi32(c[2], c[3]);
    const __m256i b = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(w01, w23), order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), b);
  }
};

}  // namespace

constinit const QuantKernels kQuantKernelsAvx2 = QuantKernelTable<QuantAvx2>();

}  // namespace dsv4::kernels::cpu
