// Block-scaled GEMMs with FP8 128x128-block weights (MXFP4: gemm_fp4-inl.h),
// written once for every vector width V (see gemm_simd_common-inl.h).
//
// One panel = V::kLanes output columns.  For each 128-wide K block, column
// c's products with a row accumulate in the lanes (lane l takes k = l,
// l + kLanes, ... in order), the panel's lane vectors are summed by one fixed
// tree (V::ReducePanel), and the block's partial sums are scaled and added to
// the row's accumulator.  Every path below (GEMV, few rows, paired or single
// tile rows) runs that same chain per row, so results are batch invariant.
#pragma once

#include "kernels/cpu/gemm_simd_common-inl.h"

namespace dsv4::kernels::cpu {
namespace {

// The row stride of an FP8 GEMM's output.
inline int64_t YStride(const Fp8GemmArgs& a) { return a.ldy > 0 ? a.ldy : a.w.out; }

// Rows [0, mt) of a tile against one decoded panel block.  x points at the
// block in row 0 (row stride k); x_scales at row 0's block scale (row stride
// num_kb).  With V::kPairRows two rows share each weight load; the per-row
// arithmetic is that of the one-row tail, so pairing never changes a result.
template <class V>
void TileBlock(const typename V::F (*wdec)[kVecs<V>], int64_t nc, const float* x, int64_t k,
               const float* x_scales, int64_t num_kb, float sw, int64_t mt, typename V::F* acc) {
  constexpr int64_t kP = V::kLanes;
  typename V::F lanes[kP];
#pragma GCC unroll 16
  for (int c = 0; c < kP; ++c) lanes[c] = V::Zero();
  int64_t r = 0;
  if constexpr (V::kPairRows) {
    typename V::F lanes2[kP];
#pragma GCC unroll 16
    for (int c = 0; c < kP; ++c) lanes2[c] = V::Zero();
    for (; r + 2 <= mt; r += 2) {
      const XBlock<V> xa(x + r * k), xb(x + (r + 1) * k);
      for (int64_t c = 0; c < nc; ++c) {
        lanes[c] = Chain<V>(wdec[c], xa);
        lanes2[c] = Chain<V>(wdec[c], xb);
      }
      acc[r] = AddBlock<V>(acc[r], lanes, x_scales[r * num_kb] * sw);
      acc[r + 1] = AddBlock<V>(acc[r + 1], lanes2, x_scales[(r + 1) * num_kb] * sw);
    }
  }
  for (; r < mt; ++r) {
    const XBlock<V> xa(x + r * k);
    for (int64_t c = 0; c < nc; ++c) lanes[c] = Chain<V>(wdec[c], xa);
    acc[r] = AddBlock<V>(acc[r], lanes, x_scales[r * num_kb] * sw);
  }
}

// K blocks per stretch of the few-row walk (StretchPanel): 32 blocks are
// 4 KB of an FP8 weight row, and the stretch's lane vectors (32 x 16
// AVX-512 vectors) 32 KB of stack; M rows take stretches of 32/M blocks.
constexpr int64_t kGemvBlocks = 32;

// Rows 0..M (one: a decode GEMV; up to 4 where V::kFewRowPaths: a verify
// step's tail and drafts) against one panel, column by column: each
// column's weights are read as one contiguous stretch of up to
// kGemvBlocks/M K blocks (two columns at a time, sharing the activation
// loads), each decoded block feeds every row's chain, each (row, column,
// block) chain is kept, and the stretch's blocks are then reduced and added
// in K order.  Walking the panel block by block instead keeps 16 rows `in`
// bytes apart in flight, which streamed a [4096, 8192] FP8 weight at 12
// GB/s on one thread or two (docs/kernels.md "One-row FP8 GEMV").  Same
// chains, same reduction tree, same order of the block sums as TileBlock:
// the same bits.  x: row 0 (row stride k); x_scales: row 0's (stride
// num_kb).
template <class V, int M, typename Decode, typename PanelScale>
void StretchPanel(const Decode& decode, const PanelScale& panel_scale, int64_t n0, int64_t nc,
                  const float* x, int64_t k, const float* x_scales, int64_t num_kb,
                  typename V::F* acc) {
  constexpr int64_t kP = V::kLanes;
  constexpr int64_t kBlocks = kGemvBlocks / M;
  alignas(sizeof(typename V::F)) typename V::F lanes[M][kBlocks][kP];
  for (int r = 0; r < M; ++r) acc[r] = V::Zero();
  for (int64_t kb0 = 0; kb0 < num_kb; kb0 += kBlocks) {
    const int64_t nb = Min(kBlocks, num_kb - kb0);
    int64_t c = 0;
    for (; c + 2 <= nc; c += 2) {
      for (int64_t b = 0; b < nb; ++b) {
        typename V::F wa[kVecs<V>], wb[kVecs<V>];
        decode(n0 + c, kb0 + b, wa, false);
        decode(n0 + c + 1, kb0 + b, wb, false);
#pragma GCC unroll 4
        for (int r = 0; r < M; ++r) {
          const XBlock<V> xa(x + r * k + (kb0 + b) * 128);
          lanes[r][b][c] = Chain<V>(wa, xa);
          lanes[r][b][c + 1] = Chain<V>(wb, xa);
        }
      }
    }
    if (c < nc) {
      for (int64_t b = 0; b < nb; ++b) {
        typename V::F wa[kVecs<V>];
        decode(n0 + c, kb0 + b, wa, false);
#pragma GCC unroll 4
        for (int r = 0; r < M; ++r) {
          lanes[r][b][c] = Chain<V>(wa, XBlock<V>(x + r * k + (kb0 + b) * 128));
        }
      }
    }
    for (int64_t b = 0; b < nb; ++b) {
      const float sw = panel_scale(n0, kb0 + b);
#pragma GCC unroll 4
      for (int r = 0; r < M; ++r) {
        for (int64_t z = nc; z < kP; ++z) lanes[r][b][z] = V::Zero();
        acc[r] = AddBlock<V>(acc[r], lanes[r][b], x_scales[r * num_kb + kb0 + b] * sw);
      }
    }
  }
}

// Block-scaled GEMM over the tile t.  decode(col, kb, w[kVecs], tile) yields
// a block's weights (tile: for the register tiles, which reuse the panel's
// block for many rows, rather than a few-row stretch: it decides what the
// decode prefetches); panel_scale(n0, kb) the per-panel weight scale (1 when
// the scale is folded into the decoded weights).  acc += parts · (sa · panel_scale).
// One row (and up to 4 where V::kFewRowPaths) take StretchPanel, more rows
// TileBlock on the panel's block decoded once.
template <class V, typename Decode, typename PanelScale>
void BlockScaledPanels(const float* x, const float* x_scales, int64_t k, int64_t n, bf16* y,
                       int64_t ldy, const Tile& t, Decode decode, PanelScale panel_scale) {
  constexpr int64_t kP = V::kLanes;
  constexpr int64_t kStretchRows = V::kFewRowPaths ? 4 : 1;
  const int64_t num_kb = k / 128;
  alignas(sizeof(typename V::F)) typename V::F wdec[kP][kVecs<V>];  // the panel's block, decoded
  alignas(sizeof(typename V::F)) typename V::F acc[kMTile];  // per row, columns as ReducePanel
  for (int64_t m0 = t.row_begin; m0 < t.row_end; m0 += kMTile) {
    const int64_t mt = Min(kMTile, t.row_end - m0);
    for (int64_t p = t.panel_begin; p < t.panel_end; ++p) {
      const int64_t n0 = p * kP;
      const int64_t nc = Min(kP, n - n0);
      const float* xr = x + m0 * k;
      const float* sr = x_scales + m0 * num_kb;
      if (mt == 1) StretchPanel<V, 1>(decode, panel_scale, n0, nc, xr, k, sr, num_kb, acc);
      if constexpr (kStretchRows == 4) {
        if (mt == 2) StretchPanel<V, 2>(decode, panel_scale, n0, nc, xr, k, sr, num_kb, acc);
        if (mt == 3) StretchPanel<V, 3>(decode, panel_scale, n0, nc, xr, k, sr, num_kb, acc);
        if (mt == 4) StretchPanel<V, 4>(decode, panel_scale, n0, nc, xr, k, sr, num_kb, acc);
      }
      if (mt > kStretchRows) {
        for (int64_t r = 0; r < mt; ++r) acc[r] = V::Zero();
        for (int64_t kb = 0; kb < num_kb; ++kb) {
          for (int64_t c = 0; c < nc; ++c) decode(n0 + c, kb, wdec[c], true);
          TileBlock<V>(wdec, nc, xr + kb * 128, k, sr + kb, num_kb, panel_scale(n0, kb), mt, acc);
        }
      }
      for (int64_t r = 0; r < mt; ++r) {
        V::StoreBf16(y + (m0 + r) * ldy + n0, V::UnpermuteColumns(acc[r]), nc);
      }
    }
  }
}

// FP8: the codes decode to value·2^-8 (the activations carry the 2^8), one
// E8M0 scale per 128x128 block multiplies the panel's block sums.
template <class V>
void Fp8GemmPanels(const Fp8GemmArgs& a, const Tile& t) {
  constexpr int64_t kP = V::kLanes;
  const Fp8Weight& w = a.w;
  const int64_t ld_scale = (w.in + 127) / 128;
  BlockScaledPanels<V>(
      a.x, a.x_scales, w.in, w.out, a.y, YStride(a), t,
      [&](int64_t col, int64_t kb, typename V::F* out, bool tile) {
        const uint8_t* p = w.codes + col * w.in + kb * 128;
        // The tiles: this column's next block, into the L2 (the next panel's
        // rows share the current panel's L1 sets when w.in is a multiple of
        // 4 KiB, as in the dense tiles: gemm_dense-inl.h kNextChunk).  The
        // few-row stretches: the next panel.
        if (tile) {
          if (kb + 1 < w.in / 128) PrefetchL2(p + 128, 128);
        } else if (col + kP < w.out) {
          Prefetch(p + kP * w.in, 128);
        }
        V::DecodeFp8Block(p, out);
      },
      [&](int64_t n0, int64_t kb) { return E8M0Value(w.scales[(n0 / 128) * ld_scale + kb]); });
}

}  // namespace
}  // namespace dsv4::kernels::cpu
