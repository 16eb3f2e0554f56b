// The FP8 block-scaled GEMM with BF16 pair dot products (AVX512-BF16 and
// AVX512-VBMI; gemm.cc picks it through GemmKernels::fp8_bf16dot).  Included
// only by gemm_avx512_vbmi.cc.
//
// Every e4m3 value is exact in BF16 (3 mantissa bits of 7; the subnormal
// codes m·2^-9 are normal BF16 numbers), so a weight code becomes its BF16
// value through two 128-entry byte tables (vpermi2b: high and low byte of the
// BF16, the sign merged from the code), and the activation codes are decoded
// once per call by gemm.cc into the same values.  vdpbf16ps then adds, per
// FP32 lane, the product of a pair's odd elements and then the product of its
// even elements to the accumulator (each addition rounded to nearest even;
// inputs and outputs below 2^-126 would be flushed, but every product is an
// exact multiple of 2^-18, so no input, product or sum is subnormal).  The
// chain per column and 128-block: two accumulators over the block's four
// 32-element vectors (0 and 2, 1 and 3), added, then the panel's fixed
// reduction tree; the block sums are scaled and added as in the FMA kernel.
// Every path (one row, 2..4 rows, tiles) runs that chain, so the results are
// batch invariant; they differ from the FMA kernel's only in the order of the
// block's FP32 additions (docs/kernels.md "FP8 with BF16 dot products").
// The same kernel runs the BF16-numerics FP8 weight (wo_a, GemmBf16Fp8) on
// its unquantized BF16 activations with activation scales 1: the products
// are exact there too, but a product below 2^-126 (a tiny activation times
// a small weight) is flushed to zero, a difference under 2^-126 each.
#pragma once

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

constexpr int kDotVecs = 4;  // BF16 vectors (32 values) per 128-block
// The one-row walk prefetches the same block 4 columns on (two column pairs
// ahead: 2 to 16 KB of reads ahead at the model's shapes).  Only coarsely
// tuned: 2, 4, 8 and 16 measured within this machine's noise of each other.
constexpr int64_t kGemvAhead = 4;
using Bh = __m512bh;

// 64 codes -> 2 vectors of their BF16 values in dot order: vector 0 holds
// codes 16L + j (L = 128-bit chunk, j < 8) and vector 1 codes 16L + 8 + j
// (byte unpacking works within chunks).  gemm.cc decodes the activations in
// the same order (Fp8DotPosition in gemm_cpu.h).
[[gnu::always_inline]] inline void DecodeFp8Dot64(__m512i v, const Fp8DotTables& t, Bh* w) {
  // Opaque to the compiler, so it copies v between the permutes (which
  // overwrite their index register) instead of loading it three times:
  // measured faster on the one-row walk.
  asm("" : "+v"(v));
  __m512i hi = _mm512_permutex2var_epi8(t.hi0, v, t.hi1);  // index bit 7 ignored
  hi = _mm512_ternarylogic_epi32(hi, v, _mm512_set1_epi8(static_cast<char>(0x80)),
                                 0xf8);  // hi | (v & 0x80)
  const __m512i lo = _mm512_permutex2var_epi8(t.lo0, v, t.lo1);
  w[0] = reinterpret_cast<Bh>(_mm512_unpacklo_epi8(lo, hi));
  w[1] = reinterpret_cast<Bh>(_mm512_unpackhi_epi8(lo, hi));
}

// 128 codes -> 4 vectors (two of DecodeFp8Dot64).
[[gnu::always_inline]] inline void DecodeFp8Dot(const uint8_t* p, const Fp8DotTables& t, Bh* w) {
  DecodeFp8Dot64(_mm512_loadu_si512(p), t, w);
  DecodeFp8Dot64(_mm512_loadu_si512(p + 64), t, w + 2);
}

// Bytes 0..63 + `shift` of the 128 bytes (a, b) as vpermt2b indices.
struct ShiftIndex {
  alignas(64) uint8_t iota[64];
  constexpr ShiftIndex() : iota() {
    for (int i = 0; i < 64; ++i) iota[i] = static_cast<uint8_t>(i);
  }
};
constexpr ShiftIndex kShiftIndex;

// A row's 128-block of decoded activations (gemm.cc's dot order).
struct XDot {
  Bh v[kDotVecs];
  [[gnu::always_inline]] explicit XDot(const bf16* p) {
#pragma GCC unroll 4
    for (int i = 0; i < kDotVecs; ++i) v[i] = GemmAvx512::LoadBh(p + 32 * i);
  }
};

// One column's chain over one 128-block.
[[gnu::always_inline]] inline __m512 DotChain(const Bh* w, const Bh* x) {
  const __m512 zero = _mm512_setzero_ps();
  __m512 even = _mm512_dpbf16_ps(zero, w[0], x[0]);
  __m512 odd = _mm512_dpbf16_ps(zero, w[1], x[1]);
  even = _mm512_dpbf16_ps(even, w[2], x[2]);
  odd = _mm512_dpbf16_ps(odd, w[3], x[3]);
  return _mm512_add_ps(even, odd);
}

using V512 = GemmAvx512;
constexpr int64_t kDotP = V512::kLanes;

struct Fp8DotGemm {
  const Fp8GemmArgs& a;
  const Fp8DotTables t;
  const int64_t num_kb;
  const int64_t ld_scale;
  // How far every weight row starts past a 64-byte boundary (rows are a
  // multiple of 128 bytes long, so all share the tensor's offset), the
  // shifted reads' vpermt2b indices, and the tensor's bytes.
  const int64_t shift;
  const __m512i shift_index;
  const uint8_t* const lo;
  const uint8_t* const hi;

  explicit Fp8DotGemm(const Fp8GemmArgs& args)
      : a(args),
        num_kb(args.w.in / 128),
        ld_scale((args.w.in + 127) / 128),
        shift(static_cast<int64_t>(reinterpret_cast<uintptr_t>(args.w.codes) & 63)),
        shift_index(_mm512_add_epi8(_mm512_load_si512(kShiftIndex.iota),
                                    _mm512_set1_epi8(static_cast<char>(shift)))),
        lo(args.w.codes),
        hi(args.w.codes + args.w.out * args.w.in) {}

  // One column's consecutive blocks read through aligned 64-byte lines (the
  // one-row walk).  When rows are not 64-byte aligned, as the checkpoint's
  // tensors usually are not, each 128-byte block spans three lines and every
  // unaligned 64-byte load would split across two; the line two blocks share
  // is loaded once and vpermt2b shifts the bytes into place.  Aligned rows
  // (shift 0) take the same walk: it decoded `bench`'s aligned copy 1.1x
  // faster than two plain loads per block (docs/performance.md "FP8 one-row
  // walk on aligned weights").
  struct ShiftedColumn {
    const uint8_t* next;  // the aligned line after `prev`
    __m512i prev;
  };
  // The 64 bytes at aligned l that lie in the tensor (masked at its ends, so
  // nothing outside it is read).
  [[gnu::always_inline]] __m512i LoadLine(const uint8_t* l) const {
    if (l >= lo && l + 64 <= hi) return _mm512_load_si512(l);
    const int64_t from = l < lo ? lo - l : 0, to = hi - l < 64 ? hi - l : 64;
    const uint64_t upto = to >= 64 ? ~uint64_t{0} : (uint64_t{1} << to) - 1;
    return _mm512_maskz_loadu_epi8(upto & ~((uint64_t{1} << from) - 1), l);
  }
  [[gnu::always_inline]] ShiftedColumn StartColumn(int64_t col, int64_t kb) const {
    const uint8_t* line = a.w.codes + col * a.w.in + kb * 128 - shift;
    return {line + 64, LoadLine(line)};
  }
  [[gnu::always_inline]] void DecodeShifted(ShiftedColumn* s, int64_t col, Bh* out) const {
    if (col + kGemvAhead < a.w.out) Prefetch(s->next + kGemvAhead * a.w.in, 128);
    const __m512i l1 = LoadLine(s->next), l2 = LoadLine(s->next + 64);
    DecodeFp8Dot64(_mm512_permutex2var_epi8(s->prev, shift_index, l1), t, out);
    DecodeFp8Dot64(_mm512_permutex2var_epi8(l1, shift_index, l2), t, out + 2);
    s->prev = l2;
    s->next += 128;
  }

  // Decodes column col's block kb, prefetching the same block of the next
  // panel (read soon after by the block walks).
  [[gnu::always_inline]] void Decode(int64_t col, int64_t kb, Bh* out) const {
    const uint8_t* p = a.w.codes + col * a.w.in + kb * 128;
    if (col + kDotP < a.w.out) Prefetch(p + kDotP * a.w.in, 128);
    DecodeFp8Dot(p, t, out);
  }
  [[gnu::always_inline]] float PanelScale(int64_t n0, int64_t kb) const {
    return E8M0Value(a.w.scales[(n0 / 128) * ld_scale + kb]);
  }
  const bf16* X(int64_t row, int64_t kb) const { return a.xh + row * a.w.in + kb * 128; }
  float XScale(int64_t row, int64_t kb) const { return a.x_scales[row * num_kb + kb]; }

  // Rows m0..m0 + M (1..4: a decode GEMV, a verify step's few rows) against
  // one panel, column by column over stretches of kGemvBlocks / M blocks (the
  // FMA kernel's StretchPanel walk: each column's weights as one contiguous
  // read), the column pairs read through ShiftedColumn and each decoded block
  // fed to every row.  Walking the panel block by block instead keeps 16
  // rows `in` bytes apart in flight, which made a 2-row wo_b step 1.7x a
  // 1-row one (docs/performance.md "FP8 few-row walk").  Same chains, same
  // reduction tree, same order of the block sums per row as TileBlock: the
  // same bits.  The stretch's lane vectors are M·kGemvBlocks/M·16 (32 KB).
  template <int M>
  void StretchPanel(int64_t m0, int64_t n0, int64_t nc, __m512* acc) const {
    constexpr int64_t kBlocks = kGemvBlocks / M;
    alignas(64) __m512 lanes[M][kBlocks][kDotP];
    for (int r = 0; r < M; ++r) acc[r] = V512::Zero();
    for (int64_t kb0 = 0; kb0 < num_kb; kb0 += kBlocks) {
      const int64_t nb = Min(kBlocks, num_kb - kb0);
      int64_t c = 0;
      for (; c + 2 <= nc; c += 2) {
        ShiftedColumn sa = StartColumn(n0 + c, kb0), sb = StartColumn(n0 + c + 1, kb0);
        for (int64_t b = 0; b < nb; ++b) {
          Bh wa[kDotVecs], wb[kDotVecs];
          DecodeShifted(&sa, n0 + c, wa);
          DecodeShifted(&sb, n0 + c + 1, wb);
#pragma GCC unroll 4
          for (int r = 0; r < M; ++r) {
            const XDot x(X(m0 + r, kb0 + b));
            lanes[r][b][c] = DotChain(wa, x.v);
            lanes[r][b][c + 1] = DotChain(wb, x.v);
          }
        }
      }
      if (c < nc) {
        for (int64_t b = 0; b < nb; ++b) {
          Bh wa[kDotVecs];
          Decode(n0 + c, kb0 + b, wa);
#pragma GCC unroll 4
          for (int r = 0; r < M; ++r) lanes[r][b][c] = DotChain(wa, XDot(X(m0 + r, kb0 + b)).v);
        }
      }
      for (int64_t b = 0; b < nb; ++b) {
        const float sw = PanelScale(n0, kb0 + b);
#pragma GCC unroll 4
        for (int r = 0; r < M; ++r) {
          for (int64_t z = nc; z < kDotP; ++z) lanes[r][b][z] = V512::Zero();
          acc[r] = AddBlock<V512>(acc[r], lanes[r][b], XScale(m0 + r, kb0 + b) * sw);
        }
      }
    }
  }

  // Rows [m0, m0 + mt) against one panel block decoded once into wdec (L1),
  // two rows sharing each weight load.
  void TileBlock(const Bh (*wdec)[kDotVecs], int64_t m0, int64_t mt, int64_t n0, int64_t kb,
                 int64_t nc, __m512* acc) const {
    __m512 lanes[kDotP], lanes2[kDotP];
#pragma GCC unroll 16
    for (int c = 0; c < kDotP; ++c) lanes[c] = lanes2[c] = V512::Zero();
    const float sw = PanelScale(n0, kb);
    int64_t r = 0;
    for (; r + 2 <= mt; r += 2) {
      const XDot xa(X(m0 + r, kb)), xb(X(m0 + r + 1, kb));
      for (int64_t c = 0; c < nc; ++c) {
        lanes[c] = DotChain(wdec[c], xa.v);
        lanes2[c] = DotChain(wdec[c], xb.v);
      }
      acc[r] = AddBlock<V512>(acc[r], lanes, XScale(m0 + r, kb) * sw);
      acc[r + 1] = AddBlock<V512>(acc[r + 1], lanes2, XScale(m0 + r + 1, kb) * sw);
    }
    for (; r < mt; ++r) {
      const XDot xa(X(m0 + r, kb));
      for (int64_t c = 0; c < nc; ++c) lanes[c] = DotChain(wdec[c], xa.v);
      acc[r] = AddBlock<V512>(acc[r], lanes, XScale(m0 + r, kb) * sw);
    }
  }

  void Run(const Tile& tile) const {
    alignas(64) Bh wdec[kDotP][kDotVecs];
    alignas(64) __m512 acc[kMTile];
    const int64_t n = a.w.out;
    for (int64_t m0 = tile.row_begin; m0 < tile.row_end; m0 += kMTile) {
      const int64_t mt = Min(kMTile, tile.row_end - m0);
      for (int64_t p = tile.panel_begin; p < tile.panel_end; ++p) {
        const int64_t n0 = p * kDotP;
        const int64_t nc = Min(kDotP, n - n0);
        if (mt == 1) StretchPanel<1>(m0, n0, nc, acc);
        if (mt == 2) StretchPanel<2>(m0, n0, nc, acc);
        if (mt == 3) StretchPanel<3>(m0, n0, nc, acc);
        if (mt == 4) StretchPanel<4>(m0, n0, nc, acc);
        if (mt > 4) {
          for (int64_t r = 0; r < mt; ++r) acc[r] = V512::Zero();
          for (int64_t kb = 0; kb < num_kb; ++kb) {
            for (int64_t c = 0; c < nc; ++c) Decode(n0 + c, kb, wdec[c]);
            TileBlock(wdec, m0, mt, n0, kb, nc, acc);
          }
        }
        for (int64_t r = 0; r < mt; ++r) {
          V512::StoreBf16(a.y + (m0 + r) * YStride(a) + n0, V512::UnpermuteColumns(acc[r]), nc);
        }
      }
    }
  }
};

}  // namespace
}  // namespace dsv4::kernels::cpu
