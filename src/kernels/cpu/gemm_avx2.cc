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

  // The FP4 kernel's integer set (gemm_fp4-inl.h).
  using I = __m256i;
  [[gnu::always_inline]] static I ZeroI() { return _mm256_setzero_si256(); }
  [[gnu::always_inline]] static I LoadI(const uint8_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  // One vector of 32 packed bytes -> w[0] its low nibbles, w[1] its high
  // ones, each as the unsigned byte 2·e2m1 + 12.
  [[gnu::always_inline]] static void Fp4Weights(const uint8_t* packed, I* w) {
    const I table = _mm256_broadcastsi128_si256(
        _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    const I low4 = _mm256_set1_epi8(0x0f);
    const I v = LoadI(packed);
    w[0] = _mm256_shuffle_epi8(table, _mm256_and_si256(v, low4));
    w[1] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), low4));
  }
  // 4 bytes at p in every int32 lane (a dot product's broadcast operand).
  [[gnu::always_inline]] static I BroadcastI(const uint8_t* p) {
    int32_t v;
    __builtin_memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
  }
  // vpmaddubsw (pairs of products, at most 2·24·128: never saturates) +
  // vpmaddwd: the 4-product sums of vpdpbusd, which x86-64-v3 lacks.
  [[gnu::always_inline]] static I DotU8S8(I acc, I u, I s) {
    return _mm256_add_epi32(acc,
                            _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
  }
  [[gnu::always_inline]] static I DotU8S8At(I acc, I u, const uint8_t* p) {
    return DotU8S8(acc, u, BroadcastI(p));
  }
  [[gnu::always_inline]] static I AddI(I a, I b) { return _mm256_add_epi32(a, b); }
  [[gnu::always_inline]] static I Shl8(I v) { return _mm256_slli_epi32(v, 8); }
  [[gnu::always_inline]] static I SubI(I v, int32_t s) {
    return _mm256_sub_epi32(v, _mm256_set1_epi32(s));
  }
  [[gnu::always_inline]] static F CvtI(I v) { return _mm256_cvtepi32_ps(v); }
  // True when a byte of v is 0 or 255, the E8M0 values E8M0Bytes' plain
  // shift does not give.
  [[gnu::always_inline]] static bool E8M0Special(I v) {
    return _mm256_movemask_epi8(_mm256_or_si256(_mm256_cmpeq_epi8(v, ZeroI()),
                                                _mm256_cmpeq_epi8(v, _mm256_set1_epi8(-1)))) != 0;
  }
  // Byte j of every lane as the E8M0 value 2^(byte - 127): the byte moved to
  // the lane's top byte and shifted right by one lands in the exponent field.
  // With kSpecial, byte 0 gives 2^-127 and 255 NaN (as E8M0Bits).
  template <bool kSpecial>
  [[gnu::always_inline]] static F E8M0Bytes(I dwords, int j) {
    // vpshufb indexes bytes within 128-bit chunks: lane d of a chunk takes byte 4d + j.
    const I top = _mm256_shuffle_epi8(
        dwords, _mm256_add_epi32(_mm256_setr_epi32(0x00808080, 0x04808080, 0x08808080, 0x0c808080,
                                                   0x00808080, 0x04808080, 0x08808080, 0x0c808080),
                                 _mm256_set1_epi32(j << 24)));
    I bits = _mm256_srli_epi32(top, 1);
    if constexpr (kSpecial) {
      const I b = _mm256_srli_epi32(top, 24);
      bits =
          _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x00400000), _mm256_cmpeq_epi32(b, ZeroI()));
      bits = _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x7fc00000),
                                _mm256_cmpeq_epi32(b, _mm256_set1_epi32(0xff)));
    }
    return _mm256_castsi256_ps(bits);
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
