// The FP4 (MXFP4) GEMM with BF16 pair dot products (AVX512-BF16 and
// AVX512-VBMI; gemm_driver.cc picks it through GemmKernels::fp4_bf16dot for a weight
// whose scales all lie in [kFp4Bf16MinScale, kFp4Bf16MaxScale]).  Included only
// by gemm_avx512_vbmi.cc.
//
// Why: the exact kernels (gemm_fp4-inl.h, gemm_fp4_outer-inl.h) take an
// activation of up to 18 bits as two or three byte planes, so their vpdpbusd
// byte products do at most half of the useful multiply-adds the instruction
// could, and each 32-block's integer sum needs an FP32 epilogue.  Here every
// operand is a BF16 value that already carries its scale, and the whole K
// reduction is one FP32 chain of vdpbf16ps: the same multiply-adds per
// instruction as two byte planes, and no epilogue.
//
// Values.  A weight is e2m1 · 2^(e − 127) (E8M0 byte e of its 32-block): with
// e in [kFp4Bf16MinScale, kFp4Bf16MaxScale] a normal BF16 number.  The decode
// looks the code up in a table of e2m1 · 2^125 (vpermw on the code as a word
// index) and lowers the exponent field by 252 − e with an unsigned saturating
// subtract, which leaves a zero code zero.  An activation is bf16(e4m3 · s)
// with s its 128-block's scale (gemm_activations.cc, Fp4DotActivations): exact when s is
// a power of two, as act_quant makes it.  Each product of two such values is
// exact in FP32, and with e >= kFp4Bf16MinScale and s >= 2^-22 (act_quant's
// floor) every product is a multiple of 2^-126, so none is flushed.
//
// Order.  The weights are in the FP4 panel layout (kernels/fp4_panels.cc): a
// 64-byte chunk holds 8 K of the 16 columns, column c's 4 bytes in dword c,
// byte P holding K 8d + 2P (low nibble) and 8d + 2P + 1 (d the chunk in its
// 128-block), so word 0 of dword c holds K 8d..8d + 3 and word 1 K
// 8d + 4..8d + 7, a nibble each.  Shifting the words right by 4P puts K
// 8d + P and 8d + 4 + P in the low bits vpermw reads: vector P pairs those
// two (one shift and no byte picking per vector; 2026-12-05, before that
// vpmultishiftqb paired 8d + 2P with 8d + 2P + 1, 3-10 % slower).  The
// activations are stored in the same order (Fp4DotActivationsScalar: within
// each 8, K 0, 4, 1, 5, 2, 6, 3, 7), so the row's pair P of a chunk is one
// dword.  Pair P of every chunk goes to chain P (P = 0..3) of each row and
// column: per chunk in K order, vdpbf16ps against the row's pair broadcast
// to every lane (its odd product, then its even one, added to the chain as
// the instruction defines).  The result is (chain 0 + chain 1) + (chain 2 + chain 3), rounded
// to BF16 once.  Every path (up to 23 rows streamed 1-4 at a time, register
// tiles from 24 rows) runs these chains, so results are batch invariant; they differ from the
// exact kernels' in the order of the FP32 additions (docs/kernels.md "FP4
// with BF16 dot products").
#pragma once

#include "kernels/cpu/gemm_avx512_traits-inl.h"
#include "kernels/cpu/gemm_fp8dot-inl.h"

namespace dsv4::kernels::cpu {
namespace {

// BF16 bits of e2m1 code c's value times 2^125 (0 for either zero): exponent
// fields 251..254, finite.  Lowering them by 252 − e (e <= 252) leaves
// e2m1 · 2^(e − 127), a normal number for e >= 2.
constexpr uint16_t E2M1Bf16Biased(int c) {
  const int m = c & 7;  // 0, 0.5, 1, 1.5, 2, 3, 4, 6
  if (m == 0) return 0;
  const int field = m == 1 ? 126 : 126 + m / 2;
  const int mantissa = m >= 3 && (m & 1) != 0 ? 0x40 : 0;
  return static_cast<uint16_t>(((c & 8) << 12) | ((field + 125) << 7) | mantissa);
}

struct Fp4DotBytes {
  // vpermw's table: word i for code i & 15 (vpermw reads 5 index bits; the
  // bit above a code belongs to the next one, so the table repeats).
  alignas(64) uint16_t table[32];
  // vpshufb controls: byte j of each dword (32-block j's scale of the
  // column) into both of its words, zero extended.
  alignas(64) uint8_t scale_pick[4][64];
  constexpr Fp4DotBytes() : table(), scale_pick() {
    for (int i = 0; i < 32; ++i) table[i] = E2M1Bf16Biased(i & 15);
    for (int p = 0; p < 4; ++p) {
      for (int b = 0; b < 64; ++b) {
        const int dword = (b % 16) / 4;
        scale_pick[p][b] = b % 2 == 0 ? static_cast<uint8_t>(4 * dword + p) : uint8_t{0x80};
      }
    }
  }
};
constexpr Fp4DotBytes kFp4DotBytes;

// The constants in registers (loaded once per kernel call).
struct Fp4DotConsts {
  __m512i table;
  __m512i scale_pick[4];
  [[gnu::always_inline]] Fp4DotConsts() : table(_mm512_load_si512(kFp4DotBytes.table)) {
    for (int p = 0; p < 4; ++p) scale_pick[p] = _mm512_load_si512(kFp4DotBytes.scale_pick[p]);
  }
};

constexpr int64_t kFp4DotChunks = 16;           // per 128-block of a panel
constexpr int64_t kFp4DotBlockBytes = 64 * 16;  // a panel's 128-block of codes
constexpr int64_t kFp4DotScaleBytes = 4 * 16;   // and of scales
constexpr int64_t kFp4DotAheadBytes = 8192;     // GEMV prefetch distance (codes)
// Register tiles: one chain at a time, 24 sums: 12 rows x 2 panels (12 x 1
// for a task's odd last panel).  The four chains of every row and panel
// live in memory between blocks: 64 rows x 4 panels of them (64 KiB, the
// earlier 6 x 4 tiles) did not stay in the 48 KiB L1 beside the decoded
// block and the activations, and each tile's chain pass waited on the L2
// for its 24 sums; with 2 panels they take 32 KiB, and the FP4 prefill
// GEMM ran 3-14 % faster in 11 of 12 paired runs, 2 % slower in one
// (docs/performance.md "FP4 tiles: two panels").
constexpr int64_t kFp4DotTilePanels = 2;
constexpr int kFp4DotTileRows = 12;
// Rows below a whole tile go to tiles of this many and then 4, 2, 1, a
// 12-row tile giving way to two 8-row ones rather than leave a 4-row tail
// (8 chains in flight, too few to hide the dot products' latency).
constexpr int kFp4DotTailRows = 8;
// The many-row tiles prefetch this many blocks ahead into the L2
// (docs/performance.md "FP8 and FP4 tiles: the next panels' first blocks").
constexpr int64_t kFp4DotBlocksAhead = 2;
// Blocks decoded into L1 side by side (4 KiB per block and panel), which
// each register tile's chain pass then runs over: a pass loads and stores
// its 24 sums once per round rather than once per block.  Against one block
// per round, 2 measured 1.14-1.17x and 4 1.11-1.15x on the 128-row expert
// GEMM, 4 against 2 0.98x on one thread and 1.09x on two (docs/performance.md
// "FP4 tiles: four blocks per chain pass").
constexpr int64_t kFp4DotRoundBlocks = 4;
// Fewer rows stream the panel 4 rows at a time (the decode per 4 rows costs
// less than a pass through L1).
constexpr int64_t kFp4DotTileMinRows = 24;
// The streamed walk keeps a block's four 32-blocks rolled up to this many
// rows (StreamPanels): 1-2 rows 5-16 % faster from cache, 3 rows the same,
// 4 rows 2-13 % slower than unrolled.
constexpr int kFp4DotRolledRows = 3;

// What the decode subtracts from the biased table value for 32-block j of a
// group block whose scale bytes are sv: (252 − e) << 7 in both words of each
// column's lane.
[[gnu::always_inline]] inline __m512i Fp4DotScaleSub(__m512i sv, const Fp4DotConsts& c, int j) {
  const __m512i e = _mm512_shuffle_epi8(sv, c.scale_pick[j]);
  return _mm512_slli_epi16(_mm512_sub_epi16(_mm512_set1_epi16(252), e), 7);
}

// One chunk (64 bytes: 8 K of 16 columns) -> 4 vectors of BF16 pairs, w[P]
// lane c = column c's weights at K 8d + P and 8d + 4 + P, scaled.
[[gnu::always_inline]] inline void Fp4DotDecodeChunk(const uint8_t* p, __m512i sub,
                                                     const Fp4DotConsts& c, Bh* w) {
  const __m512i v = _mm512_loadu_si512(p);
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {
    const __m512i idx = q == 0 ? v : _mm512_srli_epi16(v, 4 * q);
    w[q] = reinterpret_cast<Bh>(_mm512_subs_epu16(_mm512_permutexvar_epi16(idx, c.table), sub));
  }
}

// vpermw index: within each 8 words, words 0, 4, 1, 5, 2, 6, 3, 7 (the
// weights' pairing, Fp4DotActivationsScalar).
struct Fp4DotXOrder {
  alignas(64) uint16_t index[32];
  constexpr Fp4DotXOrder() : index() {
    for (int i = 0; i < 32; ++i)
      index[i] = static_cast<uint16_t>(8 * (i / 8) + i % 8 / 2 + 4 * (i % 2));
  }
};
constexpr Fp4DotXOrder kFp4DotXOrder;

// Row r of [m, in] activation codes as this kernel reads them: each code's
// value times its block's scale, rounded to BF16 (exact for a power-of-two
// scale), block-major like the FP8 dot kernel's (block kb of row r at
// xh + (kb·m + r)·128), each 8 in the weights' pair order.  Bit for bit
// Fp4DotActivationsScalar (gemm_activations.cc).
inline void Fp4DotActivations(const uint8_t* codes, const float* scales, int64_t in, int64_t m,
                              int64_t r, bf16* xh) {
  Fp8DotActivations(codes, nullptr, in, m, r, xh);
  const __m512i order = _mm512_load_si512(kFp4DotXOrder.index);
  for (int64_t kb = 0; kb < in / 128; ++kb) {
    bf16* block = xh + (kb * m + r) * 128;
    const __m512 s = _mm512_set1_ps(scales[kb]);
#pragma GCC unroll 8
    for (int64_t i = 0; i < 8; ++i) {
      StoreBf16x16(block + 16 * i, _mm512_mul_ps(GemmAvx512::LoadBf16(block + 16 * i), s), 16);
    }
#pragma GCC unroll 4
    for (int64_t i = 0; i < 4; ++i) {
      const __m512i v = _mm512_loadu_si512(block + 32 * i);
      _mm512_storeu_si512(block + 32 * i, _mm512_permutexvar_epi16(order, v));
    }
  }
}

struct Fp4DotGemm {
  const Fp4GemmArgs& a;
  const Fp4DotConsts c;
  const int64_t num_kb;
  const int64_t ldx;   // row stride of the activations
  const int64_t ldkb;  // their block stride
  const int64_t ldrb;  // and their row-block stride

  explicit Fp4DotGemm(const Fp4GemmArgs& args)
      : a(args),
        num_kb(args.w.in / 128),
        ldx(args.ldx > 0 ? args.ldx : args.w.in),
        ldkb(args.ldkb > 0 ? args.ldkb : 128),
        ldrb(args.ldrb > 0 ? args.ldrb : kRowBlock * ldx) {}

  const uint8_t* Block(int64_t panel, int64_t kb) const {
    return a.w.packed + (panel * num_kb + kb) * kFp4DotBlockBytes;
  }
  const uint8_t* Scales(int64_t panel, int64_t kb) const {
    return a.w.scales + (panel * num_kb + kb) * kFp4DotScaleBytes;
  }
  const bf16* X(int64_t row, int64_t kb) const {
    return a.xh + row / kRowBlock * ldrb + row % kRowBlock * ldx + kb * ldkb;
  }

  // A row's result from its four chains, in the one order every path uses.
  [[gnu::always_inline]] static __m512 ChainSum(__m512 c0, __m512 c1, __m512 c2, __m512 c3) {
    return V512::Add(V512::Add(c0, c1), V512::Add(c2, c3));
  }

  // 32-block j (chunks 4j..4j + 3) of the 128-block of S panels whose codes
  // start at block[s] (scale bytes sv[s]) against the rows whose activations
  // start at x[r]: sum[s][r][P] += chain P's products (StreamPanels).
  template <int M, int S>
  [[gnu::always_inline]] void StreamSubBlock(int j, const uint8_t* const (&block)[S],
                                             const __m512i (&sv)[S], const bf16* const (&x)[M],
                                             __m512 (&sum)[S][M][4]) const {
    __m512i sub[S];
#pragma GCC unroll 2
    for (int s = 0; s < S; ++s) sub[s] = Fp4DotScaleSub(sv[s], c, j);
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      const int64_t d = 4 * j + i;
#pragma GCC unroll 2
      for (int s = 0; s < S; ++s) {
        const uint8_t* chunk = block[s] + 64 * d;
        Prefetch(chunk + kFp4DotAheadBytes, 64);
        Bh w[4];
        Fp4DotDecodeChunk(chunk, sub[s], c, w);
#pragma GCC unroll 4
        for (int r = 0; r < M; ++r) {
#pragma GCC unroll 4
          for (int q = 0; q < 4; ++q) {
            sum[s][r][q] = DotPair(sum[s][r][q], w[q], x[r] + 8 * d + 2 * q);
          }
        }
      }
    }
  }

  // Rows m0..m0 + M against S panels (1, or 2 side by side:
  // RowsTwoStreams), decoded as the codes stream in (a decode GEMV, a verify
  // step's few rows): one stream per panel front to back, 4·M chains per
  // panel.  acc[s][r][P]: chain P of row r for panel s; a panel's chains do
  // not depend on S (the same bits).  Up to kFp4DotRolledRows rows the four
  // 32-blocks of a block run as a loop: unrolled, GCC's schedule of 4 x 4
  // chunks needed more registers than there are and shuffled the chains
  // between them (39 register copies per block at 2 rows; docs/performance.md
  // "FP4 GEMV: the 32-blocks as a loop").
  template <int M, int S>
  void StreamPanels(int64_t m0, const int64_t (&panel)[S], __m512 (*const (&acc)[S])[4]) const {
    static_assert(S == 1 || S == 2);
    __m512 sum[S][M][4];
#pragma GCC unroll 16
    for (int i = 0; i < 4 * S * M; ++i) sum[i / (4 * M)][i / 4 % M][i % 4] = V512::Zero();
    for (int64_t kb = 0; kb < num_kb; ++kb) {
      const uint8_t* block[S];
      __m512i sv[S];
#pragma GCC unroll 2
      for (int s = 0; s < S; ++s) {
        block[s] = Block(panel[s], kb);
        Prefetch(Scales(panel[s], kb) + kFp4DotAheadBytes / 16, 64);
        sv[s] = _mm512_loadu_si512(Scales(panel[s], kb));
      }
      const bf16* x[M];
#pragma GCC unroll 4
      for (int r = 0; r < M; ++r) x[r] = X(m0 + r, kb);
      if constexpr (M <= kFp4DotRolledRows) {
#pragma GCC unroll 1
        for (int j = 0; j < 4; ++j) StreamSubBlock<M, S>(j, block, sv, x, sum);
      } else {
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) StreamSubBlock<M, S>(j, block, sv, x, sum);
      }
    }
#pragma GCC unroll 16
    for (int i = 0; i < 4 * S * M; ++i) {
      acc[i / (4 * M)][i / 4 % M][i % 4] = sum[i / (4 * M)][i / 4 % M][i % 4];
    }
  }

  // Rows m0..m0 + M (1..4) against one panel.
  template <int M>
  void FewRows(int64_t m0, int64_t panel, __m512 (*acc)[4]) const {
    StreamPanels<M, 1>(m0, {panel}, {acc});
  }

  // Rows m0..m0 + M (1..2) against panels pa and pb side by side: two
  // streams per thread (RowsTwoStreams).
  template <int M>
  void TwoPanels(int64_t m0, int64_t pa, int64_t pb, __m512 (*acc_a)[4], __m512 (*acc_b)[4]) const {
    StreamPanels<M, 2>(m0, {pa, pb}, {acc_a, acc_b});
  }

  // A panel's block kb decoded into out (L1): 16 chunks x 4 vectors, 4 KiB.
  // Not inlined: the decode's 9 constant registers would otherwise stay live
  // through the register tiles, which need 24 accumulators.
  [[gnu::noinline]] void DecodeBlock(int64_t panel, int64_t kb, Bh (*out)[4]) const {
    const uint8_t* block = Block(panel, kb);
    const __m512i sv = _mm512_loadu_si512(Scales(panel, kb));
    for (int j = 0; j < 4; ++j) {
      const __m512i sub = Fp4DotScaleSub(sv, c, j);
      for (int64_t d = 4 * j; d < 4 * j + 4; ++d) Fp4DotDecodeChunk(block + 64 * d, sub, c, out[d]);
    }
  }

  // Rows row..row + R (acc's rows r..r + R) against blocks kb..kb + nb of
  // NP panels decoded into wdec[p][0..nb): chain by chain (q outer), so a
  // tile holds R x NP sums and each step loads NP weight vectors and R
  // activation pairs for R·NP dot products.  acc[p][r][q]: the chains,
  // carried in memory from round to round.  The rows' activations are
  // kDotTileLdx apart (one pointer with constant offsets; a runtime stride
  // had GCC keep a pointer per row, spilled, reloaded before every
  // broadcast).  LAST: the round ends with the last block, and the rows'
  // results go to `out` (Bf16TileOut).
  template <int R, int NP, bool LAST = false>
  [[gnu::always_inline]] void TileRows(const Bh (*const* wdec)[kFp4DotChunks][4], int64_t row,
                                       int64_t r, int64_t kb, int64_t nb, __m512 (*const* acc)[4],
                                       const Bf16TileOut& out) const {
#pragma GCC unroll 1
    for (int q = 0; q < 4; ++q) {
      __m512 sum[NP][R];
#pragma GCC unroll 4
      for (int p = 0; p < NP; ++p) {
#pragma GCC unroll 12
        for (int i = 0; i < R; ++i) sum[p][i] = acc[p][r + i][q];
      }
#pragma GCC unroll 1
      for (int64_t j = 0; j < nb; ++j) {
        const bf16* x0 = X(row, kb + j);
        for (int64_t d = 0; d < kFp4DotChunks; ++d) {
          Bh w[NP];
#pragma GCC unroll 4
          for (int p = 0; p < NP; ++p) {
            w[p] = wdec[p][j][d][q];
            // Opaque: held in a register for all R rows (GCC otherwise
            // reloads it from L1 for every row, a load per dot product).
            asm("" : "+v"(w[p]));
          }
#pragma GCC unroll 12
          for (int i = 0; i < R; ++i) {
            const Bh xb = BroadcastPair(x0 + i * kDotTileLdx + 8 * d + 2 * q);
#pragma GCC unroll 4
            for (int p = 0; p < NP; ++p) sum[p][i] = _mm512_dpbf16_ps(sum[p][i], w[p], xb);
          }
        }
      }
      if (LAST && q == 3) {
#pragma GCC unroll 12
        for (int i = 0; i < R; ++i) {
          __m512 y[NP];
#pragma GCC unroll 4
          for (int p = 0; p < NP; ++p) {
            const __m512(&ch)[4] = acc[p][r + i];
            y[p] = ChainSum(ch[0], ch[1], ch[2], sum[p][i]);
          }
          if constexpr (NP == 2) {
            out.Store(i, y[0], y[1]);
          } else {
            out.Store(i, y[0]);
          }
        }
        continue;
      }
#pragma GCC unroll 4
      for (int p = 0; p < NP; ++p) {
#pragma GCC unroll 12
        for (int i = 0; i < R; ++i) acc[p][r + i][q] = sum[p][i];
      }
    }
  }

  // Block kb + kFp4DotBlocksAhead of NP panels from `panel` into the L2
  // (codes and scales); past the last block, the next panels' first blocks
  // (those before `end`, the tile's end).  The hardware prefetchers follow a
  // panel's blocks, but not the jump to the next panels.
  template <int NP>
  [[gnu::always_inline]] void PrefetchAhead(int64_t panel, int64_t kb, int64_t end) const {
    const int64_t ka = kb + kFp4DotBlocksAhead;
    const int64_t first = ka < num_kb ? panel : panel + NP;
    const int64_t k = ka < num_kb ? ka : ka - num_kb;
    if (k >= num_kb) return;
    for (int64_t p = first; p < Min(first + NP, end); ++p) {
      PrefetchL2(Block(p, k), kFp4DotBlockBytes);
      PrefetchL2(Scales(p, k), kFp4DotScaleBytes);
    }
  }

  // Rows [m0, m0 + mt) against NP panels from `panel` on: rounds of up to
  // kFp4DotRoundBlocks blocks decoded into L1 once (4 KiB per block and
  // panel), then register tiles of kFp4DotTileRows rows, the rest in tiles
  // of kFp4DotTailRows, 4, 2 and 1, each of which stores its rows' results
  // in y after the last round.  `end`: the tile's last panel + 1.
  template <int NP>
  void ManyRows(int64_t m0, int64_t mt, int64_t panel, int64_t end, __m512 (*const* acc)[4]) const {
    alignas(64) Bh wdec[NP][kFp4DotRoundBlocks][kFp4DotChunks][4];
    const Bh(*w[NP])[kFp4DotChunks][4];
    for (int p = 0; p < NP; ++p) {
      w[p] = wdec[p];
      for (int64_t r = 0; r < mt; ++r) {
        for (int q = 0; q < 4; ++q) acc[p][r][q] = V512::Zero();
      }
    }
    constexpr int kR = kFp4DotTileRows, kT = kFp4DotTailRows;
    const int64_t n0 = panel * kDotP;
    for (int64_t kb = 0; kb < num_kb;) {
      const int64_t nb = Min(kFp4DotRoundBlocks, num_kb - kb);
      for (int64_t j = 0; j < nb; ++j) {
        for (int p = 0; p < NP; ++p) DecodeBlock(panel + p, kb + j, wdec[p][j]);
        PrefetchAhead<NP>(panel, kb + j, end);
      }
      int64_t r = 0;
      const auto tile = [&]<int R>() __attribute__((always_inline)) {
        if (kb + nb < num_kb) {
          TileRows<R, NP>(w, m0 + r, r, kb, nb, acc, Bf16TileOut{});
        } else {
          const Bf16TileOut out{a.y + (m0 + r) * a.w.out + n0, a.w.out,
                                Min(NP * kDotP, a.w.out - n0)};
          TileRows<R, NP, true>(w, m0 + r, r, kb, nb, acc, out);
        }
        r += R;
      };
      // Whole tiles while the rest is none or at least a tail tile.
      while (r + kR <= mt && (r + kR == mt || mt - r - kR >= kT)) tile.template operator()<kR>();
      while (r + kT <= mt) tile.template operator()<kT>();
      const int64_t left = mt - r;  // < kT = 8: 4, 2 and 1 cover it
      static_assert(kT == 8);
      if (left & 4) tile.template operator()<4>();
      if (left & 2) tile.template operator()<2>();
      if (left & 1) tile.template operator()<1>();
      kb += nb;
    }
  }

  // Panel p's results for rows [m0, m0 + mt) (its first nc columns): the
  // few-row walks' (the register tiles store their own).
  void Store(int64_t m0, int64_t mt, int64_t p, const __m512 (*acc)[4]) const {
    const int64_t n0 = p * kDotP, nc = Min(kDotP, a.w.out - n0);
    for (int64_t r = 0; r < mt; ++r) {
      const __m512 y = ChainSum(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
      V512::StoreBf16(a.y + (m0 + r) * a.w.out + n0, y, nc);
    }
  }

  // Rows [m0, m0 + mt) against panel p, streamed 4 rows at a time.
  void StreamRows(int64_t m0, int64_t mt, int64_t p, __m512 (*acc)[4]) const {
    for (int64_t r = 0; r < mt; r += 4) {
      const int64_t n = Min(4, mt - r);
      if (n == 1) FewRows<1>(m0 + r, p, acc);
      if (n == 2) FewRows<2>(m0 + r, p, acc);
      if (n == 3) FewRows<3>(m0 + r, p, acc);
      if (n == 4) FewRows<4>(m0 + r, p, acc);
      Store(m0 + r, n, p, acc);
    }
  }

  void Run(const Tile& tile) const {
    alignas(64) __m512 acc[kFp4DotTilePanels][kMTile][4];
    __m512(*const all[kFp4DotTilePanels])[4] = {acc[0], acc[1]};
    for (int64_t m0 = tile.row_begin; m0 < tile.row_end; m0 += kMTile) {
      const int64_t mt = Min(kMTile, tile.row_end - m0);
      if (mt == 1) {
        RowsTwoStreams<1>(*this, m0, tile.panel_begin, tile.panel_end, acc[0], acc[1]);
        continue;
      }
      if (mt == 2) {
        RowsTwoStreams<2>(*this, m0, tile.panel_begin, tile.panel_end, acc[0], acc[1]);
        continue;
      }
      for (int64_t p = tile.panel_begin; p < tile.panel_end;) {
        if (mt < kFp4DotTileMinRows) {
          StreamRows(m0, mt, p++, acc[0]);
          continue;
        }
        const int64_t np = Min(kFp4DotTilePanels, tile.panel_end - p);
        if (np == 2) ManyRows<2>(m0, mt, p, tile.panel_end, all);
        if (np == 1) ManyRows<1>(m0, mt, p, tile.panel_end, all);
        p += np;
      }
    }
  }
};

}  // namespace
}  // namespace dsv4::kernels::cpu
