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
// Horner's rule (two shifts by 8).  The sums stay far inside int32:
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

// One row's block record (gemm_cpu.h): its planes, read as vectors either
// from registers (V::kXInRegisters: the one-row path reuses them for every
// column) or from memory at each use (dot products take memory operands).
template <class V, bool kInRegisters = V::kXInRegisters>
struct Fp4Planes;

template <class V>
struct Fp4Planes<V, true> {
  typename V::I v[3][2 * kFp4Loads<V>];
  [[gnu::always_inline]] explicit Fp4Planes(const uint8_t* rec) {
#pragma GCC unroll 4
    for (int p = 0; p < 3; ++p) {
#pragma GCC unroll 4
      for (int i = 0; i < 2 * kFp4Loads<V>; ++i)
        v[p][i] = V::LoadI(rec + 128 * p + 4 * V::kLanes * i);
    }
  }
  // Plane p of half h (2·load + 0 even, + 1 odd).
  [[gnu::always_inline]] typename V::I operator()(int p, int h) const { return v[p][h]; }
};

template <class V>
struct Fp4Planes<V, false> {
  const uint8_t* rec;
  [[gnu::always_inline]] explicit Fp4Planes(const uint8_t* r) : rec(r) {}
  [[gnu::always_inline]] typename V::I operator()(int p, int h) const {
    return V::LoadI(rec + 128 * p + 4 * V::kLanes * h);
  }
};

// One column's 128-block (decoded weight bytes w[2·load + 0/1]: even / odd
// elements) against one row's planes: per load, int32 lanes holding
// Σ a·u over 4 elements each.
template <class V, class X>
[[gnu::always_inline]] inline void Fp4ColumnDots(const typename V::I* w, const X& x,
                                                 typename V::I* out) {
#pragma GCC unroll 4
  for (int i = 0; i < kFp4Loads<V>; ++i) {
    const typename V::I we = w[2 * i], wo = w[2 * i + 1];
    typename V::I s = V::DotU8S8(V::ZeroI(), we, x(2, 2 * i));
    s = V::DotU8S8(s, wo, x(2, 2 * i + 1));
    s = V::Shl8(s);
    s = V::DotU8S8(s, we, x(1, 2 * i));
    s = V::DotU8S8(s, wo, x(1, 2 * i + 1));
    s = V::Shl8(s);
    s = V::DotU8S8(s, we, x(0, 2 * i));
    out[i] = V::DotU8S8(s, wo, x(0, 2 * i + 1));
  }
}

// The panel's four 32-block weight scales (E8M0 bytes at scales + c·stride
// + j for column c < nc) as FP32 vectors, lanes = columns.
template <class V>
[[gnu::always_inline]] inline void Fp4PanelScales(const uint8_t* scales, int64_t stride, int64_t nc,
                                                  typename V::F* sw) {
  const typename V::I dwords = V::GatherDwords(scales, stride, nc);
  if (V::E8M0Special(dwords)) {  // a scale byte 0 or 255 (or a partial panel's zero lanes)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) sw[j] = V::template E8M0Bytes<true>(dwords, j);
    return;
  }
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) sw[j] = V::template E8M0Bytes<false>(dwords, j);
}

// acc + Σ_j (part_j·sa)·sw_j for the 4 32-blocks in order, part_j = fp32
// (exact sum)·2^-10 (a carries 2^9, u = 2·e2m1 + 12 carries 2): the
// reference's expression.  dots: the panel's per-column dot vectors
// ([kLanes][kFp4Loads], zero beyond the panel's columns).
template <class V>
[[gnu::always_inline]] inline typename V::F Fp4AddBlock(typename V::F acc,
                                                        const typename V::I* dots,
                                                        const uint8_t* rec, float sa,
                                                        const typename V::F* sw) {
  typename V::I sums[4];
  V::Fp4SubBlockSums(dots, sums);
  int32_t offset[4], nan;
  __builtin_memcpy(offset, rec + kFp4OffsetAt, sizeof offset);
  __builtin_memcpy(&nan, rec + kFp4NanAt, sizeof nan);
  if (nan != 0) sa = __builtin_nanf("");
  const typename V::F vsa = V::Set1(sa), unit = V::Set1(0x1p-10f);
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const typename V::F part = V::Mul(V::CvtI(V::SubI(sums[j], offset[j])), unit);
    acc = V::Add(acc, V::Mul(V::Mul(part, vsa), sw[j]));
  }
  return acc;
}

// MXFP4 GEMM over the tile t.  One row (decode): each column's block goes
// from memory through the byte table into the dot products in registers.
// More rows: the panel's block is decoded once into a stack array and every
// row's dot products read it from L1.  Both run the same integer sums and
// the same epilogue, so a row's bits never depend on M.
template <class V>
void Fp4GemmPanels(const Fp4GemmArgs& a, const Tile& t) {
  using I = typename V::I;
  constexpr int64_t kP = V::kLanes;
  constexpr int kL = kFp4Loads<V>;
  const Fp4Weight& w = a.w;
  const int64_t n = w.out, num_kb = w.in / 128, stride = w.in / 32, row_bytes = w.in / 2;
  alignas(sizeof(I)) I wdec[kP][2 * kL];  // the panel's block, decoded (rows > 1)
  alignas(sizeof(I)) I dots[kP * kL];
  alignas(sizeof(typename V::F)) typename V::F acc[kMTile];
  const auto record = [&](int64_t row, int64_t kb) {
    return a.x + (row * num_kb + kb) * kFp4RecordBytes;
  };
  const auto decode = [&](int64_t col, int64_t kb, I* out) {
    const uint8_t* packed = w.packed + col * row_bytes + kb * 64;
    if (col + kP < n) {
      Prefetch(packed + kP * row_bytes, 64);
      // A column's scales are in/32 contiguous bytes: fetch the next
      // panel's 64 of them once per 16 blocks, not 4 bytes per block.
      if (kb % 16 == 0) Prefetch(w.scales + (col + kP) * stride + kb * 4, 64);
    }
    V::Fp4Weights(packed, out);
  };
  for (int64_t m0 = t.row_begin; m0 < t.row_end; m0 += kMTile) {
    const int64_t mt = Min(kMTile, t.row_end - m0);
    for (int64_t p = t.panel_begin; p < t.panel_end; ++p) {
      const int64_t n0 = p * kP;
      const int64_t nc = Min(kP, n - n0);
      for (int64_t r = 0; r < mt; ++r) acc[r] = V::Zero();
      for (int64_t i = nc * kL; i < kP * kL; ++i) dots[i] = V::ZeroI();
      for (int64_t kb = 0; kb < num_kb; ++kb) {
        typename V::F sw[4];
        Fp4PanelScales<V>(w.scales + n0 * stride + kb * 4, stride, nc, sw);
        if (mt == 1) {
          const uint8_t* rec = record(m0, kb);
          const float sa = a.x_scales[m0 * num_kb + kb];
          const Fp4Planes<V> x(rec);
          if (nc == kP) {
            // Whole panel: constant indices keep the dot vectors in
            // registers, and one running pointer and one prefetch test per
            // block keep the per-column scalar work small.
            const bool next = n0 + 2 * kP <= n;  // a whole next panel to prefetch
            if (next && kb % 16 == 0) {
              for (int64_t c = 0; c < kP; ++c)
                Prefetch(w.scales + (n0 + kP + c) * stride + kb * 4, 64);
            }
            const uint8_t* col = w.packed + n0 * row_bytes + kb * 64;
            const int64_t ahead = kP * row_bytes;
            I d[kP * kL];
#pragma GCC unroll 16
            for (int c = 0; c < kP; ++c, col += row_bytes) {
              if (next) _mm_prefetch(reinterpret_cast<const char*>(col + ahead), _MM_HINT_T0);
              I wv[2 * kL];
              V::Fp4Weights(col, wv);
              Fp4ColumnDots<V>(wv, x, d + c * kL);
            }
            acc[0] = Fp4AddBlock<V>(acc[0], d, rec, sa, sw);
            continue;
          }
          for (int64_t c = 0; c < nc; ++c) {
            I wv[2 * kL];
            decode(n0 + c, kb, wv);
            Fp4ColumnDots<V>(wv, x, dots + c * kL);
          }
          acc[0] = Fp4AddBlock<V>(acc[0], dots, rec, sa, sw);
          continue;
        }
        for (int64_t c = 0; c < nc; ++c) decode(n0 + c, kb, wdec[c]);
        for (int64_t r = 0; r < mt; ++r) {
          const uint8_t* rec = record(m0 + r, kb);
          const Fp4Planes<V> x(rec);
          for (int64_t c = 0; c < nc; ++c) Fp4ColumnDots<V>(wdec[c], x, dots + c * kL);
          acc[r] = Fp4AddBlock<V>(acc[r], dots, rec, a.x_scales[(m0 + r) * num_kb + kb], sw);
        }
      }
      for (int64_t r = 0; r < mt; ++r) V::StoreBf16(a.y + (m0 + r) * n + n0, acc[r], nc);
    }
  }
}

}  // namespace
}  // namespace dsv4::kernels::cpu
