// The FP8 block-scaled GEMM with BF16 pair dot products (AVX512-BF16 and
// AVX512-VBMI; gemm_driver.cc picks it through GemmKernels::fp8_bf16dot).  Included
// only by gemm_avx512_vbmi.cc.
//
// Every e4m3 value is exact in BF16 (3 mantissa bits of 7; the subnormal
// codes m·2^-9 are normal BF16 numbers), so a weight code becomes its BF16
// value through two 128-entry byte tables (vpermi2b: high and low byte of the
// BF16, the sign merged from the code), and gemm_activations.cc decodes the activation
// codes once per call into the same values, in their natural order.  The
// weights are in the panel layout (kernels/fp8_panels.cc): one 64-byte chunk
// decodes to two vectors, lane c of vector h holding column c's two codes of
// K pair 2q + h.  vdpbf16ps against the row's pair broadcast to every lane
// (an embedded {1to16} operand) adds, per lane, the product of the pair's
// odd elements and then that of its even elements to the accumulator (each
// addition rounded to nearest even; inputs and outputs below 2^-126 would be
// flushed, but every product is an exact multiple of 2^-18, so no input,
// product or sum is subnormal).  The chain per row, column and 128-block:
// the even pairs 0, 2, .., 62 in order into one accumulator from +0, the odd
// pairs 1, 3, .., 63 into another, then even + odd; the block sums are
// multiplied by the row's and the block's scales and added in K order.
// Where gemm_activations.cc folded the row's power-of-two scales into the activation
// values (Fp8GemmArgs::x_scaled), the sums carry the row's scale already
// and take the block's alone: the same bits (gemm_cpu.h kFp8FoldMinScale).
// Every path (1..4 rows, tiles) runs that chain, so results are batch
// invariant; they differ from the FMA kernel's in the order of the block's
// FP32 additions (docs/kernels.md "FP8 with BF16 dot products").  The same
// kernel runs the BF16-numerics FP8 weight (wo_a, GemmBf16Fp8) on its
// unquantized BF16 activations with activation scales 1: the products are
// exact there too, but a product below 2^-126 (a tiny activation times a
// small weight) is flushed to zero, a difference under 2^-126 each.
#pragma once

#include <bit>

#include "kernels/cpu/gemm_avx512_traits-inl.h"
#include "kernels/cpu/gemm_block_scaled-inl.h"

namespace dsv4::kernels::cpu {
namespace {

// BF16 bits of the e4m3 value of code c (c < 128: sign clear; 0x7f NaN).
constexpr uint16_t E4M3Bf16Bits(int c) {
  const int e = c >> 3, m = c & 7;
  if (c == 0x7f) return 0x7fc0;
  if (e > 0) return static_cast<uint16_t>(((e + 120) << 7) | (m << 4));
  if (m == 0) return 0;
  const int p = m >= 4 ? 2 : m >= 2 ? 1 : 0;  // m·2^-9 = (m/2^p)·2^(p-9)
  return static_cast<uint16_t>(((p - 9 + 127) << 7) | ((m - (1 << p)) << (7 - p)));
}

struct E4M3Bf16Bytes {
  alignas(64) uint8_t hi[128];
  alignas(64) uint8_t lo[128];
  constexpr E4M3Bf16Bytes() : hi(), lo() {
    for (int c = 0; c < 128; ++c) {
      hi[c] = static_cast<uint8_t>(E4M3Bf16Bits(c) >> 8);
      lo[c] = static_cast<uint8_t>(E4M3Bf16Bits(c) & 0xff);
    }
  }
};
constexpr E4M3Bf16Bytes kE4M3Bf16Bytes;

// The two tables in registers (loaded once per kernel call).
struct Fp8DotTables {
  __m512i hi0, hi1, lo0, lo1;
  [[gnu::always_inline]] Fp8DotTables()
      : hi0(_mm512_load_si512(kE4M3Bf16Bytes.hi)),
        hi1(_mm512_load_si512(kE4M3Bf16Bytes.hi + 64)),
        lo0(_mm512_load_si512(kE4M3Bf16Bytes.lo)),
        lo1(_mm512_load_si512(kE4M3Bf16Bytes.lo + 64)) {}
};

using Bh = __m512bh;
using V512 = GemmAvx512;
constexpr int64_t kDotP = V512::kLanes;       // columns per panel (kFp8PanelColumns)
constexpr int64_t kBlockBytes = kDotP * 128;  // a panel's 128-block
constexpr int64_t kChunks = kBlockBytes / 64;
static_assert(kDotP == kFp8PanelColumns);
// The few-row walk prefetches this far ahead of the chunk it decodes: the
// FP4 panel GEMV's tuned distance (docs/performance.md "FP4 panel layout").
constexpr int64_t kAheadBytes = 8192;
// Rows per register tile of the many-row path: two accumulators per row
// and panel, two panels.
constexpr int kTileRows = 6;
// The tiles that decode block kb + 1 prefetch the chunks of block
// kb + 1 + kFp8TileBlocksAhead, a chunk per step (docs/performance.md "FP8
// tiles: the next block decoded during this block's tiles"): 2 measured
// best against 1 and 4, and one block ahead (or all of the next block's
// chunks at once) left the streamed weights' latency exposed.
constexpr int64_t kFp8TileBlocksAhead = 2;

// One chunk (64 codes) -> its two BF16 vectors: vector 0 holds codes 16L + j,
// vector 1 codes 16L + 8 + j (L < 4, j < 8; byte unpacking works within
// 128-bit lanes), which the panel layout makes pair 2q and pair 2q + 1.
[[gnu::always_inline]] inline void DecodeChunk(const uint8_t* p, const Fp8DotTables& t, Bh* w) {
  __m512i v = _mm512_loadu_si512(p);
  // Opaque to the compiler, so it copies v between the permutes (which
  // overwrite their index register) instead of loading it three times.
  asm("" : "+v"(v));
  __m512i hi = _mm512_permutex2var_epi8(t.hi0, v, t.hi1);  // index bit 7 ignored
  hi = _mm512_ternarylogic_epi32(hi, v, _mm512_set1_epi8(static_cast<char>(0x80)),
                                 0xf8);  // hi | (v & 0x80)
  const __m512i lo = _mm512_permutex2var_epi8(t.lo0, v, t.lo1);
  w[0] = reinterpret_cast<Bh>(_mm512_unpacklo_epi8(lo, hi));
  w[1] = reinterpret_cast<Bh>(_mm512_unpackhi_epi8(lo, hi));
}

// The codes' order before DecodeChunk's table lookups when the result must
// come out in natural order: vpunpck{l,h}bw pair bytes within 128-bit
// lanes, so lane L of the low unpack must hold codes 8L..8L+7 and of the
// high one codes 32 + 8L..32 + 8L + 7.
struct NaturalOrder {
  alignas(64) uint8_t index[64];
  constexpr NaturalOrder() : index() {
    for (int l = 0; l < 4; ++l) {
      for (int i = 0; i < 8; ++i) {
        index[16 * l + i] = static_cast<uint8_t>(8 * l + i);
        index[16 * l + 8 + i] = static_cast<uint8_t>(32 + 8 * l + i);
      }
    }
  }
};
constexpr NaturalOrder kNaturalOrder;

// v times 2^k, for words holding BF16 values of e4m3 codes and k in
// [-22, 100] (gemm_cpu.h kFp8FoldMinScale): the exponent field raised by k
// in every word that is neither zero nor NaN, which is the product exactly
// (no such value is subnormal or leaves the range); zeros and NaNs stay.
[[gnu::always_inline]] inline Bh ScaleByPowerOfTwo(Bh v, __m512i k_shifted) {
  const __m512i u = reinterpret_cast<__m512i>(v);
  const __m512i mag = _mm512_and_si512(u, _mm512_set1_epi16(0x7fff));
  // mag - 1 < 0x7f7f: 0 < mag < 0x7f80 (a zero wraps to 0xffff).
  const __mmask32 finite_nonzero = _mm512_cmp_epu16_mask(
      _mm512_sub_epi16(mag, _mm512_set1_epi16(1)), _mm512_set1_epi16(0x7f7f), _MM_CMPINT_LT);
  return reinterpret_cast<Bh>(_mm512_mask_add_epi16(u, finite_nonzero, u, k_shifted));
}

// Row r of the activation codes into the BF16 dot kernel's block-major
// form (gemm_cpu.h Fp8DotActivationsScalar): 64 codes per step, permuted
// into kNaturalOrder and decoded like a weight chunk, then, with `scales`
// (the row's, powers of two in the fold range), times the block's scale.
inline void Fp8DotActivations(const uint8_t* codes, const float* scales, int64_t in, int64_t m,
                              int64_t r, bf16* xh) {
  const Fp8DotTables t;
  const __m512i order = _mm512_load_si512(kNaturalOrder.index);
  for (int64_t kb = 0; kb < in / 128; ++kb) {
    bf16* block = xh + (kb * m + r) * 128;
    // The scale's exponent minus the bias, in a BF16 word's exponent field.
    const __m512i k_shifted = scales == nullptr
                                  ? _mm512_setzero_si512()
                                  : _mm512_set1_epi16(static_cast<int16_t>(
                                        ((std::bit_cast<int32_t>(scales[kb]) >> 23) - 127) << 7));
    for (int64_t h = 0; h < 2; ++h) {
      const __m512i v =
          _mm512_permutexvar_epi8(order, _mm512_loadu_si512(codes + kb * 128 + 64 * h));
      alignas(64) Bh w[2];
      DecodeChunk(reinterpret_cast<const uint8_t*>(&v), t, w);
      if (scales != nullptr) {
        w[0] = ScaleByPowerOfTwo(w[0], k_shifted);
        w[1] = ScaleByPowerOfTwo(w[1], k_shifted);
      }
      _mm512_storeu_si512(block + 64 * h, reinterpret_cast<__m512i>(w[0]));
      _mm512_storeu_si512(block + 64 * h + 32, reinterpret_cast<__m512i>(w[1]));
    }
  }
}

// acc + (w · the BF16 pair at x in every lane), as one instruction: the pair
// as an embedded broadcast operand (GCC does not fold the broadcast itself).
[[gnu::always_inline]] inline __m512 DotPair(__m512 acc, Bh w, const bf16* x) {
  asm("vdpbf16ps %2%{1to16%}, %1, %0"
      : "+v"(acc)
      : "v"(w), "m"(*reinterpret_cast<const int32_t*>(x)));
  return acc;
}

// The BF16 pair at x in every lane, loaded by the broadcast itself
// (vpbroadcastd zmm, m32: a load-port op).  Left to itself GCC loads a
// row's two pairs as one 64-bit word and broadcasts each from a general
// register (a shift, and a transfer on the vector pipes the dot products
// need: 12 of them per 24 dot products in a 6 x 2 tile).
[[gnu::always_inline]] inline Bh BroadcastPair(const bf16* x) {
  __m512i v;
  asm("vpbroadcastd %1, %0" : "=v"(v) : "m"(*reinterpret_cast<const int32_t*>(x)));
  return reinterpret_cast<Bh>(v);
}

struct Fp8DotGemm {
  const Fp8GemmArgs& a;
  const Fp8DotTables t;
  const int64_t num_kb;
  const int64_t ld_scale;
  const int64_t ldx;   // row stride of the activations
  const int64_t ldkb;  // their block stride
  const int64_t ldrb;  // and their row-block stride

  explicit Fp8DotGemm(const Fp8GemmArgs& args)
      : a(args),
        num_kb(args.w.in / 128),
        ld_scale((args.w.in + 127) / 128),
        ldx(args.ldx > 0 ? args.ldx : args.w.in),
        ldkb(args.ldkb > 0 ? args.ldkb : 128),
        ldrb(args.ldrb > 0 ? args.ldrb : kRowBlock * ldx) {}

  // Chunk 0 of a panel's block kb, and the step from one of its chunks to
  // the next (blocks go in pairs whose chunks alternate: Fp8PanelChunkAt).
  const uint8_t* Block(int64_t panel, int64_t kb) const {
    return a.w.codes + Fp8PanelChunkAt(num_kb, panel, kb, 0);
  }
  int64_t ChunkStride(int64_t kb) const { return Fp8PanelChunkStride(num_kb, kb); }
  float PanelScale(int64_t panel, int64_t kb) const {
    return E8M0Value(a.w.scales[(panel * kDotP / 128) * ld_scale + kb]);
  }
  const bf16* X(int64_t row, int64_t kb) const {
    return a.xh + row / kRowBlock * ldrb + row % kRowBlock * ldx + kb * ldkb;
  }
  // The activation scale still to apply: 1 where xh carries it (x_scaled).
  float XScale(int64_t row, int64_t kb) const {
    return a.x_scaled ? 1.0f : a.x_scales[row * num_kb + kb];
  }

  // acc += (even + odd) · (row scale · block scale): a block's sum into a
  // row's result, in K order.
  [[gnu::always_inline]] static __m512 AddBlockSum(__m512 acc, __m512 even, __m512 odd,
                                                   float scale) {
    return AddBlockSum(acc, even, odd, V512::Set1(scale));
  }
  [[gnu::always_inline]] static __m512 AddBlockSum(__m512 acc, __m512 even, __m512 odd,
                                                   __m512 scale) {
    return V512::Add(acc, V512::Mul(V512::Add(even, odd), scale));
  }

  // Blocks kb0..kb0 + NB of S panels (1, or 2 side by side: RowsTwoStreams)
  // against rows m0..m0 + M, decoded as they stream in (a decode GEMV, a
  // verify step's few rows), and their sums added to acc[s] in K order.
  // NB = 2 reads a pair of the layout (kb0 even), its chunks alternating: one
  // stream per panel front to back, 4·M independent chains per panel to hide
  // the dot products' latency.  NB = 1: an odd last block.  A panel's chains
  // and sums do not depend on S (the same bits).
  template <int M, int NB, int S>
  [[gnu::always_inline]] void StreamBlocks(int64_t m0, const int64_t (&panel)[S], int64_t kb0,
                                           __m512* const (&acc)[S]) const {
    static_assert(NB == 1 || NB == 2);
    static_assert(S == 1 || S == 2);
    __m512 even[S][M][NB], odd[S][M][NB];
#pragma GCC unroll 16
    for (int i = 0; i < S * M * NB; ++i) {
      even[i / (M * NB)][i / NB % M][i % NB] = odd[i / (M * NB)][i / NB % M][i % NB] = V512::Zero();
    }
    const uint8_t* blocks[S];
    for (int s = 0; s < S; ++s) blocks[s] = Block(panel[s], kb0);
    const int64_t stride = ChunkStride(kb0);  // NB = 2: block 1's chunks 64 bytes on
    for (int64_t q = 0; q < kChunks; ++q) {
#pragma GCC unroll 2
      for (int j = 0; j < NB; ++j) {
#pragma GCC unroll 2
        for (int s = 0; s < S; ++s) {
          const uint8_t* chunk = blocks[s] + q * stride + j * 64;
          Prefetch(chunk + kAheadBytes, 64);
          Bh w[2];
          DecodeChunk(chunk, t, w);
#pragma GCC unroll 4
          for (int r = 0; r < M; ++r) {
            const bf16* x = X(m0 + r, kb0 + j) + 4 * q;
            even[s][r][j] = DotPair(even[s][r][j], w[0], x);
            odd[s][r][j] = DotPair(odd[s][r][j], w[1], x + 2);
          }
        }
      }
    }
#pragma GCC unroll 2
    for (int j = 0; j < NB; ++j) {
#pragma GCC unroll 2
      for (int s = 0; s < S; ++s) {
        const float sw = PanelScale(panel[s], kb0 + j);
#pragma GCC unroll 4
        for (int r = 0; r < M; ++r) {
          acc[s][r] =
              AddBlockSum(acc[s][r], even[s][r][j], odd[s][r][j], XScale(m0 + r, kb0 + j) * sw);
        }
      }
    }
  }

  // Rows m0..m0 + M against S panels: a pair of blocks at a time, an odd
  // last block alone.  (Before the pairs alternated their chunks, one row
  // read 4 blocks side by side, 4 streams 2 KiB apart: a scratch probe of
  // that walk streamed 0.77-0.90 of a bare read's bytes per second, the
  // pairs 0.92-1.04; docs/performance.md "FP8 block pairs".)
  template <int M, int S>
  void StreamPanels(int64_t m0, const int64_t (&panel)[S], __m512* const (&acc)[S]) const {
    for (int s = 0; s < S; ++s) {
      for (int r = 0; r < M; ++r) acc[s][r] = V512::Zero();
    }
    int64_t kb = 0;
    for (; kb + 2 <= num_kb; kb += 2) StreamBlocks<M, 2, S>(m0, panel, kb, acc);
    if (kb < num_kb) StreamBlocks<M, 1, S>(m0, panel, kb, acc);
  }

  // Rows m0..m0 + M (1..4) against one panel.
  template <int M>
  void FewRows(int64_t m0, int64_t panel, __m512* acc) const {
    StreamPanels<M, 1>(m0, {panel}, {acc});
  }

  // Rows m0..m0 + M (1..2) against panels pa and pb side by side: two
  // streams per thread (RowsTwoStreams).
  template <int M>
  void TwoPanels(int64_t m0, int64_t pa, int64_t pb, __m512* acc_a, __m512* acc_b) const {
    StreamPanels<M, 2>(m0, {pa, pb}, {acc_a, acc_b});
  }

  // A panel's block kb decoded into out (L1): 32 chunks, 4 KiB of BF16.
  [[gnu::always_inline]] void DecodeBlock(int64_t panel, int64_t kb, Bh (*out)[2]) const {
    const uint8_t* block = Block(panel, kb);
    const int64_t stride = ChunkStride(kb);
    for (int64_t q = 0; q < kChunks; ++q) DecodeChunk(block + q * stride, t, out[q]);
  }

  // A panel block to decode while a tile runs: one chunk per step of the
  // tile, into a buffer the tile does not read; and the same panel's block
  // kFp8TileBlocksAhead further on, whose chunks are prefetched in the same
  // steps (past the last block, the next panels' first blocks, or nullptr).
  struct Pending {
    const uint8_t* block = nullptr;
    int64_t stride = 0;
    Bh (*out)[2] = nullptr;
    const uint8_t* ahead = nullptr;
    int64_t ahead_stride = 0;
  };

  // Rows row..row + R of a tile against the blocks of NP panels (1 or 2)
  // decoded into wdec[p] (L1): each activation pair is broadcast once into
  // a register and fed to every panel's chains.  acc[p]: row's accumulator
  // for panel p.  With DECODE the tile also decodes `next` (the following
  // block of one panel), a chunk per step: the decode's permutes and unpacks
  // run beside the dot products instead of between blocks (a scratch probe:
  // a 6 x 2 tile's 768 dot products took 124 ns alone, 127 ns with 32 chunks
  // decoded among them, against 28 ns for those chunks on their own).
  // SCALED: xh carries the activation scales (x_scaled), so a block's sums
  // take the panel's scale alone, broadcast once per tile rather than a
  // scalar load, product and broadcast per row (per tile and block: 12
  // vmulss and vbroadcastss fewer, and GCC reloaded x_scales' address and
  // stride for each row, as the accumulator stores might alias them).
  // LAST: kb is the last block, and the rows' results go to `out`.
  template <int R, int NP, bool DECODE, bool SCALED, bool LAST = false>
  [[gnu::always_inline]] void TileRows(const Bh (*const* wdec)[2], int64_t row, int64_t kb,
                                       const float* sw, __m512* const* acc, const Pending& next,
                                       const Bf16TileOut& out) const {
    __m512 even[NP][R], odd[NP][R];
#pragma GCC unroll 16
    for (int i = 0; i < NP * R; ++i) even[i / R][i % R] = odd[i / R][i % R] = V512::Zero();
    // Block-major activations (ldx == kDotTileLdx: Fp8GemmArgs::xh): a row's
    // pairs lie at constant offsets from one pointer, so the loop advances
    // one pointer instead of one per row (GCC kept two running row pointers,
    // 12 adds per 24 dot products).
    const bf16* xq = X(row, kb);
    for (int64_t q = 0; q < kChunks; ++q, xq += 4) {
      Bh w0[NP], w1[NP];
#pragma GCC unroll 2
      for (int p = 0; p < NP; ++p) w0[p] = wdec[p][q][0], w1[p] = wdec[p][q][1];
      if constexpr (DECODE) {
        if (next.ahead != nullptr) Prefetch(next.ahead + q * next.ahead_stride, 64);
        DecodeChunk(next.block + q * next.stride, t, next.out[q]);
      }
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const Bh xe = BroadcastPair(xq + r * kDotTileLdx);
        const Bh xo = BroadcastPair(xq + r * kDotTileLdx + 2);
#pragma GCC unroll 2
        for (int p = 0; p < NP; ++p) {
          even[p][r] = _mm512_dpbf16_ps(even[p][r], w0[p], xe);
          odd[p][r] = _mm512_dpbf16_ps(odd[p][r], w1[p], xo);
        }
      }
    }
    __m512 sum[NP][R];
#pragma GCC unroll 2
    for (int p = 0; p < NP; ++p) {
      const __m512 scale = V512::Set1(sw[p]);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        sum[p][r] = AddBlockSum(acc[p][r], even[p][r], odd[p][r],
                                SCALED ? scale : V512::Set1(XScale(row + r, kb) * sw[p]));
      }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      if constexpr (!LAST) {
#pragma GCC unroll 2
        for (int p = 0; p < NP; ++p) acc[p][r] = sum[p][r];
      } else if constexpr (NP == 2) {
        out.Store(r, sum[0][r], sum[1][r]);
      } else {
        out.Store(r, sum[0][r]);
      }
    }
  }

  // Rows [m0, m0 + mt) (mt > 4) against NP panels from `panel` on: register
  // tiles of up to kTileRows rows against each block decoded into L1.  The
  // blocks are double-buffered: while block kb's tiles run, the first NP of
  // them each decode one panel of block kb + 1 (what no tile took is decoded
  // after them).  The decoding tiles prefetch kFp8TileBlocksAhead blocks
  // ahead; past the last block, the first blocks of the panels from `next`
  // on (the tile's next panels, -1 for none), so the next call's first
  // blocks do not arrive cold (with K = 1024 they are 3 of its 8).
  // acc[p]: the rows' accumulators for panel p; each register tile stores
  // its rows' results in y after its last block (Bf16TileOut).
  template <int NP, bool SCALED>
  void ManyRows(int64_t m0, int64_t mt, int64_t panel, int64_t next, __m512* const* acc) const {
    alignas(64) Bh wdec[2][NP][kChunks][2];
    for (int p = 0; p < NP; ++p) {
      for (int64_t r = 0; r < mt; ++r) acc[p][r] = V512::Zero();
      DecodeBlock(panel + p, 0, wdec[0][p]);
    }
    for (int64_t kb = 0; kb < num_kb; ++kb) {
      Bh(*const dec)[kChunks][2] = wdec[(kb + 1) & 1];
      const Bh(*w[NP])[2];
      float sw[NP];
      for (int p = 0; p < NP; ++p) {
        w[p] = wdec[kb & 1][p];
        sw[p] = PanelScale(panel + p, kb);
      }
      // Panels of block kb + 1 to decode, and how many a tile has taken.
      const int to_decode = kb + 1 < num_kb ? NP : 0;
      const bool last = kb + 1 == num_kb;
      int taken = 0;
      int64_t r = 0;
      // Inlined by force: GCC made the lambda a call per tile, and the
      // 128-row GEMM slower than with the decode between blocks.
      const auto tile = [&]<int R>() __attribute__((always_inline)) {
        __m512* at[NP];
        for (int p = 0; p < NP; ++p) at[p] = acc[p] + r;
        if (taken < to_decode) {
          const int p = taken++;
          const int64_t ka = kb + 1 + kFp8TileBlocksAhead;
          const uint8_t* ahead = ka < num_kb ? Block(panel + p, ka)
                                 : next >= 0 ? Block(next + p, ka - num_kb)
                                             : nullptr;
          const int64_t ahead_stride = ChunkStride(ka < num_kb ? ka : ka - num_kb);
          const Pending pending{Block(panel + p, kb + 1), ChunkStride(kb + 1), dec[p], ahead,
                                ahead_stride};
          TileRows<R, NP, true, SCALED>(w, m0 + r, kb, sw, at, pending, Bf16TileOut{});
        } else if (last) {
          const int64_t ldy = YStride(a), n0 = panel * kDotP;
          const Bf16TileOut out{a.y + (m0 + r) * ldy + n0, ldy, Min(NP * kDotP, a.w.out - n0)};
          TileRows<R, NP, false, SCALED, true>(w, m0 + r, kb, sw, at, Pending{}, out);
        } else {
          TileRows<R, NP, false, SCALED>(w, m0 + r, kb, sw, at, Pending{}, Bf16TileOut{});
        }
        r += R;
      };
      while (r + kTileRows <= mt) tile.template operator()<kTileRows>();
      const int64_t left = mt - r;  // < kTileRows: 4, 2 and 1 cover it
      static_assert(kTileRows <= 8);
      if (left & 4) tile.template operator()<4>();
      if (left & 2) tile.template operator()<2>();
      if (left & 1) tile.template operator()<1>();
      for (int p = taken; p < to_decode; ++p) DecodeBlock(panel + p, kb + 1, dec[p]);
    }
  }

  // Panel p's results for rows [m0, m0 + mt) (its first nc columns): the
  // few-row walks' (the register tiles store their own).
  void Store(int64_t m0, int64_t mt, int64_t p, const __m512* acc) const {
    const int64_t n0 = p * kDotP, nc = Min(kDotP, a.w.out - n0);
    for (int64_t r = 0; r < mt; ++r) {
      V512::StoreBf16(a.y + (m0 + r) * YStride(a) + n0, acc[r], nc);
    }
  }

  void Run(const Tile& tile) const {
    alignas(64) __m512 acc[2][kMTile];
    __m512* const both[2] = {acc[0], acc[1]};
    for (int64_t m0 = tile.row_begin; m0 < tile.row_end; m0 += kMTile) {
      const int64_t mt = Min(kMTile, tile.row_end - m0);
      if (mt <= 2) {  // a decode step, or a K = 1 verify step
        if (mt == 1) RowsTwoStreams<1>(*this, m0, tile.panel_begin, tile.panel_end, acc[0], acc[1]);
        if (mt == 2) RowsTwoStreams<2>(*this, m0, tile.panel_begin, tile.panel_end, acc[0], acc[1]);
        continue;
      }
      for (int64_t p = tile.panel_begin; p < tile.panel_end;) {
        if (mt > 4 && p + 1 < tile.panel_end) {  // two panels per register tile
          const int64_t next = p + 3 < tile.panel_end ? p + 2 : -1;
          if (a.x_scaled) {
            ManyRows<2, true>(m0, mt, p, next, both);
          } else {
            ManyRows<2, false>(m0, mt, p, next, both);
          }
          p += 2;
          continue;
        }
        if (mt == 3) FewRows<3>(m0, p, acc[0]);  // 1 and 2 rows took RowsTwoStreams
        if (mt == 4) FewRows<4>(m0, p, acc[0]);
        if (mt <= 4) Store(m0, mt, p, acc[0]);
        if (mt > 4 && a.x_scaled) ManyRows<1, true>(m0, mt, p, -1, both);
        if (mt > 4 && !a.x_scaled) ManyRows<1, false>(m0, mt, p, -1, both);
        ++p;
      }
    }
  }
};

}  // namespace
}  // namespace dsv4::kernels::cpu
