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
// 16-entry byte table (vpshufb), the activations come as three signed byte
// planes (gemm_cpu.h, Fp4GemmArgs), and unsigned x signed byte dot products
// (vpdpbusd: 4 products summed per int32 lane) combine the planes by
// Horner's rule (two shifts by 8; one on a 2-plane record, whose planes hold
// a/8, chosen per block and row outside the column loops).  The sums stay
// far inside int32:
// |Σ a·u| <= 32·448·2^9·24 < 2^28.  Lane l of a load's dot vector covers 4
// consecutive even (or odd) elements, so its lanes 4j..4j+3 of every
// 128-bit chunk belong to one 32-block: V::Fp4SubBlockSums adds them and
// transposes the panel into one vector per 32-block, lanes = columns.
#pragma once

#include "kernels/cpu/gemm_simd_common-inl.h"

namespace dsv4::kernels::cpu {
namespace {

// Vector loads of packed weights per 128-block: 64 bytes / (4·kLanes).
template <class V>
inline constexpr int kFp4Loads = static_cast<int>(64 / (4 * V::kLanes));

// The kernels read the panel layout (gemm.h, docs/kernels.md "FP4 panel
// layout"): column col's 128-block kb, 64 bytes, and the panel's next
// column 64 bytes on; its 4 scale bytes, the next column's 4 bytes on (a
// panel's scales of one block are one vector: lane c = column c's dword).
// Whole groups of 16 columns, zero-padded, so a panel never reads past them.
[[gnu::always_inline]] inline int64_t Fp4PanelIndex(const Fp4Weight& w, int64_t col, int64_t kb) {
  return ((col / kFp4PanelColumns) * (w.in / 128) + kb) * kFp4PanelColumns + col % kFp4PanelColumns;
}
[[gnu::always_inline]] inline const uint8_t* Fp4BlockAt(const Fp4Weight& w, int64_t col,
                                                        int64_t kb) {
  return w.packed + Fp4PanelIndex(w, col, kb) * 64;
}
[[gnu::always_inline]] inline const uint8_t* Fp4ScalesAt(const Fp4Weight& w, int64_t col,
                                                         int64_t kb) {
  return w.scales + Fp4PanelIndex(w, col, kb) * 4;
}

// How far ahead of its reads a GEMV prefetches the weights it streams: 8
// blocks of a 16-column panel.  The hardware prefetchers alone streamed the
// panel layout at about 23 GB/s on one core, 8 KiB ahead at 34-38 GB/s (1 KiB
// ahead was slower than none, 32 KiB ahead 30 GB/s): docs/performance.md
// "FP4 panel layout".
inline constexpr int64_t kFp4PrefetchAhead = 8192;

// One row's block record (gemm_cpu.h): its first kPlanes planes, read as
// vectors either from registers (V::kXInRegisters: the one-row path reuses
// them for every column) or from memory at each use (dot products take
// memory operands).
template <class V, int kPlanes, bool kInRegisters = V::kXInRegisters>
struct Fp4Planes;

template <class V, int kPlanes>
struct Fp4Planes<V, kPlanes, true> {
  typename V::I v[kPlanes][2 * kFp4Loads<V>];
  [[gnu::always_inline]] explicit Fp4Planes(const uint8_t* rec) {
#pragma GCC unroll 4
    for (int p = 0; p < kPlanes; ++p) {
#pragma GCC unroll 4
      for (int i = 0; i < 2 * kFp4Loads<V>; ++i)
        v[p][i] = V::LoadI(rec + 128 * p + 4 * V::kLanes * i);
    }
  }
  // Plane p of half h (2·load + 0 even, + 1 odd).
  [[gnu::always_inline]] typename V::I operator()(int p, int h) const { return v[p][h]; }
};

template <class V, int kPlanes>
struct Fp4Planes<V, kPlanes, false> {
  const uint8_t* rec;
  [[gnu::always_inline]] explicit Fp4Planes(const uint8_t* r) : rec(r) {}
  [[gnu::always_inline]] typename V::I operator()(int p, int h) const {
    return V::LoadI(rec + 128 * p + 4 * V::kLanes * h);
  }
};

// The record's plane count (gemm_cpu.h: 3, or 2 when plane 2 is zero).
[[gnu::always_inline]] inline int32_t Fp4PlaneCount(const uint8_t* rec) {
  int32_t planes;
  __builtin_memcpy(&planes, rec + kFp4PlanesAt, sizeof planes);
  return planes;
}

// One column's 128-block (decoded weight bytes w[2·load + 0/1]: even / odd
// elements) against one row's first kPlanes planes: per load, int32 lanes
// holding Σ a·u over 4 elements each (Horner's rule from the top plane).
template <class V, int kPlanes, class X>
[[gnu::always_inline]] inline void Fp4ColumnDots(const typename V::I* w, const X& x,
                                                 typename V::I* out) {
#pragma GCC unroll 4
  for (int i = 0; i < kFp4Loads<V>; ++i) {
    const typename V::I we = w[2 * i], wo = w[2 * i + 1];
    typename V::I s = V::DotU8S8(V::ZeroI(), we, x(kPlanes - 1, 2 * i));
    s = V::DotU8S8(s, wo, x(kPlanes - 1, 2 * i + 1));
#pragma GCC unroll 4
    for (int p = kPlanes - 2; p >= 0; --p) {
      s = V::Shl8(s);
      s = V::DotU8S8(s, we, x(p, 2 * i));
      s = V::DotU8S8(s, wo, x(p, 2 * i + 1));
    }
    out[i] = s;
  }
}

// The four 32-block weight scales of one block as FP32 vectors, lanes =
// columns, from its scale dwords (lane c: column c's 4 E8M0 bytes).
// special: a byte may be 0 or 255 (or a partial panel's zero lanes).
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

// acc + Σ_j (part_j·sa)·sw_j for the 4 32-blocks in order, part_j = fp32
// (exact sum)·unit (2^-10: a carries 2^9, u = 2·e2m1 + 12 carries 2; 2^-7
// for a 2-plane record of a/8; both exact scalings): the reference's
// expression.  dots: the panel's per-column dot vectors
// ([kLanes][kFp4Loads], zero beyond the panel's columns).
template <class V>
[[gnu::always_inline]] inline typename V::F Fp4AddBlock(typename V::F acc,
                                                        const typename V::I* dots,
                                                        const uint8_t* rec, float sa,
                                                        const typename V::F* sw) {
  typename V::I sums[4];
  V::Fp4SubBlockSums(dots, sums);
  int32_t offset[4], nan;
  float unit_value;
  __builtin_memcpy(offset, rec + kFp4OffsetAt, sizeof offset);
  __builtin_memcpy(&nan, rec + kFp4NanAt, sizeof nan);
  __builtin_memcpy(&unit_value, rec + kFp4UnitAt, sizeof unit_value);
  if (nan != 0) sa = __builtin_nanf("");
  // (fp32(sum)·unit)·sa is fp32(sum)·(unit·sa), one rounding of the same
  // value, whenever unit·sa is exact: unless sa is below 2^-116 (then
  // unit·sa would be subnormal and could drop bits).  One multiply less
  // per 32-block.
  if (!(__builtin_fabsf(sa) < 0x1p-116f) || sa == 0.0f) {
    const typename V::F su = V::Set1(sa * unit_value);
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const typename V::F sum = V::CvtI(V::SubI(sums[j], offset[j]));
      acc = V::Add(acc, V::Mul(V::Mul(sum, su), sw[j]));
    }
    return acc;
  }
  const typename V::F vsa = V::Set1(sa), unit = V::Set1(unit_value);
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const typename V::F part = V::Mul(V::CvtI(V::SubI(sums[j], offset[j])), unit);
    acc = V::Add(acc, V::Mul(V::Mul(part, vsa), sw[j]));
  }
  return acc;
}

// One row against a whole panel's 128-block kb (col: its first column's
// block; the others follow 64 bytes apart), the weights decoded in
// registers: d[c·kFp4Loads + i] the column dots.  Constant indices keep the
// dot vectors in registers.
template <class V, int kPlanes>
[[gnu::always_inline]] inline void Fp4PanelRowDots(const uint8_t* col, const uint8_t* rec,
                                                   typename V::I* d) {
  constexpr int kL = kFp4Loads<V>;
  const Fp4Planes<V, kPlanes> x(rec);
#pragma GCC unroll 16
  for (int c = 0; c < V::kLanes; ++c, col += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(col + kFp4PrefetchAhead), _MM_HINT_T0);
    typename V::I wv[2 * kL];
    V::Fp4Weights(col, wv);
    Fp4ColumnDots<V, kPlanes>(wv, x, d + c * kL);
  }
}

// Rows 0..kRows of a 2..4-row tile against a whole panel's 128-block: like
// Fp4PanelRowDots, each column's block is decoded once in registers, and
// every row's dot products take it from there (d[r][c·kFp4Loads + i]),
// instead of storing the decoded panel and reading it back once per row.
// The rows' first kPlanes planes are loaded once per block.
template <class V, int kRows, int kPlanes>
[[gnu::always_inline]] inline void Fp4PanelFewRowDots(
    const uint8_t* col, const uint8_t* const* recs, typename V::I (*d)[V::kLanes * kFp4Loads<V>]) {
  using I = typename V::I;
  constexpr int kL = kFp4Loads<V>;
  struct Row {
    I v[kPlanes][2 * kL];
    [[gnu::always_inline]] I operator()(int p, int h) const { return v[p][h]; }
  };
  Row x[kRows];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (int p = 0; p < kPlanes; ++p) {
#pragma GCC unroll 4
      for (int i = 0; i < 2 * kL; ++i)
        x[r].v[p][i] = V::LoadI(recs[r] + 128 * p + 4 * V::kLanes * i);
    }
  }
#pragma GCC unroll 16
  for (int c = 0; c < V::kLanes; ++c, col += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(col + kFp4PrefetchAhead), _MM_HINT_T0);
    I wv[2 * kL];
    V::Fp4Weights(col, wv);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) Fp4ColumnDots<V, kPlanes>(wv, x[r], d[r] + c * kL);
  }
}

// One block of rows m0..m0 + kRows (2..4) against the whole panel at n0:
// acc[r] += the block's contribution, as the one-row path computes it for
// each row (same integer sums, same epilogue).  A row whose record has 2
// planes gets the same sum from 3 (its plane 2 is zero), so the tile runs 3
// when any row needs them.
template <class V, int kRows>
[[gnu::always_inline]] inline void Fp4FewRowsBlock(const Fp4GemmArgs& a, int64_t m0, int64_t kb,
                                                   const uint8_t* col, const typename V::F* sw,
                                                   typename V::F* acc) {
  const int64_t num_kb = a.w.in / 128;
  const uint8_t* recs[kRows];
  bool three = false;
  for (int r = 0; r < kRows; ++r) {
    recs[r] = a.x + ((m0 + r) * num_kb + kb) * kFp4RecordBytes;
    three |= Fp4PlaneCount(recs[r]) != 2;
  }
  typename V::I d[kRows][V::kLanes * kFp4Loads<V>];
  if (three) {
    Fp4PanelFewRowDots<V, kRows, 3>(col, recs, d);
  } else {
    Fp4PanelFewRowDots<V, kRows, 2>(col, recs, d);
  }
  for (int r = 0; r < kRows; ++r) {
    acc[r] = Fp4AddBlock<V>(acc[r], d[r], recs[r], a.x_scales[(m0 + r) * num_kb + kb], sw);
  }
}

// The dots of a panel's decoded blocks w[c] against one row's record.
template <class V, int kPlanes>
[[gnu::always_inline]] inline void Fp4RowDots(const typename V::I (*w)[2 * kFp4Loads<V>],
                                              const uint8_t* rec, typename V::I* dots) {
  const Fp4Planes<V, kPlanes> x(rec);
  for (int64_t c = 0; c < V::kLanes; ++c) {
    Fp4ColumnDots<V, kPlanes>(w[c], x, dots + c * kFp4Loads<V>);
  }
}

// MXFP4 GEMM over the tile t.  One row (decode): each column's block goes
// from memory through the byte table into the dot products in registers;
// 2-4 rows (a verify step, where V::kFewRowPaths) the same, every row's dot
// products fed from those registers.  More rows: the panel's block is
// decoded once into a stack array and every row's dot products read it from
// L1 (on AVX-512, tiles of 8 rows or more take the outer-product kernel of
// gemm_fp4_outer-inl.h instead).  All run the same integer sums and the
// same epilogue, so a row's bits never depend on M.
template <class V>
void Fp4GemmPanels(const Fp4GemmArgs& a, const Tile& t) {
  using I = typename V::I;
  constexpr int64_t kP = V::kLanes;
  constexpr int kL = kFp4Loads<V>;
  const Fp4Weight& w = a.w;
  const int64_t n = w.out, num_kb = w.in / 128;
  alignas(sizeof(I)) I wdec[kP][2 * kL];  // the panel's block, decoded (rows > 4)
  alignas(sizeof(I)) I dots[kP * kL];
  alignas(sizeof(typename V::F)) typename V::F acc[kMTile];
  const auto record = [&](int64_t row, int64_t kb) {
    return a.x + (row * num_kb + kb) * kFp4RecordBytes;
  };
  for (int64_t m0 = t.row_begin; m0 < t.row_end; m0 += kMTile) {
    const int64_t mt = Min(kMTile, t.row_end - m0);
    for (int64_t p = t.panel_begin; p < t.panel_end; ++p) {
      const int64_t n0 = p * kP;
      for (int64_t r = 0; r < mt; ++r) acc[r] = V::Zero();
      for (int64_t kb = 0; kb < num_kb; ++kb) {
        const uint8_t* scales = Fp4ScalesAt(w, n0, kb);
        // The scales are a second, 16 times slower stream: 8 blocks ahead too.
        _mm_prefetch(reinterpret_cast<const char*>(scales + kFp4PrefetchAhead / 16), _MM_HINT_T0);
        const I dwords = V::LoadI(scales);
        typename V::F sw[4];
        Fp4ScalesOf<V>(dwords, V::E8M0Special(dwords), sw);
        const uint8_t* col = Fp4BlockAt(w, n0, kb);
        if (mt == 1) {
          const uint8_t* rec = record(m0, kb);
          I d[kP * kL];
          // The plane count is chosen per block, outside the column loop.
          if (Fp4PlaneCount(rec) == 2) {
            Fp4PanelRowDots<V, 2>(col, rec, d);
          } else {
            Fp4PanelRowDots<V, 3>(col, rec, d);
          }
          acc[0] = Fp4AddBlock<V>(acc[0], d, rec, a.x_scales[m0 * num_kb + kb], sw);
          continue;
        }
        if constexpr (V::kFewRowPaths) {
          if (mt <= 4) {
            if (mt == 2) {
              Fp4FewRowsBlock<V, 2>(a, m0, kb, col, sw, acc);
            } else if (mt == 3) {
              Fp4FewRowsBlock<V, 3>(a, m0, kb, col, sw, acc);
            } else {
              Fp4FewRowsBlock<V, 4>(a, m0, kb, col, sw, acc);
            }
            continue;
          }
        }
        for (int64_t c = 0; c < kP; ++c, col += 64) {
          _mm_prefetch(reinterpret_cast<const char*>(col + kFp4PrefetchAhead), _MM_HINT_T0);
          V::Fp4Weights(col, wdec[c]);
        }
        for (int64_t r = 0; r < mt; ++r) {
          const uint8_t* rec = record(m0 + r, kb);
          if (Fp4PlaneCount(rec) == 2) {
            Fp4RowDots<V, 2>(wdec, rec, dots);
          } else {
            Fp4RowDots<V, 3>(wdec, rec, dots);
          }
          acc[r] = Fp4AddBlock<V>(acc[r], dots, rec, a.x_scales[(m0 + r) * num_kb + kb], sw);
        }
      }
      for (int64_t r = 0; r < mt; ++r) {
        V::StoreBf16(a.y + (m0 + r) * n + n0, acc[r], Min(kP, n - n0));
      }
    }
  }
}

}  // namespace
}  // namespace dsv4::kernels::cpu
