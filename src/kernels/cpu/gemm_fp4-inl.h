// MXFP4 GEMM (expert weights), written once for every vector width V (see
// gemm_simd_common-inl.h).
//
// Numerics (docs/kernels.md "FP4: exact 32-block sums"): each 32-block's sum
// of products e4m3(x)·e2m1(w) is computed exactly, as an integer, and
// rounded once to FP32; then acc += (part·sa)·sw per 32-block in K order,
// the scalar reference's expression.  An integer sum has no order, so every
// ISA, every path (one row, a few, a tile) and the reference give the same
// bits.
//
// The weights' nibbles become unsigned bytes 2·e2m1 + 12 (0..24) through a
// 16-entry byte table (vpshufb / vpermb), the activations come as three
// signed byte planes (gemm_cpu.h, Fp4GemmArgs), and unsigned x signed byte
// dot products (vpdpbusd: 4 products summed per int32 lane) combine the
// planes by Horner's rule (two shifts by 8; one on a 2-plane record, whose
// planes hold a/8, chosen per block outside the dot loops).  The sums stay
// far inside int32: |Σ a·u| <= 32·448·2^9·24 < 2^28.  The vector lanes are
// columns: the panel layout puts 4 bytes of each of 16 columns in one
// 64-byte chunk, and each dot product takes them against the row's 4
// matching activation bytes broadcast to every lane, so a lane ends a
// 32-block holding its column's sum, with no reduction across lanes.
#pragma once

#include "kernels/cpu/gemm_simd_common-inl.h"

namespace dsv4::kernels::cpu {
namespace {

// The kernels read the panel layout (gemm.h, docs/kernels.md "FP4 panel
// layout"): a group of 16 columns' 128-block kb is 1 KiB, 16 chunks of 64
// bytes, chunk d holding the packed bytes 4d..4d+3 of each column (column c
// at 4c).  Decoded, chunk d's low nibbles are elements 8d, 8d+2, 8d+4, 8d+6
// of every column (lanes = columns), its high nibbles the odd elements after
// them.  The block's scales: 4 bytes per column, columns side by side (one
// 64-byte vector).  Whole groups, zero-padded, so a panel never reads past
// them.
[[gnu::always_inline]] inline int64_t Fp4GroupBlock(const Fp4Weight& w, int64_t col, int64_t kb) {
  return (col / kFp4PanelColumns) * (w.in / 128) + kb;
}
// Chunk 0 of column col's 128-block kb (chunk d is 64·d bytes on; the
// panel's next columns follow at 4-byte steps).
[[gnu::always_inline]] inline const uint8_t* Fp4ChunkAt(const Fp4Weight& w, int64_t col,
                                                        int64_t kb) {
  return w.packed + Fp4GroupBlock(w, col, kb) * 1024 + (col % kFp4PanelColumns) * 4;
}
[[gnu::always_inline]] inline const uint8_t* Fp4ScalesAt(const Fp4Weight& w, int64_t col,
                                                         int64_t kb) {
  return w.scales + Fp4GroupBlock(w, col, kb) * 64 + (col % kFp4PanelColumns) * 4;
}

// How far ahead of its reads a GEMV prefetches the weights it streams: 8
// blocks of a 16-column group.  The hardware prefetchers alone streamed the
// panel layout at about 23 GB/s on one core, 8 KiB ahead at 34-38 GB/s (1 KiB
// ahead was slower than none, 32 KiB ahead 30 GB/s): docs/performance.md
// "FP4 panel layout".
inline constexpr int64_t kFp4PrefetchAhead = 8192;

// The record's plane count (gemm_cpu.h: 3, or 2 when plane 2 is zero).
[[gnu::always_inline]] inline int32_t Fp4PlaneCount(const uint8_t* rec) {
  int32_t planes;
  __builtin_memcpy(&planes, rec + kFp4PlanesAt, sizeof planes);
  return planes;
}

// The four 32-block weight scales of one block as FP32 vectors, lanes =
// columns, from its scale dwords (lane c: column c's 4 E8M0 bytes).
// special: a byte may be 0 or 255 (the E8M0 values E8M0Bytes' plain shift
// does not give; padding columns have 127).
template <class V>
[[gnu::always_inline]] inline void Fp4ScalesOf(typename V::I dwords, bool special,
                                               typename V::F* sw) {
  if (special) {
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) sw[j] = V::template E8M0Bytes<true>(dwords, j);
    return;
  }
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) sw[j] = V::template E8M0Bytes<false>(dwords, j);
}

// A row's scalars for one block: the record, and what multiplies its
// 32-block sums: fp32(sum)·(unit·sa), one rounding of (fp32(sum)·unit)·sa
// whenever unit·sa is exact, i.e. unless sa is below 2^-116 (then unit·sa
// could be subnormal and drop bits, and the two multiplies stay).
struct Fp4Row {
  const uint8_t* rec;
  float su, unit, sa;
  bool two_multiplies;
};

[[gnu::always_inline]] inline Fp4Row Fp4RowOf(const uint8_t* rec, float sa) {
  int32_t nan;
  float unit;
  __builtin_memcpy(&nan, rec + kFp4NanAt, sizeof nan);
  __builtin_memcpy(&unit, rec + kFp4UnitAt, sizeof unit);
  if (nan != 0) sa = __builtin_nanf("");
  const bool two = __builtin_fabsf(sa) < 0x1p-116f && sa != 0.0f;
  return Fp4Row{rec, sa * unit, unit, sa, two};
}

// The decoded weights of 32-block j of kV panels: w[q·kV + v], q < 4 the
// low nibbles of chunk 4j + q (even elements), q >= 4 the high nibbles of
// chunk 4j + q - 4 (odd elements), lanes = columns.
template <class V, int kV>
using Fp4BlockWeights = typename V::I[8 * kV];

// Where, in a record, the 4 activation bytes of plane p meet decoded weight
// vector q (Fp4BlockWeights) of 32-block j: plane p holds a block's 64 even
// elements, then its 64 odd ones, so chunk d's 4 bytes sit at 4d (even,
// q < 4) and 64 + 4d (odd).
constexpr int Fp4PlaneDword(int p, int j, int q) {
  return 128 * p + (q < 4 ? 0 : 64) + 4 * (4 * j + q % 4);
}

// The kR x kV exact 32-block j sums over the first kPlanes planes, lanes =
// columns: each dot product multiplies a vector of 4 weight bytes per
// column by the row's 4 matching activation bytes broadcast to every lane
// (Horner's rule from the top plane: one shift by 8 per plane below it).
// A 2-plane record's plane 2 is zero, so 3 planes give its sum too.  With
// at most 4 sums in flight, the 8 chunks of a plane are split over kSplit
// partial sums (integer sums: any order gives the same value), so one row's
// dot products are not one chain of dependent instructions: 4 for one sum,
// 2 for 2-4 (3 and 4 rows of one panel ran 16-deep chains before: 10-12 %
// slower on a verify GEMM streamed from memory; 8 for one sum and 4 for two
// measured no faster).
template <class V, int kR, int kV, int kPlanes>
[[gnu::always_inline]] inline void Fp4BlockDots(const typename V::I* w, const Fp4Row* rows, int j,
                                                typename V::I (*acc)[kV]) {
  using I = typename V::I;
  constexpr int kSplit = kR * kV == 1 ? 4 : kR * kV <= 4 ? 2 : 1;
  I part[kSplit][kR][kV];
#pragma GCC unroll 8
  for (int p = kPlanes - 1; p >= 0; --p) {
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q) {
      const int at = Fp4PlaneDword(p, j, q);
      const int s = q % kSplit;
#pragma GCC unroll 8
      for (int r = 0; r < kR; ++r) {
        const bool first = p == kPlanes - 1 && q < kSplit;
        if constexpr (kV == 1) {  // the broadcast as the dot product's memory operand
          part[s][r][0] = V::DotU8S8At(first ? V::ZeroI() : part[s][r][0], w[q], rows[r].rec + at);
          continue;
        }
        const I b = V::BroadcastI(rows[r].rec + at);
#pragma GCC unroll 8
        for (int v = 0; v < kV; ++v) {
          part[s][r][v] = V::DotU8S8(first ? V::ZeroI() : part[s][r][v], w[q * kV + v], b);
        }
      }
    }
    if (p > 0) {
#pragma GCC unroll 8
      for (int s = 0; s < kSplit; ++s) {
#pragma GCC unroll 8
        for (int r = 0; r < kR; ++r) {
#pragma GCC unroll 8
          for (int v = 0; v < kV; ++v) part[s][r][v] = V::Shl8(part[s][r][v]);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kR; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < kV; ++v) {
      acc[r][v] = part[0][r][v];
#pragma GCC unroll 4
      for (int s = 1; s < kSplit; ++s) acc[r][v] = V::AddI(acc[r][v], part[s][r][v]);
    }
  }
}

// f[r][v] += (part·sa)·sw[v] for 32-block j, part = fp32(sum - offset)·unit:
// the scalar reference's expression, lane by lane (one multiply fewer when
// no row needs two, see Fp4Row).  kFS: f's row length (kV or more).
template <class V, int kR, int kV, int kFS = kV>
[[gnu::always_inline]] inline void Fp4AddSums(const Fp4Row* rows, bool two_multiplies, int j,
                                              typename V::I (*acc)[kV], const typename V::F* sw,
                                              typename V::F (*f)[kFS]) {
  using F = typename V::F;
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

// The rows of one block: their scalars, whether any needs the third plane
// or two multiplies.
template <int kR>
struct Fp4BlockRows {
  Fp4Row rows[kR];
  bool three = false, two_multiplies = false;
  [[gnu::always_inline]] Fp4BlockRows(const Fp4GemmArgs& a, int64_t m0, int64_t kb) {
    const int64_t num_kb = a.w.in / 128;
#pragma GCC unroll 8
    for (int r = 0; r < kR; ++r) {
      const int64_t i = (m0 + r) * num_kb + kb;
      rows[r] = Fp4RowOf(a.x + i * kFp4RecordBytes, a.x_scales[i]);
      three |= Fp4PlaneCount(rows[r].rec) != 2;
      two_multiplies |= rows[r].two_multiplies;
    }
  }
};

// Rows m0..m0 + kR against the whole panel at n0 (V::kLanes columns), the
// weights streamed from memory: each 32-block's 4 chunks are decoded once
// in registers and feed every row's dot products.  Every row runs the same
// integer sums and epilogue whatever kR is, so a row's bits never depend on M.
template <class V, int kR>
void Fp4PanelRows(const Fp4GemmArgs& a, int64_t m0, int64_t n0) {
  using I = typename V::I;
  using F = typename V::F;
  const Fp4Weight& w = a.w;
  const int64_t num_kb = w.in / 128;
  F f[kR][1];
#pragma GCC unroll 8
  for (int r = 0; r < kR; ++r) f[r][0] = V::Zero();
  for (int64_t kb = 0; kb < num_kb; ++kb) {
    const Fp4BlockRows<kR> br(a, m0, kb);
    const uint8_t* scales = Fp4ScalesAt(w, n0, kb);
    // The scales are a second, 16 times slower stream: 8 blocks ahead too.
    _mm_prefetch(reinterpret_cast<const char*>(scales + kFp4PrefetchAhead / 16), _MM_HINT_T0);
    const I dwords = V::LoadI(scales);
    F sw[4];
    Fp4ScalesOf<V>(dwords, V::E8M0Special(dwords), sw);
    const uint8_t* chunk = Fp4ChunkAt(w, n0, kb);
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      alignas(sizeof(I)) Fp4BlockWeights<V, 1> wv;
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q, chunk += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(chunk + kFp4PrefetchAhead), _MM_HINT_T0);
        I u[2];
        V::Fp4Weights(chunk, u);
        wv[q] = u[0];
        wv[4 + q] = u[1];
      }
      I acc[kR][1];
      if (br.three) {
        Fp4BlockDots<V, kR, 1, 3>(wv, br.rows, j, acc);
      } else {
        Fp4BlockDots<V, kR, 1, 2>(wv, br.rows, j, acc);
      }
      Fp4AddSums<V, kR, 1>(br.rows, br.two_multiplies, j, acc, &sw[j], f);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kR; ++r) {
    V::StoreBf16(a.y + (m0 + r) * w.out + n0, f[r][0], Min(V::kLanes, w.out - n0));
  }
}

// Rows held at once by Fp4PanelRows: 4 with 32 vector registers (a verify
// step's rows share every weight load), 2 with 16.
template <class V>
inline constexpr int kFp4PanelRowsMax = V::kFewRowPaths ? 4 : 2;

// MXFP4 GEMM over the tile t, panel by panel, its rows in groups of up to
// kFp4PanelRowsMax (more rows re-read the panel from cache; on AVX-512,
// tiles of kFp4OuterMinRows rows or more take the outer-product kernel of
// gemm_fp4_outer-inl.h instead).
template <class V>
void Fp4GemmPanels(const Fp4GemmArgs& a, const Tile& t) {
  constexpr int kMax = kFp4PanelRowsMax<V>;
  for (int64_t p = t.panel_begin; p < t.panel_end; ++p) {
    const int64_t n0 = p * V::kLanes;
    for (int64_t m0 = t.row_begin; m0 < t.row_end; m0 += kMax) {
      const int64_t rows = Min(static_cast<int64_t>(kMax), t.row_end - m0);
      if (rows == 1) {
        Fp4PanelRows<V, 1>(a, m0, n0);
      } else if (rows == 2) {
        Fp4PanelRows<V, 2>(a, m0, n0);
      } else if constexpr (kMax >= 4) {
        if (rows == 3) {
          Fp4PanelRows<V, 3>(a, m0, n0);
        } else {
          Fp4PanelRows<V, 4>(a, m0, n0);
        }
      }
    }
  }
}

}  // namespace
}  // namespace dsv4::kernels::cpu
