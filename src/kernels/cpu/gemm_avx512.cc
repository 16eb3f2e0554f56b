// AVX-512 panel kernels of gemm_cpu.h.  Layout and numerics: docs/kernels.md.
//
// One panel = 16 output columns.  For each 128-wide K block, column c's
// products with a row are accumulated in 16 lanes (lane l takes k = l, l+16,
// ... in order), the 16 lane vectors of a panel are summed by one fixed
// transpose-and-add tree (Reduce16), and the block's 16 partial sums are
// scaled and added to the row's accumulator.  The same function computes a
// row whatever M is, so results are batch invariant.
// GCC 12's AVX-512 headers initialise "undefined" vectors from themselves,
// which -Wuninitialized reports inside the intrinsics (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/gemm_cpu.h"

namespace dsv4::kernels::cpu {
namespace {

constexpr int64_t kP = kPanelAvx512;
// Rows per tile: a tile's activation block (64 rows x 128 floats = 32 KB)
// stays in L1/L2 while the panel's decoded weight block (8 KB) is reused.
constexpr int64_t kMTile = 64;
// Dense kernels keep 16 lane vectors per row between K chunks: 32 KB.
constexpr int64_t kDenseMTile = 32;
constexpr int64_t kChunk = 128;  // K elements per decoded weight chunk
constexpr int kVecs = 8;         // vectors per chunk

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

[[gnu::always_inline]] inline __mmask16 TailMask(int64_t count) {
  return count >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << count) - 1);
}

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

[[gnu::always_inline]] inline void DecodeFp8Block(const uint8_t* codes, __m512* w) {
#pragma GCC unroll 16
  for (int i = 0; i < 4; ++i) DecodeE4M3x32(codes + 32 * i, w + 2 * i);
}

// 128 packed e2m1 weights of one row (64 bytes, 4 scale bytes) -> 8 vectors,
// each value multiplied by its block scale (exact: powers of two).  Vector
// 2j holds the even elements of 32-block j, vector 2j+1 the odd ones.
[[gnu::always_inline]] inline void DecodeFp4Block(const uint8_t* packed, const uint8_t* scales,
                                                  __m512* w) {
  const __m512 table = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f,
                                      -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
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

// Up to 128 dense weights of one row -> ceil(count/16) vectors, zero padded.
[[gnu::always_inline]] inline void DecodeDenseChunk(const bf16* w, int64_t count, __m512* out) {
#pragma GCC unroll 16
  for (int v = 0; v * 16 < count; ++v) {
    const __m256i h = _mm256_maskz_loadu_epi16(TailMask(count - 16 * v), w + 16 * v);
    out[v] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}
[[gnu::always_inline]] inline void DecodeDenseChunk(const float* w, int64_t count, __m512* out) {
#pragma GCC unroll 16
  for (int v = 0; v * 16 < count; ++v) {
    out[v] = _mm512_maskz_loadu_ps(TailMask(count - 16 * v), w + 16 * v);
  }
}

// The per-block lane chain of the block-scaled GEMMs.  Every product is exact
// (e4m3 x e4m3, or e4m3 x scaled e2m1), so FMA equals multiply-then-add.
// Two interleaved chains (even and odd vectors) halve the FMA latency chain.
[[gnu::always_inline]] inline __m512 Chain8(const __m512* w, const __m512* x) {
  __m512 even = _mm512_mul_ps(w[0], x[0]);
  __m512 odd = _mm512_mul_ps(w[1], x[1]);
#pragma GCC unroll 16
  for (int i = 2; i < kVecs; i += 2) {
    even = _mm512_fmadd_ps(w[i], x[i], even);
    odd = _mm512_fmadd_ps(w[i + 1], x[i + 1], odd);
  }
  return _mm512_add_ps(even, odd);
}

// Sums each of 16 lane vectors.  Result lane 4·(c%4) + c/4 holds the sum of
// v[c] (UnpermuteColumns restores column order); the tree is fixed: lanes
// l and l+8, then l+4, l+2, l+1.
[[gnu::always_inline]] inline __m512 Reduce16(const __m512* v) {
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

[[gnu::always_inline]] inline __m512 UnpermuteColumns(__m512 r) {
  const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(idx, r);
}

// Round to nearest even like F32ToBf16 (NaN stays a quiet NaN); stores count.
[[gnu::always_inline]] inline void StoreBf16(bf16* y, __m512 v, int64_t count) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
  r = _mm512_srli_epi32(r, 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  _mm256_mask_storeu_epi16(y, TailMask(count), _mm512_cvtepi32_epi16(r));
}

[[gnu::always_inline]] inline void LoadBlock(const float* x, __m512* out) {
#pragma GCC unroll 16
  for (int i = 0; i < kVecs; ++i) out[i] = _mm512_loadu_ps(x + 16 * i);
}

// acc + (block partial sums of the panel)·scale: one block's contribution to
// one row, multiply then add as in the reference.
[[gnu::always_inline]] inline __m512 AddBlock(__m512 acc, const __m512* lanes, float scale) {
  return _mm512_add_ps(acc, _mm512_mul_ps(Reduce16(lanes), _mm512_set1_ps(scale)));
}

// Rows [0, mt) of a tile against one decoded panel block.  x points at the
// block in row 0 (row stride k); x_scales at row 0's block scale (row stride
// num_kb).  Two rows share each weight load; the per-row arithmetic is that
// of the one-row tail, so pairing never changes a result.
void TileBlock(const __m512 (*wdec)[kVecs], int64_t nc, const float* x, int64_t k,
               const float* x_scales, int64_t num_kb, float sw, int64_t mt, __m512* acc) {
  __m512 lanes[kP], lanes2[kP];
#pragma GCC unroll 16
  for (int c = 0; c < kP; ++c) lanes[c] = lanes2[c] = _mm512_setzero_ps();
  int64_t r = 0;
  for (; r + 2 <= mt; r += 2) {
    __m512 xa[kVecs], xb[kVecs];
    LoadBlock(x + r * k, xa);
    LoadBlock(x + (r + 1) * k, xb);
    for (int64_t c = 0; c < nc; ++c) {
      lanes[c] = Chain8(wdec[c], xa);
      lanes2[c] = Chain8(wdec[c], xb);
    }
    acc[r] = AddBlock(acc[r], lanes, x_scales[r * num_kb] * sw);
    acc[r + 1] = AddBlock(acc[r + 1], lanes2, x_scales[(r + 1) * num_kb] * sw);
  }
  for (; r < mt; ++r) {
    __m512 xa[kVecs];
    LoadBlock(x + r * k, xa);
    for (int64_t c = 0; c < nc; ++c) lanes[c] = Chain8(wdec[c], xa);
    acc[r] = AddBlock(acc[r], lanes, x_scales[r * num_kb] * sw);
  }
}

// One row (decode GEMV) against one panel block: the weights go from memory
// to registers to FMAs, with the same per-column chain as TileBlock.
template <typename Decode>
[[gnu::always_inline]] inline __m512 GemvBlock(const Decode& decode, int64_t n0, int64_t kb,
                                               int64_t nc, const float* x, float scale,
                                               __m512 acc) {
  __m512 lanes[kP], xa[kVecs], wv[kVecs];
#pragma GCC unroll 16
  for (int c = 0; c < kP; ++c) lanes[c] = _mm512_setzero_ps();
  LoadBlock(x, xa);
  for (int64_t c = 0; c < nc; ++c) {
    decode(n0 + c, kb, wv);
    lanes[c] = Chain8(wv, xa);
  }
  return AddBlock(acc, lanes, scale);
}

// A few rows (M = 2..4: a speculative verify step's tail row and drafts)
// against one panel block: each column's weights are decoded once into
// registers and fed to every row, with the per-row chain of TileBlock and
// GemvBlock (so the same bits), without TileBlock's round trip of the whole
// decoded block through memory.  x: row 0's block (row stride k); x_scales:
// row 0's block scale (row stride num_kb).
template <int M, typename Decode>
[[gnu::always_inline]] inline void SmallBlock(const Decode& decode, int64_t n0, int64_t kb,
                                              int64_t nc, const float* x, int64_t k,
                                              const float* x_scales, int64_t num_kb, float sw,
                                              __m512* acc) {
  __m512 lanes[M][kP], xs[M][kVecs];
  for (int r = 0; r < M; ++r) {
    for (int64_t c = nc; c < kP; ++c) lanes[r][c] = _mm512_setzero_ps();
    LoadBlock(x + r * k, xs[r]);
  }
  for (int64_t c = 0; c < nc; ++c) {
    __m512 wv[kVecs];
    decode(n0 + c, kb, wv);
#pragma GCC unroll 4
    for (int r = 0; r < M; ++r) lanes[r][c] = Chain8(wv, xs[r]);
  }
#pragma GCC unroll 4
  for (int r = 0; r < M; ++r) acc[r] = AddBlock(acc[r], lanes[r], x_scales[r * num_kb] * sw);
}

// Block-scaled GEMM over the tile t.  decode(col, kb, w[8]) yields a block's
// weights; panel_scale(n0, kb) the per-panel weight scale (1 when the scale
// is folded into the decoded weights).  acc += parts · (sa · panel_scale).
template <typename Decode, typename PanelScale>
void BlockScaledPanels(const float* x, const float* x_scales, int64_t k, int64_t n, bf16* y,
                       const Tile& t, Decode decode, PanelScale panel_scale) {
  const int64_t num_kb = k / 128;
  alignas(64) __m512 wdec[kP][kVecs];  // the panel's current block, decoded
  alignas(64) __m512 acc[kMTile];      // per row, columns permuted as Reduce16
  for (int64_t m0 = t.row_begin; m0 < t.row_end; m0 += kMTile) {
    const int64_t mt = Min(kMTile, t.row_end - m0);
    for (int64_t p = t.panel_begin; p < t.panel_end; ++p) {
      const int64_t n0 = p * kP;
      const int64_t nc = Min(kP, n - n0);
      for (int64_t r = 0; r < mt; ++r) acc[r] = _mm512_setzero_ps();
      for (int64_t kb = 0; kb < num_kb; ++kb) {
        const float sw = panel_scale(n0, kb);
        const float* xb = x + m0 * k + kb * 128;
        const float* sb = x_scales + m0 * num_kb + kb;
        if (mt == 1) {
          acc[0] = GemvBlock(decode, n0, kb, nc, xb, sb[0] * sw, acc[0]);
        } else if (mt == 2) {
          SmallBlock<2>(decode, n0, kb, nc, xb, k, sb, num_kb, sw, acc);
        } else if (mt == 3) {
          SmallBlock<3>(decode, n0, kb, nc, xb, k, sb, num_kb, sw, acc);
        } else if (mt == 4) {
          SmallBlock<4>(decode, n0, kb, nc, xb, k, sb, num_kb, sw, acc);
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

// Lane vector (row, column) += the chunk's products, for rows [0, mt) of a
// tile (x: row 0's chunk, row stride ldx; num_vecs vectors, zero padded).
// Rows are paired so each weight load feeds two FMAs, with activations held
// in registers; the per-element chain is the same for paired and tail rows.
// kNumVecs > 0 fixes the vector count at compile time (full chunks).
template <int kNumVecs>
void DenseTileChunk(const __m512 (*wdec)[kVecs], int64_t nc, const float* x, int64_t ldx,
                    int64_t num_vecs, int64_t mt, __m512 (*lanes)[kP]) {
  const int64_t nv = kNumVecs > 0 ? kNumVecs : num_vecs;
  int64_t r = 0;
  for (; r + 2 <= mt; r += 2) {
    __m512 xa[kVecs], xb[kVecs];
    LoadBlock(x + r * ldx, xa);
    LoadBlock(x + (r + 1) * ldx, xb);
    for (int64_t c = 0; c < nc; ++c) {
      __m512 la = lanes[r][c], lb = lanes[r + 1][c];
#pragma GCC unroll 8
      for (int64_t v = 0; v < nv; ++v) {
        la = _mm512_fmadd_ps(wdec[c][v], xa[v], la);
        lb = _mm512_fmadd_ps(wdec[c][v], xb[v], lb);
      }
      lanes[r][c] = la;
      lanes[r + 1][c] = lb;
    }
  }
  for (; r < mt; ++r) {
    __m512 xa[kVecs];
    LoadBlock(x + r * ldx, xa);
    for (int64_t c = 0; c < nc; ++c) {
      __m512 la = lanes[r][c];
#pragma GCC unroll 8
      for (int64_t v = 0; v < nv; ++v) la = _mm512_fmadd_ps(wdec[c][v], xa[v], la);
      lanes[r][c] = la;
    }
  }
}

// Dense GEMM: lane vectors run over the whole K (chunks in order) and are
// reduced once at the end.
// decode(col, k0, count, out) yields up to 128 weights of column col from
// k0 on, zero padded to whole vectors (and prefetches ahead).
template <typename Decode>
void DensePanels(const DenseGemmArgs& a, const Decode& decode, const Tile& t) {
  alignas(64) __m512 wdec[kP][kVecs];
  alignas(64) __m512 lanes[kDenseMTile][kP];
  for (int64_t m0 = t.row_begin; m0 < t.row_end; m0 += kDenseMTile) {
    const int64_t mt = Min(kDenseMTile, t.row_end - m0);
    for (int64_t p = t.panel_begin; p < t.panel_end; ++p) {
      const int64_t n0 = p * kP;
      const int64_t nc = Min(kP, a.n - n0);
      for (int64_t r = 0; r < mt; ++r) {
#pragma GCC unroll 16
        for (int c = 0; c < kP; ++c) lanes[r][c] = _mm512_setzero_ps();
      }
      for (int64_t k0 = 0; k0 < a.k; k0 += kChunk) {
        const int64_t count = Min(kChunk, a.k - k0);
        for (int64_t c = 0; c < nc; ++c) decode(n0 + c, k0, count, wdec[c]);
        const float* xc = a.x + m0 * a.ldx + k0;
        if (count == kChunk) {
          DenseTileChunk<kVecs>(wdec, nc, xc, a.ldx, kVecs, mt, lanes);
        } else {
          DenseTileChunk<0>(wdec, nc, xc, a.ldx, (count + 15) / 16, mt, lanes);
        }
      }
      for (int64_t r = 0; r < mt; ++r) {
        const __m512 out = UnpermuteColumns(Reduce16(lanes[r]));
        if (a.y_bf16 != nullptr) {
          StoreBf16(a.y_bf16 + (m0 + r) * a.ldy + n0, out, nc);
        } else {
          _mm512_mask_storeu_ps(a.y_f32 + (m0 + r) * a.ldy + n0, TailMask(nc), out);
        }
      }
    }
  }
}

// Dense GEMV (one row): column by column instead of chunk by chunk, each
// column's weights decoded into registers and fed straight to the lane
// chain, which runs over the whole K in the same order as DenseTileChunk (so
// the same bits), and a panel's weights are read as one contiguous stream.
// Two columns at a time give the out-of-order core two independent FMA
// chains.  (For 2-4 rows the tiled path, which keeps 16 columns' chains in
// flight, measured faster.)
template <typename Decode>
void DenseGemv(const DenseGemmArgs& a, const Decode& decode, const Tile& t) {
  const float* x = a.x + t.row_begin * a.ldx;
  for (int64_t p = t.panel_begin; p < t.panel_end; ++p) {
    const int64_t n0 = p * kP;
    const int64_t nc = Min(kP, a.n - n0);
    alignas(64) __m512 lanes[kP];
    for (int64_t c = nc; c < kP; ++c) lanes[c] = _mm512_setzero_ps();
    int64_t c = 0;
    for (; c + 2 <= nc; c += 2) {
      __m512 la = _mm512_setzero_ps(), lb = _mm512_setzero_ps();
      for (int64_t k0 = 0; k0 < a.k; k0 += kChunk) {
        const int64_t count = Min(kChunk, a.k - k0);
        __m512 wa[kVecs], wb[kVecs];
        decode(n0 + c, k0, count, wa);
        decode(n0 + c + 1, k0, count, wb);
        const int64_t nv = (count + 15) / 16;
#pragma GCC unroll 8
        for (int64_t v = 0; v < nv; ++v) {
          const __m512 xv = _mm512_loadu_ps(x + k0 + 16 * v);
          la = _mm512_fmadd_ps(wa[v], xv, la);
          lb = _mm512_fmadd_ps(wb[v], xv, lb);
        }
      }
      lanes[c] = la;
      lanes[c + 1] = lb;
    }
    if (c < nc) {
      __m512 la = _mm512_setzero_ps();
      for (int64_t k0 = 0; k0 < a.k; k0 += kChunk) {
        const int64_t count = Min(kChunk, a.k - k0);
        __m512 wa[kVecs];
        decode(n0 + c, k0, count, wa);
        const int64_t nv = (count + 15) / 16;
#pragma GCC unroll 8
        for (int64_t v = 0; v < nv; ++v) {
          la = _mm512_fmadd_ps(wa[v], _mm512_loadu_ps(x + k0 + 16 * v), la);
        }
      }
      lanes[c] = la;
    }
    const __m512 out = UnpermuteColumns(Reduce16(lanes));
    if (a.y_bf16 != nullptr) {
      StoreBf16(a.y_bf16 + t.row_begin * a.ldy + n0, out, nc);
    } else {
      _mm512_mask_storeu_ps(a.y_f32 + t.row_begin * a.ldy + n0, TailMask(nc), out);
    }
  }
}

template <typename Decode>
void DenseDispatch(const DenseGemmArgs& a, const Decode& decode, const Tile& t) {
  if (t.row_end - t.row_begin == 1) return DenseGemv(a, decode, t);
  DensePanels(a, decode, t);
}

// Decoder of a BF16 or FP32 weight for DensePanels.
template <typename W>
auto DenseDecoder(const DenseGemmArgs& a, const W* w) {
  return [&a, w](int64_t col, int64_t k0, int64_t count, __m512* out) {
    const W* row = w + col * a.k + k0;
    if (col + kP < a.n) Prefetch(row + kP * a.k, count * static_cast<int64_t>(sizeof(W)));
    DecodeDenseChunk(row, count, out);
  };
}

// Rows [0, mr) (mr <= 4) of x against one column of w with vdpbf16ps: each
// step adds 32 BF16 products (two per lane) to one of two accumulators
// (alternating 32-element steps, summed at the end), so a row's chain is
// fixed whatever M.  The K tail is zero padded by masked loads.
template <int kRows>
[[gnu::always_inline]] inline void DotColumn(const Bf16DotArgs& a, const bf16* x, const bf16* wc,
                                             __m512* out) {
  __m512 even[kRows], odd[kRows];
  for (int r = 0; r < kRows; ++r) even[r] = odd[r] = _mm512_setzero_ps();
  int64_t k0 = 0;
  for (; k0 + 64 <= a.k; k0 += 64) {
    const __m512bh w0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(wc + k0));
    const __m512bh w1 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(wc + k0 + 32));
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const bf16* xr = x + r * a.k + k0;
      even[r] = _mm512_dpbf16_ps(even[r], w0,
                                 reinterpret_cast<__m512bh>(_mm512_loadu_si512(xr)));
      odd[r] = _mm512_dpbf16_ps(odd[r], w1,
                                reinterpret_cast<__m512bh>(_mm512_loadu_si512(xr + 32)));
    }
  }
  for (int half = 0; k0 < a.k; k0 += 32, ++half) {
    const __mmask32 mask =
        a.k - k0 >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << (a.k - k0)) - 1);
    const __m512bh w = reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(mask, wc + k0));
    for (int r = 0; r < kRows; ++r) {
      const __m512bh xv =
          reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(mask, x + r * a.k + k0));
      if (half == 0) {
        even[r] = _mm512_dpbf16_ps(even[r], w, xv);
      } else {
        odd[r] = _mm512_dpbf16_ps(odd[r], w, xv);
      }
    }
  }
  for (int r = 0; r < kRows; ++r) out[r] = _mm512_add_ps(even[r], odd[r]);
}

// Rows [r0, r0 + kRows) of one panel.
template <int kRows>
void DotPanelRows(const Bf16DotArgs& a, int64_t r0, int64_t n0, int64_t nc) {
  alignas(64) __m512 lanes[kRows][kP];
  for (int r = 0; r < kRows; ++r) {
    for (int64_t c = nc; c < kP; ++c) lanes[r][c] = _mm512_setzero_ps();
  }
  for (int64_t c = 0; c < nc; ++c) {
    // Column by column a panel is one contiguous stream, which the hardware
    // prefetchers follow without help.
    const bf16* wc = a.w + (n0 + c) * a.k;
    __m512 col[kRows];
    DotColumn<kRows>(a, a.x + r0 * a.k, wc, col);
    for (int r = 0; r < kRows; ++r) lanes[r][c] = col[r];
  }
  for (int r = 0; r < kRows; ++r) {
    _mm512_mask_storeu_ps(a.y + (r0 + r) * a.n + n0, TailMask(nc),
                          UnpermuteColumns(Reduce16(lanes[r])));
  }
}

}  // namespace

void Bf16DotPanelsAvx512(const Bf16DotArgs& a, const Tile& t) {
  for (int64_t p = t.panel_begin; p < t.panel_end; ++p) {
    const int64_t n0 = p * kP;
    const int64_t nc = Min(kP, a.n - n0);
    int64_t r = t.row_begin;
    for (; r + 4 <= t.row_end; r += 4) DotPanelRows<4>(a, r, n0, nc);
    switch (t.row_end - r) {
      case 3: DotPanelRows<3>(a, r, n0, nc); break;
      case 2: DotPanelRows<2>(a, r, n0, nc); break;
      case 1: DotPanelRows<1>(a, r, n0, nc); break;
      default: break;
    }
  }
}

void Fp8GemmPanelsAvx512(const Fp8GemmArgs& a, const Tile& t) {
  const Fp8Weight& w = a.w;
  const int64_t ld_scale = (w.in + 127) / 128;
  BlockScaledPanels(
      a.x, a.x_scales, w.in, w.out, a.y, t,
      [&](int64_t col, int64_t kb, __m512* out) {
        const uint8_t* p = w.codes + col * w.in + kb * 128;
        if (col + kP < w.out) Prefetch(p + kP * w.in, 128);
        DecodeFp8Block(p, out);
      },
      [&](int64_t n0, int64_t kb) { return E8M0Value(w.scales[(n0 / 128) * ld_scale + kb]); });
}

void Fp4GemmPanelsAvx512(const Fp4GemmArgs& a, const Tile& t) {
  const Fp4Weight& w = a.w;
  BlockScaledPanels(
      a.x, a.x_scales, w.in, w.out, a.y, t,
      [&](int64_t col, int64_t kb, __m512* out) {
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

void DenseGemmPanelsAvx512(const DenseGemmArgs& a, const Tile& t) {
  if (a.w_fp8 != nullptr) {
    // w = (code·2^-8)·(scale·2^8): both factors exact, so one rounding of
    // code·scale, which the caller guarantees is exact: the BF16 weight.
    const Fp8Weight& w = *a.w_fp8;
    const int64_t ld_scale = w.in / 128;
    DenseDispatch(
        a,
        [&](int64_t col, int64_t k0, int64_t, __m512* out) {
          const uint8_t* p = w.codes + col * w.in + k0;
          if (col + kP < w.out) Prefetch(p + kP * w.in, 128);
          DecodeFp8Block(p, out);
          const __m512 s =
              _mm512_set1_ps(E8M0Value(w.scales[(col / 128) * ld_scale + k0 / 128]) * 256.0f);
#pragma GCC unroll 16
          for (int v = 0; v < kVecs; ++v) out[v] = _mm512_mul_ps(out[v], s);
        },
        t);
  } else if (a.w_bf16 != nullptr) {
    DenseDispatch(a, DenseDecoder(a, a.w_bf16), t);
  } else {
    DenseDispatch(a, DenseDecoder(a, a.w_f32), t);
  }
}

}  // namespace dsv4::kernels::cpu
