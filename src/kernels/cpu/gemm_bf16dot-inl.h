// BF16 x BF16 -> FP32 with BF16 pair dot-product instructions (the
// approximate MTP draft head, GemmBf16F32Approx), written for any V that has
// them.  Besides the gemm_simd_common-inl.h set, V provides BH (a register of
// 2·kLanes BF16 values), LoadBh (2·kLanes values), LoadBhTail (n < 2·kLanes,
// zero filled) and DotBh (acc + the pairwise products of a and b, per lane,
// with the instruction's own rounding).  Only ISAs with such an instruction
// (V::kBf16Dot) instantiate this family.
#pragma once

#include "kernels/cpu/gemm_simd_common-inl.h"

namespace dsv4::kernels::cpu {
namespace {

// How far ahead of its reads a column's walk prefetches (elements): 8 KiB,
// in the pair layout both columns' chunks there (docs/performance.md "The
// draft head's GEMV: a software prefetch"; 4 and 16 KiB measured worse).
constexpr int64_t kBf16DotAhead = 4096;

// Rows [0, kRows) of x against one column of w: each step adds 2·kLanes
// products to one of two accumulators (alternating steps, summed at the end),
// so a row's chain is fixed whatever M.  The K tail is zero padded.
// wc: the column's first element; `pairs`: w in the BF16 pair layout, where
// the column's 128-element chunks are 256 elements apart (k % 128 == 0, so
// a step of 2·kStep never crosses a chunk).
template <class V, int kRows>
[[gnu::always_inline]] inline void DotColumn(const Bf16DotArgs& a, const bf16* x, const bf16* wc,
                                             bool pairs, typename V::F* out) {
  constexpr int64_t kStep = 2 * V::kLanes;  // BF16 values per instruction
  static_assert(kChunk % (2 * kStep) == 0);
  constexpr int64_t kStepBytes = 2 * kStep * static_cast<int64_t>(sizeof(bf16));  // per step
  typename V::F even[kRows], odd[kRows];
  for (int r = 0; r < kRows; ++r) even[r] = odd[r] = V::Zero();
  int64_t k0 = 0;
  for (; k0 + 2 * kStep <= a.k; k0 += 2 * kStep) {
    const bf16* wk = wc + (pairs ? k0 + (k0 / kChunk) * kChunk : k0);
    Prefetch(wk + kBf16DotAhead, kStepBytes);
    if (pairs) Prefetch(wk + kBf16DotAhead + kChunk, kStepBytes);
    const typename V::BH w0 = V::LoadBh(wk);
    const typename V::BH w1 = V::LoadBh(wk + kStep);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const bf16* xr = x + r * a.k + k0;
      even[r] = V::DotBh(even[r], w0, V::LoadBh(xr));
      odd[r] = V::DotBh(odd[r], w1, V::LoadBh(xr + kStep));
    }
  }
  for (int half = 0; k0 < a.k; k0 += kStep, ++half) {
    const int64_t n = Min(kStep, a.k - k0);
    const typename V::BH w = V::LoadBhTail(wc + k0, n);
    for (int r = 0; r < kRows; ++r) {
      const typename V::BH xv = V::LoadBhTail(x + r * a.k + k0, n);
      if (half == 0) {
        even[r] = V::DotBh(even[r], w, xv);
      } else {
        odd[r] = V::DotBh(odd[r], w, xv);
      }
    }
  }
  for (int r = 0; r < kRows; ++r) out[r] = V::Add(even[r], odd[r]);
}

// Rows [r0, r0 + kRows) of one panel.
template <class V, int kRows>
void DotPanelRows(const Bf16DotArgs& a, int64_t r0, int64_t n0, int64_t nc) {
  constexpr int64_t kP = V::kLanes;
  alignas(sizeof(typename V::F)) typename V::F lanes[kRows][kP];
  for (int r = 0; r < kRows; ++r) {
    for (int64_t c = nc; c < kP; ++c) lanes[r][c] = V::Zero();
  }
  for (int64_t c = 0; c < nc; ++c) {
    // Column by column a panel is one contiguous stream (in pairs: a pair's
    // region twice, the second pass from cache); DotColumn prefetches ahead
    // in it (with the hardware prefetchers alone the MTP forward of `bench`
    // took 11-13 % longer).
    const int64_t n = n0 + c;
    const bf16* wc = a.w_pairs ? a.w + (n >> 1) * 2 * a.k + (n & 1) * kChunk : a.w + n * a.k;
    typename V::F col[kRows];
    DotColumn<V, kRows>(a, a.x + r0 * a.k, wc, a.w_pairs, col);
    for (int r = 0; r < kRows; ++r) lanes[r][c] = col[r];
  }
  for (int r = 0; r < kRows; ++r) {
    V::StoreF32(a.y + (r0 + r) * a.n + n0, V::UnpermuteColumns(V::ReducePanel(lanes[r])), nc);
  }
}

// Rows in groups of up to 4 (each column's weights are read once per group).
template <class V>
void Bf16DotPanels(const Bf16DotArgs& a, const Tile& t) {
  for (int64_t p = t.panel_begin; p < t.panel_end; ++p) {
    const int64_t n0 = p * V::kLanes;
    const int64_t nc = Min(V::kLanes, a.n - n0);
    int64_t r = t.row_begin;
    for (; r + 4 <= t.row_end; r += 4) DotPanelRows<V, 4>(a, r, n0, nc);
    switch (t.row_end - r) {
      case 3:
        DotPanelRows<V, 3>(a, r, n0, nc);
        break;
      case 2:
        DotPanelRows<V, 2>(a, r, n0, nc);
        break;
      case 1:
        DotPanelRows<V, 1>(a, r, n0, nc);
        break;
      default:
        break;
    }
  }
}

}  // namespace
}  // namespace dsv4::kernels::cpu
