// MXFP4 GEMM for many rows as outer products (AVX-512; docs/kernels.md
// "FP4 prefill: outer products").  Same exact integer 32-block sums and the
// same FP32 epilogue as gemm_fp4-inl.h, so the same bits: only where the
// products are formed changes.
//
// The row kernels of gemm_fp4-inl.h stream a panel once per group of up
// to 4 rows.  Here each task decodes a stretch of 2 blocks of up to 4
// panels once onto the stack (16 KiB, L1) and every micro-tile of 2 rows x
// 4 panels runs over it: each decoded weight vector feeds 2 rows' dot
// products of both planes and each broadcast activation dword 4 panels'
// (Fp4OuterBlockSums, lanes = columns, as the row kernels).
#pragma once

#include "kernels/cpu/gemm_fp4-inl.h"

namespace dsv4::kernels::cpu {
namespace {

// Blocks of 128 decoded per pass, so the decoded weights (16 KiB for 4
// panels) and their scales stay in L1 while every micro-tile of the rows
// reads them (8 blocks, 64 KiB, streamed from L2: 5-8 % slower; 4 blocks
// measured level with 2).
inline constexpr int64_t kFp4OuterBlocks = 2;
// Fp4OuterPack prefetches each chunk for the next pass, one pass ahead.
inline constexpr int64_t kFp4OuterAhead = kFp4OuterBlocks * 16 * 64;
// Panels and rows of one micro-tile: 2 x 4 x 2 int32 sums (plane 1 and
// plane 0 apart, Fp4OuterBlockSums) besides 4 weight vectors and 2
// broadcasts fit the 32 registers; the FP32 accumulators live in L1 (facc),
// one load and store per 32-block.  (Before: 3 x 4 with Horner's rule and
// the FP32 accumulators in registers, which GCC spilled around the weights
// of the two planes' passes; 3 x 4 with split planes spilled too.)
inline constexpr int kFp4OuterPanels = 4;
inline constexpr int kFp4OuterRows = 2;

// One task's decoded weights for blocks [kb0, kb0 + nb) of nv panels:
// w[(b·32 + 8j + q)·nv + v] = Fp4BlockWeights of 32-block j of block b,
// panel v; s[(b·4 + j)·nv + v] its scales.
template <class V>
struct Fp4OuterPanel {
  typename V::I w[kFp4OuterBlocks * 32 * kFp4OuterPanels];
  typename V::F s[kFp4OuterBlocks * 4 * kFp4OuterPanels];
};

template <class V>
void Fp4OuterPack(const Fp4Weight& w, int64_t panel, int nv, int64_t kb0, int64_t nb,
                  Fp4OuterPanel<V>* out) {
  using I = typename V::I;
  for (int v = 0; v < nv; ++v) {
    const int64_t n0 = (panel + v) * V::kLanes;
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t kb = kb0 + b;
      const uint8_t* chunk = Fp4ChunkAt(w, n0, kb);
      I* dst = out->w + b * 32 * nv + v;
#pragma GCC unroll 16
      for (int d = 0; d < 16; ++d, chunk += 64) {
        // The same chunk of the panel's next pass.
        _mm_prefetch(reinterpret_cast<const char*>(chunk + kFp4OuterAhead), _MM_HINT_T0);
        I u[2];
        V::Fp4Weights(chunk, u);
        const int at = 8 * (d / 4) + d % 4;
        dst[at * nv] = u[0];
        dst[(at + 4) * nv] = u[1];
      }
      const I dwords = V::LoadI(Fp4ScalesAt(w, n0, kb));
      typename V::F sw[4];
      Fp4ScalesOf<V>(dwords, V::E8M0Special(dwords), sw);
#pragma GCC unroll 8
      for (int j = 0; j < 4; ++j) out->s[(b * 4 + j) * nv + v] = sw[j];
    }
  }
}

// acc[r][v] += (plane 2 · w) << 16 for the rows whose record has 3 planes
// (a = p0 + 2^8·p1 + 2^16·p2): Fp4BlockDots over planes 1 and 0 gave every
// row p1·2^8 + p0 (a 2-plane record's whole sum), so only those rows pay for
// plane 2, instead of every row of the micro-tile (same exact integers).
template <class V, int kR, int kV>
[[gnu::always_inline]] inline void Fp4AddTopPlanes(const typename V::I* w, const Fp4Row* rows,
                                                   int j, typename V::I (*acc)[kV]) {
  using I = typename V::I;
#pragma GCC unroll 8
  for (int r = 0; r < kR; ++r) {
    if (Fp4PlaneCount(rows[r].rec) == 2) continue;
    I top[kV];
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q) {
      const I b = V::BroadcastI(rows[r].rec + Fp4PlaneDword(2, j, q));
#pragma GCC unroll 8
      for (int v = 0; v < kV; ++v)
        top[v] = V::DotU8S8(q == 0 ? V::ZeroI() : top[v], w[q * kV + v], b);
    }
#pragma GCC unroll 8
    for (int v = 0; v < kV; ++v) acc[r][v] = V::AddI(acc[r][v], V::Shl8(V::Shl8(top[v])));
  }
}

// The kR x kV exact sums of 32-block j over planes 1 and 0 (a 2-plane
// record's whole sum; Fp4AddTopPlanes adds plane 2): the same integers as
// Fp4BlockDots<V, kR, kV, 2>, but plane 1's products and plane 0's go to
// separate sums, combined once as hi·2^8 + lo, so each decoded weight
// vector is loaded once for both planes.
template <class V, int kR, int kV>
[[gnu::always_inline]] inline void Fp4OuterBlockSums(const typename V::I* w, const Fp4Row* rows,
                                                     int j, typename V::I (*acc)[kV]) {
  using I = typename V::I;
  I hi[kR][kV], lo[kR][kV];
#pragma GCC unroll 8
  for (int q = 0; q < 8; ++q) {
    I wq[kV];
#pragma GCC unroll 8
    for (int v = 0; v < kV; ++v) wq[v] = w[q * kV + v];
#pragma GCC unroll 8
    for (int r = 0; r < kR; ++r) {
      const I b1 = V::BroadcastI(rows[r].rec + Fp4PlaneDword(1, j, q));
      const I b0 = V::BroadcastI(rows[r].rec + Fp4PlaneDword(0, j, q));
#pragma GCC unroll 8
      for (int v = 0; v < kV; ++v) {
        hi[r][v] = V::DotU8S8(q == 0 ? V::ZeroI() : hi[r][v], wq[v], b1);
        lo[r][v] = V::DotU8S8(q == 0 ? V::ZeroI() : lo[r][v], wq[v], b0);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kR; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < kV; ++v) acc[r][v] = V::AddI(V::Shl8(hi[r][v]), lo[r][v]);
  }
}

// Rows [m0, m0 + kR) against the packed blocks [kb0, kb0 + nb) of kV panels
// from n0: facc[r][v] += Σ_j (part_j·sa)·sw_j, blocks and 32-blocks in K
// order (Fp4AddSums).
template <class V, int kR, int kV>
void Fp4OuterRows(const Fp4GemmArgs& a, int64_t m0, int64_t kb0, int64_t nb,
                  const Fp4OuterPanel<V>& pk, typename V::F (*facc)[kFp4OuterPanels]) {
  using I = typename V::I;
  for (int64_t b = 0; b < nb; ++b) {
    const Fp4BlockRows<kR> br(a, m0, kb0 + b);
    for (int j = 0; j < 4; ++j) {
      const I* w = pk.w + (b * 32 + 8 * j) * kV;
      I acc[kR][kV];
      Fp4OuterBlockSums<V, kR, kV>(w, br.rows, j, acc);
      if (br.three) Fp4AddTopPlanes<V, kR, kV>(w, br.rows, j, acc);
      Fp4AddSums<V, kR, kV, kFp4OuterPanels>(br.rows, br.two_multiplies, j, acc,
                                             pk.s + (b * 4 + j) * kV, facc);
    }
  }
}

// Fp4OuterRows for a micro-tile of rows x nv (at most kR x kV).
template <class V, int kR, int kV>
void Fp4OuterMicroTile(const Fp4GemmArgs& a, int64_t m0, int rows, int nv, int64_t kb0, int64_t nb,
                       const Fp4OuterPanel<V>& pk, typename V::F (*facc)[kFp4OuterPanels]) {
  if constexpr (kR > 1) {
    if (rows < kR) return Fp4OuterMicroTile<V, kR - 1, kV>(a, m0, rows, nv, kb0, nb, pk, facc);
  }
  if constexpr (kV > 1) {
    if (nv < kV) return Fp4OuterMicroTile<V, kR, kV - 1>(a, m0, rows, nv, kb0, nb, pk, facc);
  }
  Fp4OuterRows<V, kR, kV>(a, m0, kb0, nb, pk, facc);
}

// The tile t (at most kMTile rows) by outer products: for each group of up
// to 4 panels and each stretch of 8 blocks, the weights are decoded once
// and every micro-tile of the tile's rows runs over them.
template <class V>
void Fp4OuterRowBlock(const Fp4GemmArgs& a, const Tile& t) {
  using F = typename V::F;
  const int64_t num_kb = a.w.in / 128, n = a.w.out;
  const int64_t mt = t.row_end - t.row_begin;
  alignas(64) Fp4OuterPanel<V> pk;
  alignas(64) F facc[kMTile][kFp4OuterPanels];
  for (int64_t p = t.panel_begin; p < t.panel_end; p += kFp4OuterPanels) {
    const int nv = static_cast<int>(Min(kFp4OuterPanels, t.panel_end - p));
    for (int64_t r = 0; r < mt; ++r) {
      for (F& f : facc[r]) f = V::Zero();
    }
    for (int64_t kb0 = 0; kb0 < num_kb; kb0 += kFp4OuterBlocks) {
      const int64_t nb = Min(kFp4OuterBlocks, num_kb - kb0);
      Fp4OuterPack<V>(a.w, p, nv, kb0, nb, &pk);
      for (int64_t r = 0; r < mt; r += kFp4OuterRows) {
        const int rows = static_cast<int>(Min(kFp4OuterRows, mt - r));
        const int64_t m0 = t.row_begin + r;
        Fp4OuterMicroTile<V, kFp4OuterRows, kFp4OuterPanels>(a, m0, rows, nv, kb0, nb, pk,
                                                             facc + r);
      }
    }
    for (int64_t r = 0; r < mt; ++r) {
      for (int v = 0; v < nv; ++v) {
        const int64_t n0 = (p + v) * V::kLanes;
        V::StoreBf16(a.y + (t.row_begin + r) * n + n0, facc[r][v], Min(V::kLanes, n - n0));
      }
    }
  }
}

// The AVX-512 FP4 tile kernel: outer products for tiles of at least
// a.outer_min_rows rows (in blocks of kMTile rows, the accumulators' size),
// the row kernels below that (same bits).
template <class V>
void Fp4GemmTile(const Fp4GemmArgs& a, const Tile& t) {
  static_assert(V::kLanes == 16);
  if (t.row_end - t.row_begin < a.outer_min_rows) return Fp4GemmPanels<V>(a, t);
  for (int64_t m0 = t.row_begin; m0 < t.row_end; m0 += kMTile) {
    Fp4OuterRowBlock<V>(a, Tile{m0, Min(m0 + kMTile, t.row_end), t.panel_begin, t.panel_end});
  }
}

}  // namespace
}  // namespace dsv4::kernels::cpu
