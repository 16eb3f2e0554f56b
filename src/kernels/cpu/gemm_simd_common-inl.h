// Pieces shared by the vector-width-generic GEMM bodies (gemm_*-inl.h).
// Included only by the per-ISA translation units (gemm_avx2.cc,
// gemm_avx512.cc), each compiled with its own target flags: everything here
// has internal linkage (anonymous namespace) so every ISA gets its own copy
// and the linker can never hand an AVX-512 copy to AVX2 code.  No std
// templates or external inline functions (tensor/numeric.h) are used.
//
// The traits type V of an ISA provides (docs/kernels.md "Writing a kernel
// once"): F (FP32 register), kLanes (= panel width), the blocking policy
// kXInRegisters / kPairRows / kFewRowPaths, Zero, Set1, Load, Add, Mul, Fma
// (a*b + c fused), LoadBf16 and LoadUpto / LoadBf16Upto (min(n, kLanes)
// values, zero filled),
// DecodeFp8Block, the FP4 integer set (gemm_fp4-inl.h), ReducePanel +
// UnpermuteColumns (the fixed transpose-and-add tree), StoreBf16 (RNE, NaN
// kept quiet) and StoreF32 (the first `count` lanes).  Optional: the BF16
// dot-product set of gemm_bf16dot-inl.h.
#pragma once

#include <immintrin.h>
#include <stdint.h>

#include "kernels/cpu/gemm_cpu.h"

namespace dsv4::kernels::cpu {
namespace {

// Rows per tile: a tile's activation block (64 rows x 128 floats = 32 KB)
// stays in L1/L2 while the panel's decoded weight block is reused.
constexpr int64_t kMTile = 64;
// Dense kernels keep a panel's lane vectors per row between K chunks (32 rows
// of 16 AVX-512 vectors: 32 KB).
constexpr int64_t kDenseMTile = 32;
constexpr int64_t kChunk = 128;  // K elements per decoded weight chunk (= scale block)

// Vectors of one 128-element chunk.
template <class V>
inline constexpr int kVecs = static_cast<int>(kChunk / V::kLanes);

[[gnu::always_inline]] inline int64_t Min(int64_t a, int64_t b) { return a < b ? a : b; }

// Software prefetch of the cache lines of [p, p + bytes).  The GEMV reads a
// panel's weight rows in lock step, a pattern the hardware prefetchers follow
// poorly; fetching the next panel's block while decoding this one made the
// DRAM-bound GEMV about twice as fast.  Prefetches never fault.
[[gnu::always_inline]] inline void Prefetch(const void* p, int64_t bytes) {
  for (int64_t i = 0; i < bytes; i += 64) {
    _mm_prefetch(static_cast<const char*>(p) + i, _MM_HINT_T0);
  }
}

// The same into the L2 only (prefetcht1): for data a few microseconds ahead
// that the L1 could not hold until then (the dense and FP8 FMA tiles' next
// chunk).
[[gnu::always_inline]] inline void PrefetchL2(const void* p, int64_t bytes) {
  for (int64_t i = 0; i < bytes; i += 64) {
    _mm_prefetch(static_cast<const char*>(p) + i, _MM_HINT_T1);
  }
}

// Rows m0..m0 + M (a decode step's one, a K = 1 verify step's two) against
// the panels [begin, end) of a tile as two streams: panel begin + i beside
// panel begin + half + i (an odd last panel alone).  A panel-layout GEMV
// reads its share front to back, and one stream per core left DRAM
// bandwidth unused: a bare read loop on this host's two cores read ~10 %
// more with two streams per thread than with one (~15 % with four, but four
// panels in the FP8 walk streamed 0.88-0.91x of two), and a decode step on
// `bench` streamed 4-6 % (FP4 experts) and 12 % (with the FP8 projections
// too) more bytes per second this way (docs/performance.md
// "Decode GEMVs: two streams per thread").  K (the kernel) supplies
// TwoPanels<M>(m0, pa, pb, acc_a, acc_b), FewRows<M>(m0, p, acc) and
// Store(m0, M, p, acc); each panel's sums are the one-panel walk's, so the
// bits do not change.
template <int M, class K, class Acc>
void RowsTwoStreams(const K& k, int64_t m0, int64_t begin, int64_t end, Acc acc_a, Acc acc_b) {
  const int64_t half = (end - begin) / 2;
  for (int64_t i = 0; i < half; ++i) {
    k.template TwoPanels<M>(m0, begin + i, begin + half + i, acc_a, acc_b);
    k.Store(m0, M, begin + i, acc_a);
    k.Store(m0, M, begin + half + i, acc_b);
  }
  if ((end - begin) % 2 == 1) {
    k.template FewRows<M>(m0, end - 1, acc_a);
    k.Store(m0, M, end - 1, acc_a);
  }
}

// FP32 bits of an E8M0 scale: 2^(byte-127); byte 0 is 2^-127 (subnormal),
// 255 NaN.  A table, so a block scale is one L1 load instead of a
// compare/select chain; same bits as the formula.
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
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

// A row's 128-element activation block, as kVecs<V> vectors: loaded once
// into registers where the ISA has room for it next to the weights
// (V::kXInRegisters), else read from memory (L1) at each use, which costs
// nothing extra when it is an FMA's memory operand (AVX2: 16 registers cannot
// hold 16 activation vectors besides the decoded weights).
template <class V, bool kInRegisters = V::kXInRegisters>
struct XBlock;

template <class V>
struct XBlock<V, true> {
  typename V::F v[kVecs<V>];
  [[gnu::always_inline]] explicit XBlock(const float* p) {
#pragma GCC unroll 16
    for (int i = 0; i < kVecs<V>; ++i) v[i] = V::Load(p + V::kLanes * i);
  }
  [[gnu::always_inline]] typename V::F operator[](int64_t i) const { return v[i]; }
};

template <class V>
struct XBlock<V, false> {
  const float* p;
  [[gnu::always_inline]] explicit XBlock(const float* q) : p(q) {}
  [[gnu::always_inline]] typename V::F operator[](int64_t i) const {
    return V::Load(p + V::kLanes * i);
  }
};

// The per-block lane chain of the block-scaled GEMMs.  Every product is exact
// (e4m3 x e4m3, or e4m3 x scaled e2m1), so FMA equals multiply-then-add.
// Two interleaved chains (even and odd vectors) halve the FMA latency chain.
// x: anything indexable by vector (XBlock, or an array of registers).
template <class V, class X>
[[gnu::always_inline]] inline typename V::F Chain(const typename V::F* w, const X& x) {
  typename V::F even = V::Mul(w[0], x[0]);
  typename V::F odd = V::Mul(w[1], x[1]);
#pragma GCC unroll 16
  for (int i = 2; i < kVecs<V>; i += 2) {
    even = V::Fma(w[i], x[i], even);
    odd = V::Fma(w[i + 1], x[i + 1], odd);
  }
  return V::Add(even, odd);
}

// acc + (block partial sums of the panel)·scale: one block's contribution to
// one row, multiply then add as in the reference.
template <class V>
[[gnu::always_inline]] inline typename V::F AddBlock(typename V::F acc, const typename V::F* lanes,
                                                     float scale) {
  return V::Add(acc, V::Mul(V::ReducePanel(lanes), V::Set1(scale)));
}

// Stores one row's panel result (lanes in ReducePanel's order): the first nc
// columns, as BF16 or FP32.
template <class V>
[[gnu::always_inline]] inline void StorePanel(typename V::F permuted, int64_t nc, bf16* y_bf16,
                                              float* y_f32) {
  const typename V::F out = V::UnpermuteColumns(permuted);
  if (y_bf16 != nullptr) {
    V::StoreBf16(y_bf16, out, nc);
  } else {
    V::StoreF32(y_f32, out, nc);
  }
}

}  // namespace
}  // namespace dsv4::kernels::cpu
