// AVX-512 instantiation of the GEMM kernel families (gemm_simd-inl.h): 16
// FP32 lanes, 16-column panels.  Compiled with AVX-512 flags; gemm.cc reaches
// it only through kGemmKernelsAvx512 when ActiveIsa() == kAvx512.  Layout and
// numerics: docs/kernels.md.
// GCC 12's AVX-512 headers initialise "undefined" vectors from themselves,
// which -Wuninitialized reports inside the intrinsics (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "kernels/cpu/avx512_bf16_store-inl.h"
#include "kernels/cpu/gemm_simd-inl.h"

namespace dsv4::kernels::cpu {
namespace {

[[gnu::always_inline]] inline __mmask16 TailMask(int64_t count) { return TailMask16(count); }

// 32 e4m3 codes -> 32 floats equal to value·2^-8, exactly: each code becomes
// the FP16 with the same sign, exponent field and mantissa (bias 15 instead
// of 7); e4m3 subnormals become FP16 subnormals, which vcvtph2ps widens
// exactly.  Four integer/convert ops per 16 weights, no FP32 denormals.
[[gnu::always_inline]] inline void DecodeE4M3x32(const uint8_t* p, __m512* out) {
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  __m512i h = _mm512_slli_epi16(_mm512_cvtepi8_epi16(b), 7);
  // The sign-extended byte leaves a second sign copy in bit 14.
  h = _mm512_and_si512(h, _mm512_set1_epi16(static_cast<int16_t>(0xbfff)));
  out[0] = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
  out[1] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
}

struct GemmAvx512 {
  using F = __m512;
  using BH = __m512bh;
  static constexpr int64_t kLanes = 16;
  // 32 registers: a block's 8 activation vectors stay in registers, two rows
  // share each weight load, and 2-4 rows can be held at once (few-row paths).
  static constexpr bool kXInRegisters = true;
  static constexpr bool kPairRows = true;
  static constexpr bool kFewRowPaths = true;
  // vdpbf16ps (the CPU must also report AVX512-BF16; gemm.cc checks).
  static constexpr bool kBf16Dot = true;

  [[gnu::always_inline]] static F Zero() { return _mm512_setzero_ps(); }
  [[gnu::always_inline]] static F Set1(float v) { return _mm512_set1_ps(v); }
  [[gnu::always_inline]] static F Load(const float* p) { return _mm512_loadu_ps(p); }
  // min(n, 16) values, zero filled (masked: never reads beyond them).
  [[gnu::always_inline]] static F LoadUpto(const float* p, int64_t n) {
    return _mm512_maskz_loadu_ps(TailMask(n), p);
  }
  [[gnu::always_inline]] static F Bf16Widen(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  [[gnu::always_inline]] static F LoadBf16(const bf16* p) {
    return Bf16Widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  [[gnu::always_inline]] static F LoadBf16Upto(const bf16* p, int64_t n) {
    return Bf16Widen(_mm256_maskz_loadu_epi16(TailMask(n), p));
  }
  [[gnu::always_inline]] static F Add(F a, F b) { return _mm512_add_ps(a, b); }
  [[gnu::always_inline]] static F Mul(F a, F b) { return _mm512_mul_ps(a, b); }
  [[gnu::always_inline]] static F Fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }

  // 128 e4m3 codes -> 8 vectors of value·2^-8.
  [[gnu::always_inline]] static void DecodeFp8Block(const uint8_t* codes, F* w) {
#pragma GCC unroll 16
    for (int i = 0; i < 4; ++i) DecodeE4M3x32(codes + 32 * i, w + 2 * i);
  }

  // 128 packed e2m1 weights of one row (64 bytes, 4 scale bytes) -> 8
  // vectors, each value multiplied by its block scale (exact: powers of two).
  // vpermps looks the value up in the 16-entry table (pre-multiplied by the
  // scale); vector 2j holds the even elements of 32-block j (low nibbles),
  // vector 2j+1 the odd ones.
  [[gnu::always_inline]] static void DecodeFp4Block(const uint8_t* packed, const uint8_t* scales,
                                                    F* w) {
    const __m512 table = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f,
                                        -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
#pragma GCC unroll 16
    for (int j = 0; j < 4; ++j) {
      const __m512 t = _mm512_mul_ps(
          table, _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int32_t>(E8M0Bits(scales[j])))));
      const __m512i d =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(packed + 16 * j)));
      w[2 * j] = _mm512_permutexvar_ps(d, t);  // uses the low 4 bits: low nibble
      w[2 * j + 1] = _mm512_permutexvar_ps(_mm512_srli_epi32(d, 4), t);
    }
  }

  // Sums each of 16 lane vectors.  Result lane 4·(c%4) + c/4 holds the sum of
  // v[c] (UnpermuteColumns restores column order); the tree is fixed: lanes
  // l and l+8, then l+4, l+2, l+1.  45 ops for the panel instead of a
  // horizontal sum per column.
  [[gnu::always_inline]] static F ReducePanel(const F* v) {
    __m512 s[8], t[4], u[2];
#pragma GCC unroll 16
    for (int i = 0; i < 8; ++i) {
      s[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                           _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xee));
    }
#pragma GCC unroll 16
    for (int i = 0; i < 4; ++i) {
      t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], 0x88),
                           _mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], 0xdd));
    }
#pragma GCC unroll 16
    for (int i = 0; i < 2; ++i) {
      u[i] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * i], t[2 * i + 1], 0x44),
                           _mm512_shuffle_ps(t[2 * i], t[2 * i + 1], 0xee));
    }
    return _mm512_add_ps(_mm512_shuffle_ps(u[0], u[1], 0x88), _mm512_shuffle_ps(u[0], u[1], 0xdd));
  }

  [[gnu::always_inline]] static F UnpermuteColumns(F r) {
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(idx, r);
  }

  // Round to nearest even like F32ToBf16 (NaN stays a quiet NaN); stores count.
  [[gnu::always_inline]] static void StoreBf16(bf16* y, F v, int64_t count) {
    StoreBf16x16(y, v, count);
  }
  [[gnu::always_inline]] static void StoreF32(float* y, F v, int64_t count) {
    _mm512_mask_storeu_ps(y, TailMask(count), v);
  }

  // BF16 pair dot products (AVX512-BF16).
  [[gnu::always_inline]] static BH LoadBh(const bf16* p) {
    return reinterpret_cast<__m512bh>(_mm512_loadu_si512(p));
  }
  [[gnu::always_inline]] static BH LoadBhTail(const bf16* p, int64_t n) {
    const __mmask32 mask = n >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << n) - 1);
    return reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(mask, p));
  }
  [[gnu::always_inline]] static F DotBh(F acc, BH a, BH b) { return _mm512_dpbf16_ps(acc, a, b); }
};

}  // namespace

constinit const GemmKernels kGemmKernelsAvx512 = GemmKernelTable<GemmAvx512>();

}  // namespace dsv4::kernels::cpu
