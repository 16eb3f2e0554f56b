// AVX2 panel kernels of gemm_cpu.h: the AVX-512 design (gemm_avx512.cc,
// docs/kernels.md) with 8-column panels and 8-lane vectors.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/gemm_cpu.h"

namespace dsv4::kernels::cpu {
namespace {

constexpr int64_t kP = kPanelAvx2;
constexpr int64_t kMTile = 64;
constexpr int64_t kDenseMTile = 32;
constexpr int64_t kChunk = 128;
constexpr int kVecs = 16;  // 8-float vectors per 128-wide chunk

int64_t Min(int64_t a, int64_t b) { return a < b ? a : b; }

// Software prefetch of the cache lines of [p, p + bytes).  The GEMV reads
// 16 (8) weight rows at once, a pattern the hardware prefetchers follow
// poorly; fetching the next panel's block while decoding this one makes the
// DRAM-bound GEMV about twice as fast.  Prefetches never fault.
[[gnu::always_inline]] inline void Prefetch(const void* p, int64_t bytes) {
  for (int64_t i = 0; i < bytes; i += 64) {
    _mm_prefetch(static_cast<const char*>(p) + i, _MM_HINT_T0);
  }
}

// FP32 bits of an E8M0 scale: 2^(byte-127); byte 0 is 2^-127 (subnormal),
// 255 NaN.  Kept as a table so the FP4 decode broadcasts each block scale straight
// from L1 (one load-broadcast) instead of a compare/select chain and a
// GPR-to-vector move per 32 weights; same bits as the formula.
struct E8M0BitsTable {
  uint32_t bits[256];
  constexpr E8M0BitsTable() : bits() {
    for (int b = 0; b < 256; ++b) {
      bits[b] = b == 0 ? 0x00400000u : b == 255 ? 0x7fc00000u : static_cast<uint32_t>(b) << 23;
    }
  }
};
constexpr E8M0BitsTable kE8M0Bits;

[[gnu::always_inline]] inline uint32_t E8M0Bits(uint8_t byte) { return kE8M0Bits.bits[byte]; }

[[gnu::always_inline]] inline float E8M0Value(uint8_t byte) {
  const uint32_t bits = E8M0Bits(byte);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// 16 e4m3 codes -> 16 floats equal to value·2^-8, exactly (via FP16, as in
// the AVX-512 kernels).
[[gnu::always_inline]] inline void DecodeE4M3x16(const uint8_t* p, __m256* out) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  __m256i h = _mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7);
  h = _mm256_and_si256(h, _mm256_set1_epi16(static_cast<int16_t>(0xbfff)));
  out[0] = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
  out[1] = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
}

[[gnu::always_inline]] inline void DecodeFp8Block(const uint8_t* codes, __m256* w) {
#pragma GCC unroll 16
  for (int i = 0; i < 8; ++i) DecodeE4M3x16(codes + 16 * i, w + 2 * i);
}

// 128 packed e2m1 weights -> 16 vectors scaled by their block scales.  Each
// 16-element group g gives vector 2g (its even elements) and 2g+1 (odd).
// vpermps looks up the magnitude from the low 3 index bits; the sign bit of
// the nibble is moved to bit 31 and OR-ed in.
[[gnu::always_inline]] inline void DecodeFp4Block(const uint8_t* packed, const uint8_t* scales,
                                                  __m256* w) {
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

// Up to 128 dense weights of one row -> ceil(count/8) vectors, zero padded.
// The tail goes through a zeroed copy: AVX2 has no 16-bit masked load.
[[gnu::always_inline]] inline void DecodeDenseChunk(const bf16* w, int64_t count, __m256* out) {
  const int64_t full = count / 8;
  for (int64_t v = 0; v < full; ++v) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 8 * v));
    out[v] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  if (count % 8 != 0) {
    uint16_t tail[8] = {};
    std::memcpy(tail, w + 8 * full, static_cast<size_t>(count % 8) * 2);
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(tail));
    out[full] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}
[[gnu::always_inline]] inline void DecodeDenseChunk(const float* w, int64_t count, __m256* out) {
  const int64_t full = count / 8;
  for (int64_t v = 0; v < full; ++v) out[v] = _mm256_loadu_ps(w + 8 * v);
  if (count % 8 != 0) {
    float tail[8] = {};
    std::memcpy(tail, w + 8 * full, static_cast<size_t>(count % 8) * 4);
    out[full] = _mm256_loadu_ps(tail);
  }
}

// Exact products (see gemm_avx512.cc): FMA equals multiply-then-add.
// Two interleaved chains (even and odd vectors) halve the FMA latency chain.
[[gnu::always_inline]] inline __m256 Chain16(const __m256* w, const float* x) {
  __m256 even = _mm256_mul_ps(w[0], _mm256_loadu_ps(x));
  __m256 odd = _mm256_mul_ps(w[1], _mm256_loadu_ps(x + 8));
#pragma GCC unroll 16
  for (int i = 2; i < kVecs; i += 2) {
    even = _mm256_fmadd_ps(w[i], _mm256_loadu_ps(x + 8 * i), even);
    odd = _mm256_fmadd_ps(w[i + 1], _mm256_loadu_ps(x + 8 * i + 8), odd);
  }
  return _mm256_add_ps(even, odd);
}

// Sums each of 8 lane vectors; result lane (c%2)·4 + c/2 holds column c.
// Fixed tree: lanes l and l+4, then l+2, then l+1.
[[gnu::always_inline]] inline __m256 Reduce8(const __m256* v) {
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

[[gnu::always_inline]] inline __m256 UnpermuteColumns(__m256 r) {
  return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Round to nearest even like F32ToBf16 (NaN stays a quiet NaN); stores count.
[[gnu::always_inline]] inline void StoreBf16(bf16* y, __m256 v, int64_t count) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  r = _mm256_blendv_epi8(r, quiet, nan);
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
  uint16_t out[8];
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(packed));
  std::memcpy(y, out, static_cast<size_t>(count) * 2);
}

[[gnu::always_inline]] inline void StoreF32(float* y, __m256 v, int64_t count) {
  float out[8];
  _mm256_storeu_ps(out, v);
  std::memcpy(y, out, static_cast<size_t>(count) * 4);
}

// acc + (block partial sums of the panel)·scale, multiply then add.
[[gnu::always_inline]] inline __m256 AddBlock(__m256 acc, const __m256* lanes, float scale) {
  return _mm256_add_ps(acc, _mm256_mul_ps(Reduce8(lanes), _mm256_set1_ps(scale)));
}

// Rows [0, mt) of a tile against one decoded panel block (x: row 0's block,
// row stride k; x_scales: row 0's block scale, row stride num_kb).
void TileBlock(const __m256 (*wdec)[kVecs], int64_t nc, const float* x, int64_t k,
               const float* x_scales, int64_t num_kb, float sw, int64_t mt, __m256* acc) {
  __m256 lanes[kP];
#pragma GCC unroll 16
  for (int c = 0; c < kP; ++c) lanes[c] = _mm256_setzero_ps();
  for (int64_t r = 0; r < mt; ++r) {
    for (int64_t c = 0; c < nc; ++c) lanes[c] = Chain16(wdec[c], x + r * k);
    acc[r] = AddBlock(acc[r], lanes, x_scales[r * num_kb] * sw);
  }
}

// One row (decode GEMV) against one panel block: decoded weights feed the
// FMAs directly, with the same per-column chain as TileBlock.
template <typename Decode>
[[gnu::always_inline]] inline __m256 GemvBlock(const Decode& decode, int64_t n0, int64_t kb,
                                               int64_t nc, const float* x, float scale,
                                               __m256 acc) {
  __m256 lanes[kP];
#pragma GCC unroll 16
  for (int c = 0; c < kP; ++c) lanes[c] = _mm256_setzero_ps();
  for (int64_t c = 0; c < nc; ++c) {
    __m256 wv[kVecs];
    decode(n0 + c, kb, wv);
    lanes[c] = Chain16(wv, x);
  }
  return AddBlock(acc, lanes, scale);
}

// Block-scaled GEMM over the tile t (see gemm_avx512.cc).
template <typename Decode, typename PanelScale>
void BlockScaledPanels(const float* x, const float* x_scales, int64_t k, int64_t n, bf16* y,
                       const Tile& t, Decode decode, PanelScale panel_scale) {
  const int64_t num_kb = k / 128;
  alignas(32) __m256 wdec[kP][kVecs];
  alignas(32) __m256 acc[kMTile];
  for (int64_t m0 = t.row_begin; m0 < t.row_end; m0 += kMTile) {
    const int64_t mt = Min(kMTile, t.row_end - m0);
    for (int64_t p = t.panel_begin; p < t.panel_end; ++p) {
      const int64_t n0 = p * kP;
      const int64_t nc = Min(kP, n - n0);
      for (int64_t r = 0; r < mt; ++r) acc[r] = _mm256_setzero_ps();
      for (int64_t kb = 0; kb < num_kb; ++kb) {
        const float sw = panel_scale(n0, kb);
        const float* xb = x + m0 * k + kb * 128;
        const float* sb = x_scales + m0 * num_kb + kb;
        if (mt == 1) {
          acc[0] = GemvBlock(decode, n0, kb, nc, xb, sb[0] * sw, acc[0]);
        } else {
          for (int64_t c = 0; c < nc; ++c) decode(n0 + c, kb, wdec[c]);
          TileBlock(wdec, nc, xb, k, sb, num_kb, sw, mt, acc);
        }
      }
      for (int64_t r = 0; r < mt; ++r)
        StoreBf16(y + (m0 + r) * n + n0, UnpermuteColumns(acc[r]), nc);
    }
  }
}

// decode(col, k0, count, out) yields up to 128 weights of column col from
// k0 on, zero padded to whole vectors (and prefetches ahead).
template <typename Decode>
void DensePanels(const DenseGemmArgs& a, const Decode& decode, const Tile& t) {
  alignas(32) __m256 wdec[kP][kVecs];
  alignas(32) __m256 lanes[kDenseMTile][kP];
  for (int64_t m0 = t.row_begin; m0 < t.row_end; m0 += kDenseMTile) {
    const int64_t mt = Min(kDenseMTile, t.row_end - m0);
    for (int64_t p = t.panel_begin; p < t.panel_end; ++p) {
      const int64_t n0 = p * kP;
      const int64_t nc = Min(kP, a.n - n0);
      for (int64_t r = 0; r < mt; ++r) {
#pragma GCC unroll 16
        for (int c = 0; c < kP; ++c) lanes[r][c] = _mm256_setzero_ps();
      }
      for (int64_t k0 = 0; k0 < a.k; k0 += kChunk) {
        const int64_t count = Min(kChunk, a.k - k0);
        for (int64_t c = 0; c < nc; ++c) decode(n0 + c, k0, count, wdec[c]);
        for (int64_t r = 0; r < mt; ++r) {
          const float* xr = a.x + (m0 + r) * a.ldx + k0;
          for (int64_t c = 0; c < nc; ++c) {
            __m256 lane = lanes[r][c];
#pragma GCC unroll 16
            for (int v = 0; v * 8 < count; ++v) {
              lane = _mm256_fmadd_ps(wdec[c][v], _mm256_loadu_ps(xr + 8 * v), lane);
            }
            lanes[r][c] = lane;
          }
        }
      }
      for (int64_t r = 0; r < mt; ++r) {
        const __m256 out = UnpermuteColumns(Reduce8(lanes[r]));
        if (a.y_bf16 != nullptr) {
          StoreBf16(a.y_bf16 + (m0 + r) * a.ldy + n0, out, nc);
        } else {
          StoreF32(a.y_f32 + (m0 + r) * a.ldy + n0, out, nc);
        }
      }
    }
  }
}

// Decoder of a BF16 or FP32 weight for DensePanels.
template <typename W>
auto DenseDecoder(const DenseGemmArgs& a, const W* w) {
  return [&a, w](int64_t col, int64_t k0, int64_t count, __m256* out) {
    const W* row = w + col * a.k + k0;
    if (col + kP < a.n) Prefetch(row + kP * a.k, count * static_cast<int64_t>(sizeof(W)));
    DecodeDenseChunk(row, count, out);
  };
}

}  // namespace

void Fp8GemmPanelsAvx2(const Fp8GemmArgs& a, const Tile& t) {
  const Fp8Weight& w = a.w;
  const int64_t ld_scale = (w.in + 127) / 128;
  BlockScaledPanels(
      a.x, a.x_scales, w.in, w.out, a.y, t,
      [&](int64_t col, int64_t kb, __m256* out) {
        const uint8_t* p = w.codes + col * w.in + kb * 128;
        if (col + kP < w.out) Prefetch(p + kP * w.in, 128);
        DecodeFp8Block(p, out);
      },
      [&](int64_t n0, int64_t kb) { return E8M0Value(w.scales[(n0 / 128) * ld_scale + kb]); });
}

void Fp4GemmPanelsAvx2(const Fp4GemmArgs& a, const Tile& t) {
  const Fp4Weight& w = a.w;
  BlockScaledPanels(
      a.x, a.x_scales, w.in, w.out, a.y, t,
      [&](int64_t col, int64_t kb, __m256* out) {
        const uint8_t* packed = w.packed + col * (w.in / 2) + kb * 64;
        const uint8_t* scales = w.scales + col * (w.in / 32) + kb * 4;
        if (col + kP < w.out) {
          Prefetch(packed + kP * (w.in / 2), 64);
          // A column's scales are in/32 contiguous bytes: fetch the next
          // panel's 64 of them once per 16 blocks, not 4 bytes per block.
          if (kb % 16 == 0) {
            const char* s_next = reinterpret_cast<const char*>(scales + kP * (w.in / 32));
            _mm_prefetch(s_next, _MM_HINT_T0);
            _mm_prefetch(s_next + 63, _MM_HINT_T0);
          }
        }
        DecodeFp4Block(packed, scales, out);
      },
      [](int64_t, int64_t) { return 1.0f; });
}

void DenseGemmPanelsAvx2(const DenseGemmArgs& a, const Tile& t) {
  if (a.w_fp8 != nullptr) {
    // w = (code·2^-8)·(scale·2^8): both factors exact, so one rounding of
    // code·scale, which the caller guarantees is exact: the BF16 weight.
    const Fp8Weight& w = *a.w_fp8;
    const int64_t ld_scale = w.in / 128;
    DensePanels(
        a,
        [&](int64_t col, int64_t k0, int64_t, __m256* out) {
          const uint8_t* p = w.codes + col * w.in + k0;
          if (col + kP < w.out) Prefetch(p + kP * w.in, 128);
          DecodeFp8Block(p, out);
          const __m256 s =
              _mm256_set1_ps(E8M0Value(w.scales[(col / 128) * ld_scale + k0 / 128]) * 256.0f);
#pragma GCC unroll 16
          for (int v = 0; v < kVecs; ++v) out[v] = _mm256_mul_ps(out[v], s);
        },
        t);
  } else if (a.w_bf16 != nullptr) {
    DensePanels(a, DenseDecoder(a, a.w_bf16), t);
  } else {
    DensePanels(a, DenseDecoder(a, a.w_f32), t);
  }
}

}  // namespace dsv4::kernels::cpu
