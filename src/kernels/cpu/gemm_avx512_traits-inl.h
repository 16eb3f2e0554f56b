// The AVX-512 GEMM traits (gemm_simd_common-inl.h: 16 FP32 lanes, 16-column
// panels), shared by the AVX-512 translation units (gemm_avx512.cc, and
// gemm_avx512_vbmi.cc for the FP4 kernel with VBMI byte permutes).  Included
// only by units compiled with AVX-512 flags; internal linkage throughout.
#pragma once

#include "kernels/cpu/avx512_bf16_store-inl.h"
#include "kernels/cpu/avx512_intrinsics.h"
#include "kernels/cpu/gemm_simd_common-inl.h"

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
  // vdpbf16ps (the CPU must also report AVX512-BF16; the GEMM drivers check).
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

  // The FP4 kernel's integer set (gemm_fp4-inl.h).
  using I = __m512i;
  [[gnu::always_inline]] static I ZeroI() { return _mm512_setzero_si512(); }
  [[gnu::always_inline]] static I LoadI(const uint8_t* p) { return _mm512_loadu_si512(p); }
  // One vector of 64 packed bytes -> w[0] its low nibbles, w[1] its high
  // ones, each as the unsigned byte 2·e2m1 + 12.
  [[gnu::always_inline]] static void Fp4Weights(const uint8_t* packed, I* w) {
    const I table = _mm512_broadcast_i32x4(
        _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    const I low4 = _mm512_set1_epi8(0x0f);
    const I v = LoadI(packed);
    w[0] = _mm512_shuffle_epi8(table, _mm512_and_si512(v, low4));
    w[1] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), low4));
  }
  [[gnu::always_inline]] static I DotU8S8(I acc, I u, I s) {
    return _mm512_dpbusd_epi32(acc, u, s);
  }
  // DotU8S8(acc, u, BroadcastI(p)) as one instruction: the dword at p as
  // an embedded broadcast operand (GCC does not fold the broadcast itself).
  [[gnu::always_inline]] static I DotU8S8At(I acc, I u, const uint8_t* p) {
    asm("vpdpbusd %2%{1to16%}, %1, %0"
        : "+v"(acc)
        : "v"(u), "m"(*reinterpret_cast<const int32_t*>(p)));
    return acc;
  }
  [[gnu::always_inline]] static I AddI(I a, I b) { return _mm512_add_epi32(a, b); }
  [[gnu::always_inline]] static I Shl8(I v) { return _mm512_slli_epi32(v, 8); }
  [[gnu::always_inline]] static I SubI(I v, int32_t s) {
    return _mm512_sub_epi32(v, _mm512_set1_epi32(s));
  }
  [[gnu::always_inline]] static F CvtI(I v) { return _mm512_cvtepi32_ps(v); }
  // 4 bytes at p in every int32 lane (a dot product's broadcast operand).
  [[gnu::always_inline]] static I BroadcastI(const uint8_t* p) {
    int32_t v;
    __builtin_memcpy(&v, p, sizeof v);
    return _mm512_set1_epi32(v);
  }
  // True when a byte of v is 0 or 255, the E8M0 values E8M0Bytes' plain
  // shift does not give.
  [[gnu::always_inline]] static bool E8M0Special(I v) {
    return (_mm512_cmpeq_epi8_mask(v, ZeroI()) | _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8(-1))) !=
           0;
  }
  // Byte j of every lane as the E8M0 value 2^(byte - 127): the byte moved to
  // the lane's top byte and shifted right by one lands in the exponent field.
  // With kSpecial, byte 0 gives 2^-127 and 255 NaN (as E8M0Bits).
  template <bool kSpecial>
  [[gnu::always_inline]] static F E8M0Bytes(I dwords, int j) {
    // vpshufb indexes bytes within 128-bit chunks: lane d of a chunk takes byte 4d + j.
    const I top = _mm512_shuffle_epi8(
        dwords, _mm512_add_epi32(_mm512_set4_epi32(0x0c808080, 0x08808080, 0x04808080, 0x00808080),
                                 _mm512_set1_epi32(j << 24)));
    I bits = _mm512_srli_epi32(top, 1);
    if constexpr (kSpecial) {
      const I b = _mm512_srli_epi32(top, 24);
      bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(b, ZeroI()),
                                   _mm512_set1_epi32(0x00400000));
      bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(b, _mm512_set1_epi32(0xff)),
                                   _mm512_set1_epi32(0x7fc00000));
    }
    return _mm512_castsi512_ps(bits);
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
}  // namespace dsv4::kernels::cpu
