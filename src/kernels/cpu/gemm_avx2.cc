// AVX2 instantiation of the GEMM kernel families (gemm_simd-inl.h): 8 FP32
// lanes, 8-column panels.  Built with the baseline -march=x86-64-v3 flags
// (AVX2 + FMA + F16C).  Layout and numerics: docs/kernels.md.
#include <immintrin.h>

#include "kernels/cpu/gemm_simd-inl.h"

namespace dsv4::kernels::cpu {
namespace {

// 16 e4m3 codes -> 16 floats equal to value·2^-8, exactly (via FP16, as in
// the AVX-512 kernels: the code's fields become an FP16's, bias 15 for 7).
[[gnu::always_inline]] inline void DecodeE4M3x16(const uint8_t* p, __m256* out) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  __m256i h = _mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7);
  h = _mm256_and_si256(h, _mm256_set1_epi16(static_cast<int16_t>(0xbfff)));
  out[0] = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
  out[1] = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
}

struct GemmAvx2 {
  using F = __m256;
  static constexpr int64_t kLanes = 8;
  // 16 registers: a block's 16 activation vectors do not fit next to the
  // decoded weights, so they are FMA memory operands; rows go one at a time
  // and M = 2..4 take the tiled path.
  static constexpr bool kXInRegisters = false;
  static constexpr bool kPairRows = false;
  static constexpr bool kFewRowPaths = false;
  static constexpr bool kBf16Dot = false;

  [[gnu::always_inline]] static F Zero() { return _mm256_setzero_ps(); }
  [[gnu::always_inline]] static F Set1(float v) { return _mm256_set1_ps(v); }
  [[gnu::always_inline]] static F Load(const float* p) { return _mm256_loadu_ps(p); }
  [[gnu::always_inline]] static F LoadBf16(const bf16* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  // min(n, 8) values, zero filled.  A short tail goes through a zeroed copy:
  // AVX2 has no 16-bit masked load, and the copy never reads beyond it.
  [[gnu::always_inline]] static F LoadUpto(const float* p, int64_t n) {
    if (n >= kLanes) return Load(p);
    float tail[8] = {};
    __builtin_memcpy(tail, p, static_cast<size_t>(n) * 4);
    return _mm256_loadu_ps(tail);
  }
  [[gnu::always_inline]] static F LoadBf16Upto(const bf16* p, int64_t n) {
    if (n >= kLanes) return LoadBf16(p);
    uint16_t tail[8] = {};
    __builtin_memcpy(tail, p, static_cast<size_t>(n) * 2);
    return LoadBf16(reinterpret_cast<const bf16*>(tail));
  }
  [[gnu::always_inline]] static F Add(F a, F b) { return _mm256_add_ps(a, b); }
  [[gnu::always_inline]] static F Mul(F a, F b) { return _mm256_mul_ps(a, b); }
  [[gnu::always_inline]] static F Fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }

  // 128 e4m3 codes -> 16 vectors of value·2^-8.
  [[gnu::always_inline]] static void DecodeFp8Block(const uint8_t* codes, F* w) {
#pragma GCC unroll 16
    for (int i = 0; i < 8; ++i) DecodeE4M3x16(codes + 16 * i, w + 2 * i);
  }

  // 128 packed e2m1 weights -> 16 vectors scaled by their block scales.  Each
  // 16-element group g gives vector 2g (its even elements) and 2g+1 (odd).
  // vpermps looks up the magnitude from the low 3 index bits (8 entries
  // only); the sign bit of the nibble is moved to bit 31 and OR-ed in.
  [[gnu::always_inline]] static void DecodeFp4Block(const uint8_t* packed, const uint8_t* scales,
                                                    F* w) {
    const __m256 mags = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
    const __m256i sign_bit = _mm256_set1_epi32(static_cast<int32_t>(0x80000000u));
#pragma GCC unroll 16
    for (int j = 0; j < 4; ++j) {
      const __m256 t = _mm256_mul_ps(
          mags, _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int32_t>(E8M0Bits(scales[j])))));
#pragma GCC unroll 16
      for (int h = 0; h < 2; ++h) {
        const __m256i d = _mm256_cvtepu8_epi32(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(packed + 16 * j + 8 * h)));
        const __m256i se = _mm256_and_si256(_mm256_slli_epi32(d, 28), sign_bit);
        const __m256i so = _mm256_and_si256(_mm256_slli_epi32(d, 24), sign_bit);
        const __m256 even = _mm256_permutevar8x32_ps(t, d);
        const __m256 odd = _mm256_permutevar8x32_ps(t, _mm256_srli_epi32(d, 4));
        w[4 * j + 2 * h] = _mm256_or_ps(even, _mm256_castsi256_ps(se));
        w[4 * j + 2 * h + 1] = _mm256_or_ps(odd, _mm256_castsi256_ps(so));
      }
    }
  }

  // Sums each of 8 lane vectors; result lane (c%2)·4 + c/2 holds column c.
  // Fixed tree: lanes l and l+4, then l+2, then l+1 (21 ops per panel).
  [[gnu::always_inline]] static F ReducePanel(const F* v) {
    __m256 s[4], t[2];
#pragma GCC unroll 16
    for (int i = 0; i < 4; ++i) {
      s[i] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x20),
                           _mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x31));
    }
#pragma GCC unroll 16
    for (int i = 0; i < 2; ++i) {
      t[i] = _mm256_add_ps(_mm256_shuffle_ps(s[2 * i], s[2 * i + 1], 0x44),
                           _mm256_shuffle_ps(s[2 * i], s[2 * i + 1], 0xee));
    }
    return _mm256_add_ps(_mm256_shuffle_ps(t[0], t[1], 0x88), _mm256_shuffle_ps(t[0], t[1], 0xdd));
  }

  [[gnu::always_inline]] static F UnpermuteColumns(F r) {
    return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  }

  // Round to nearest even like F32ToBf16 (NaN stays a quiet NaN); stores count.
  [[gnu::always_inline]] static void StoreBf16(bf16* y, F v, int64_t count) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    r = _mm256_blendv_epi8(r, quiet, nan);
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    uint16_t out[8];
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(packed));
    __builtin_memcpy(y, out, static_cast<size_t>(count) * 2);
  }
  [[gnu::always_inline]] static void StoreF32(float* y, F v, int64_t count) {
    float out[8];
    _mm256_storeu_ps(out, v);
    __builtin_memcpy(y, out, static_cast<size_t>(count) * 4);
  }
};

}  // namespace

constinit const GemmKernels kGemmKernelsAvx2 = GemmKernelTable<GemmAvx2>();

}  // namespace dsv4::kernels::cpu
