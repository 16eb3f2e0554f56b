// AVX-512 instantiation of ops_simd-inl.h (16 FP32 lanes).  Compiled with
// AVX-512 flags; reached only through ActiveIsa() == kAvx512.
#include "kernels/cpu/avx512_intrinsics.h"
#include "kernels/cpu/ops_cpu.h"

namespace dsv4::kernels::cpu {
namespace {

struct VecAvx512 {
  using F = __m512;
  static constexpr int64_t kLanes = 16;

  static F Zero() { return _mm512_setzero_ps(); }
  static F Set1(float v) { return _mm512_set1_ps(v); }
  static F Load(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F LoadBf16(const bf16* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  // Round to nearest even on the bit pattern; NaN becomes a quiet NaN.
  static F RoundBf16(F v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
    const __mmask16 is_nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(r, is_nan, _mm512_or_si512(u, _mm512_set1_epi32(0x00400000)));
    return _mm512_castsi512_ps(
        _mm512_and_si512(r, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  static void StoreBf16(bf16* p, F v) {
    const __m512i r = _mm512_srli_epi32(_mm512_castps_si512(RoundBf16(v)), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(r));
  }
  static F Add(F a, F b) { return _mm512_add_ps(a, b); }
  static F Mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F Div(F a, F b) { return _mm512_div_ps(a, b); }
  static F Fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F Max(F a, F b) { return _mm512_max_ps(a, b); }
  static F Min(F a, F b) { return _mm512_min_ps(a, b); }
  // x > limit ? above : other, per lane (false for NaN).
  static F SelectAbove(F x, float limit, F above, F other) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(limit), _CMP_GT_OQ), other,
                                above);
  }
  // table[bits] for the 16 BF16 values at p.
  static F LookupBf16(const float* table, const bf16* p) {
    const __m512i idx =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_i32gather_ps(idx, table, 4);
  }
  static F Sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F Floor(F a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
  // y * 2^n for integral n in [-126, 127].
  static F ScalePow2(F y, F n) {
    const __m512i e =
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(y, _mm512_castsi512_ps(e));
  }
  static F ZeroBelow(F v, F x, float limit) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(limit), _CMP_GE_OQ), v);
  }
  static float ReduceMax(F v) {
    const __m256 h =
        _mm256_max_ps(_mm512_castps512_ps256(v),
                      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
  // key_t[d * 16 + e] = fp32(keys[e][d]) for e < n, 0 for n <= e < 16
  // (IndexerTile's transposed keys): per pair of dims one 4-byte gather from
  // each row, its halves widened.  An odd last dim is read alone (4 bytes
  // there could cross the row's end).
  static void TransposeKeys(const bf16* const* keys, int64_t n, int64_t dim, float* key_t) {
    const auto lanes = [n](int64_t first) -> __mmask8 {
      const int64_t k = n - first;
      return k <= 0 ? 0 : k >= 8 ? 0xff : static_cast<__mmask8>((1u << k) - 1);
    };
    const __mmask8 m0 = lanes(0), m1 = lanes(8);
    __m512i p0 = _mm512_maskz_loadu_epi64(m0, keys);
    __m512i p1 = _mm512_maskz_loadu_epi64(m1, keys + 8);
    const __m512i step = _mm512_set1_epi64(4);
    const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
    int64_t d = 0;
    for (; d + 2 <= dim; d += 2) {
      const __m256i g0 = _mm512_mask_i64gather_epi32(_mm256_setzero_si256(), m0, p0, nullptr, 1);
      const __m256i g1 = _mm512_mask_i64gather_epi32(_mm256_setzero_si256(), m1, p1, nullptr, 1);
      const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(g0), g1, 1);
      _mm512_storeu_si512(key_t + d * 16, _mm512_slli_epi32(v, 16));
      _mm512_storeu_si512(key_t + (d + 1) * 16, _mm512_and_si512(v, high));
      p0 = _mm512_add_epi64(p0, step);
      p1 = _mm512_add_epi64(p1, step);
    }
    if (d < dim) {
      for (int64_t e = 0; e < 16; ++e) {
        uint32_t bits = e < n ? static_cast<uint32_t>(keys[e][d].bits) << 16 : 0;
        __builtin_memcpy(key_t + d * 16 + e, &bits, 4);
      }
    }
  }
  // (lane i + lane i+8), then the AVX2 tree: one fixed order.
  static float ReduceAdd(F v) {
    const __m256 h =
        _mm256_add_ps(_mm512_castps512_ps256(v),
                      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
};

}  // namespace
}  // namespace dsv4::kernels::cpu

#include "kernels/cpu/attention_bf16dot-inl.h"

namespace dsv4::kernels::cpu {

constinit const OpsKernels kOpsKernelsAvx512 = [] {
  OpsKernels k = OpsKernelTable<VecAvx512>();
  k.attend_heads_bf16dot = &AttendHeadsBf16Dot<VecAvx512>;
  return k;
}();

}  // namespace dsv4::kernels::cpu
