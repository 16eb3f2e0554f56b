// MXFP4 GEMM for many rows as outer products (AVX-512; docs/kernels.md
// "FP4 prefill: outer products").  Same exact integer 32-block sums and the
// same FP32 epilogue as gemm_fp4-inl.h, so the same bits: only where the
// products are formed changes.
//
// The row kernels of gemm_fp4-inl.h put K in the vector lanes: every column
// of every row ends each 128-block with 4-lane sums and a transpose (44 ops
// per row and panel) before its epilogue.  Here the lanes are columns: a
// panel's weights are transposed once per task into vectors of 16 columns x
// 4 consecutive (even or odd) elements, and each vpdpbusd multiplies such a
// vector by one row's 4 activation bytes broadcast to every lane, so a lane
// holds its column's 32-block sum directly and 3 rows x 4 panels share each
// weight load and each broadcast.  The activation records are the ones the
// row kernels read (gemm_cpu.h): a 128-block's even elements, then its odd
// ones, per plane, which is exactly the order of the transposed weights.
#pragma once

#include "kernels/cpu/avx512_transpose-inl.h"
#include "kernels/cpu/gemm_fp4-inl.h"

namespace dsv4::kernels::cpu {
namespace {

// Blocks of 128 packed per pass, so the transposed weights (64 KiB for 4
// panels) and their scales live on the stack and in L2.
inline constexpr int64_t kFp4OuterBlocks = 8;
// The row kernels' prefetch distance is one pass of a panel: Fp4OuterPack
// fetches each block for the next pass.
static_assert(kFp4PrefetchAhead == kFp4OuterBlocks * 16 * 64);
// Panels and rows of one micro-tile: 12 int32 sums and 12 FP32
// accumulators besides 4 weight vectors and a broadcast fit the 32
// registers (4 x 4 spilled its accumulators; 4x3, 6x2 and 2x6 measured the
// same as 3x4 within the noise).
inline constexpr int kFp4OuterPanels = 4;
inline constexpr int kFp4OuterRows = 3;

// One task's transposed weights for blocks [kb0, kb0 + nb) of nv panels:
// w[(b·32 + d)·nv + v] lane c = dword d of column c of panel v (d < 16: the
// low nibbles' u bytes 4d..4d+3, i.e. even elements 8d..8d+6; d >= 16 the
// high ones, odd elements), s[(b·4 + j)·nv + v] the 32-block j scales.
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
      I lo[16], hi[16];
      const uint8_t* col = Fp4BlockAt(w, n0, kb);
      for (int64_t c = 0; c < 16; ++c, col += 64) {
        // The same block of the panel's next pass (8 blocks on).
        _mm_prefetch(reinterpret_cast<const char*>(col + kFp4PrefetchAhead), _MM_HINT_T0);
        I u[2];
        V::Fp4Weights(col, u);
        lo[c] = u[0];
        hi[c] = u[1];
      }
      Transpose16x16(lo);
      Transpose16x16(hi);
      I* dst = out->w + b * 32 * nv + v;
#pragma GCC unroll 16
      for (int d = 0; d < 16; ++d) {
        dst[d * nv] = lo[d];
        dst[(16 + d) * nv] = hi[d];
      }
      const I dwords = V::LoadI(Fp4ScalesAt(w, n0, kb));
      typename V::F sw[4];
      Fp4ScalesOf<V>(dwords, V::E8M0Special(dwords), sw);
#pragma GCC unroll 8
      for (int j = 0; j < 4; ++j) out->s[(b * 4 + j) * nv + v] = sw[j];
    }
  }
}

// A row's scalars for one block: the record, and what multiplies the
// 32-block sums (Fp4AddBlock's expression: fp32(sum)·(unit·sa), or
// (fp32(sum)·unit)·sa when unit·sa could be subnormal).
struct Fp4OuterRow {
  const uint8_t* rec;
  float su, unit, sa;
  bool two_multiplies;
};

[[gnu::always_inline]] inline Fp4OuterRow Fp4OuterRowOf(const uint8_t* rec, float sa) {
  int32_t nan;
  float unit;
  __builtin_memcpy(&nan, rec + kFp4NanAt, sizeof nan);
  __builtin_memcpy(&unit, rec + kFp4UnitAt, sizeof unit);
  if (nan != 0) sa = __builtin_nanf("");
  const bool two = __builtin_fabsf(sa) < 0x1p-116f && sa != 0.0f;
  return Fp4OuterRow{rec, sa * unit, unit, sa, two};
}

// The kR x kV micro-tile's exact 32-block j sums over the first kPlanes
// planes (Horner's rule from the top plane, as Fp4ColumnDots).
template <class V, int kR, int kV, int kPlanes>
[[gnu::always_inline]] inline void Fp4OuterDots(const typename V::I* w, const Fp4OuterRow* rows,
                                                int j, typename V::I (*acc)[kV]) {
  using I = typename V::I;
#pragma GCC unroll 8
  for (int p = kPlanes - 1; p >= 0; --p) {
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q) {
      const int d = q < 4 ? 4 * j + q : 16 + 4 * j + (q - 4);
      I wv[kV];
#pragma GCC unroll 8
      for (int v = 0; v < kV; ++v) wv[v] = w[d * kV + v];
#pragma GCC unroll 8
      for (int r = 0; r < kR; ++r) {
        int32_t bytes;
        __builtin_memcpy(&bytes, rows[r].rec + 128 * p + 4 * d, sizeof bytes);
        const I b = _mm512_set1_epi32(bytes);
#pragma GCC unroll 8
        for (int v = 0; v < kV; ++v) {
          const I base = p == kPlanes - 1 && q == 0 ? V::ZeroI() : acc[r][v];
          acc[r][v] = V::DotU8S8(base, wv[v], b);
        }
      }
    }
    if (p > 0) {
#pragma GCC unroll 8
      for (int r = 0; r < kR; ++r) {
#pragma GCC unroll 8
        for (int v = 0; v < kV; ++v) acc[r][v] = V::Shl8(acc[r][v]);
      }
    }
  }
}

// Rows [m0, m0 + kR) against the packed blocks [kb0, kb0 + nb) of kV panels
// from n0: facc[r][v] += Σ_j (part_j·sa)·sw_j, blocks and 32-blocks in K
// order (Fp4AddBlock's operations, lane by lane).
template <class V, int kR, int kV>
void Fp4OuterRows(const Fp4GemmArgs& a, int64_t m0, int64_t kb0, int64_t nb,
                  const Fp4OuterPanel<V>& pk, typename V::F (*facc)[kFp4OuterPanels]) {
  using I = typename V::I;
  using F = typename V::F;
  const int64_t num_kb = a.w.in / 128;
  F f[kR][kV];
#pragma GCC unroll 8
  for (int r = 0; r < kR; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < kV; ++v) f[r][v] = facc[r][v];
  }
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t kb = kb0 + b;
    Fp4OuterRow rows[kR];
    bool three = false, two_multiplies = false;
#pragma GCC unroll 8
    for (int r = 0; r < kR; ++r) {
      const int64_t row = m0 + r;
      rows[r] =
          Fp4OuterRowOf(a.x + (row * num_kb + kb) * kFp4RecordBytes, a.x_scales[row * num_kb + kb]);
      three |= Fp4PlaneCount(rows[r].rec) != 2;
      two_multiplies |= rows[r].two_multiplies;
    }
    const I* w = pk.w + b * 32 * kV;
    for (int j = 0; j < 4; ++j) {
      I acc[kR][kV];
      // A 2-plane record's plane 2 is zero, so 3 planes give its sum too.
      if (three) {
        Fp4OuterDots<V, kR, kV, 3>(w, rows, j, acc);
      } else {
        Fp4OuterDots<V, kR, kV, 2>(w, rows, j, acc);
      }
      const F* sw = pk.s + (b * 4 + j) * kV;
#pragma GCC unroll 8
      for (int r = 0; r < kR; ++r) {
        int32_t offset;
        __builtin_memcpy(&offset, rows[r].rec + kFp4OffsetAt + 4 * j, sizeof offset);
        if (!two_multiplies) {
          const F su = V::Set1(rows[r].su);
#pragma GCC unroll 8
          for (int v = 0; v < kV; ++v) {
            const F sum = V::CvtI(V::SubI(acc[r][v], offset));
            f[r][v] = V::Add(f[r][v], V::Mul(V::Mul(sum, su), sw[v]));
          }
          continue;
        }
        for (int v = 0; v < kV; ++v) {
          const F sum = V::CvtI(V::SubI(acc[r][v], offset));
          F part;
          if (rows[r].two_multiplies) {
            part = V::Mul(V::Mul(sum, V::Set1(rows[r].unit)), V::Set1(rows[r].sa));
          } else {
            part = V::Mul(sum, V::Set1(rows[r].su));
          }
          f[r][v] = V::Add(f[r][v], V::Mul(part, sw[v]));
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kR; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < kV; ++v) facc[r][v] = f[r][v];
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
// to 4 panels and each stretch of 8 blocks, the weights are transposed once
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
