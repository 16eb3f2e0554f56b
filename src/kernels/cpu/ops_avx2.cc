// AVX2 instantiation of ops_simd-inl.h (8 FP32 lanes).
#include <immintrin.h>

#include "kernels/cpu/ops_cpu.h"

namespace dsv4::kernels::cpu {
namespace {

struct VecAvx2 {
  using F = __m256;
  static constexpr int64_t kLanes = 8;

  static F Zero() { return _mm256_setzero_ps(); }
  static F Set1(float v) { return _mm256_set1_ps(v); }
  static F Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F LoadBf16(const bf16* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  // Round to nearest even on the bit pattern; NaN becomes a quiet NaN.
  static F RoundBf16(F v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
    const __m256i quiet = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
    const __m256 is_nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    r = _mm256_blendv_epi8(r, quiet, _mm256_castps_si256(is_nan));
    return _mm256_castsi256_ps(
        _mm256_and_si256(r, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  static void StoreBf16(bf16* p, F v) {
    const __m256i r = _mm256_srli_epi32(_mm256_castps_si256(RoundBf16(v)), 16);
    // packus works per 128-bit half: qwords 0 and 2 hold elements 0-3, 4-7.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }
  static F Add(F a, F b) { return _mm256_add_ps(a, b); }
  static F Mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F Div(F a, F b) { return _mm256_div_ps(a, b); }
  static F Fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F Max(F a, F b) { return _mm256_max_ps(a, b); }
  static F Min(F a, F b) { return _mm256_min_ps(a, b); }
  // x > limit ? above : other, per lane (false for NaN).
  static F SelectAbove(F x, float limit, F above, F other) {
    return _mm256_blendv_ps(other, above, _mm256_cmp_ps(x, _mm256_set1_ps(limit), _CMP_GT_OQ));
  }
  // table[bits] for the 8 BF16 values at p.
  static F LookupBf16(const float* table, const bf16* p) {
    const __m256i idx = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_i32gather_ps(table, idx, 4);
  }
  static F Sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F Floor(F a) { return _mm256_floor_ps(a); }
  // y * 2^n for integral n in [-126, 127].
  static F ScalePow2(F y, F n) {
    const __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
  }
  static F ZeroBelow(F v, F x, float limit) {
    return _mm256_andnot_ps(_mm256_cmp_ps(x, _mm256_set1_ps(limit), _CMP_LT_OQ), v);
  }
  static float ReduceMax(F v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
  // (lane i + lane i+4), then pairs, then the last two: one fixed tree.
  static float ReduceAdd(F v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
};

}  // namespace
}  // namespace dsv4::kernels::cpu

#include "kernels/cpu/ops_simd-inl.h"

namespace dsv4::kernels::cpu {

constinit const OpsKernels kOpsKernelsAvx2 = OpsKernelTable<VecAvx2>();

}  // namespace dsv4::kernels::cpu
