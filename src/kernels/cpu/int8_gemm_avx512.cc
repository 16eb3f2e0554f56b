// AVX-512 VNNI kernel of int8_gemm_cpu.h.
//
// vpdpbusd multiplies unsigned by signed bytes, so the activation is offset
// to unsigned: a + 128 = a XOR 0x80, and sum (a + 128) w = sum a w + 128 sum w.
// sum w comes from the same instruction against a vector of ones, computed
// once per weight vector and shared by every row of the tile, so a 4 x 4
// (rows x columns) tile costs 16 vpdpbusd + 4 for the sums per 64-byte step.
// All sums are exact INT32 (|a + 128| <= 255, |w| <= 128; the per-row total
// stays below 2^31 for K <= 65,536, checked by the driver), and any int8
// weight, -128 included, is exact.  The next column group's weight lines are
// prefetched while the first row tile streams this one (the GEMV is DRAM
// bound).
//
// GCC 12's AVX-512 headers initialise "undefined" vectors from themselves,
// which -Wuninitialized reports inside the intrinsics (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/int8_gemm_cpu.h"

namespace dsv4::kernels::cpu {
namespace {

constexpr int64_t kGroup = 4;  // output columns computed together
constexpr int kRows = 4;       // activation rows computed together

// Local copy of F32ToBf16 (round to nearest even, NaN stays quiet): an inline
// function from a shared header must not be instantiated in this TU.
uint16_t ToBf16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

[[gnu::always_inline]] inline __mmask64 TailMask(int64_t count) {
  return count >= 64 ? ~__mmask64{0} : (__mmask64{1} << count) - 1;
}

// Exact dot products of R activation rows (row stride k) with kGroup weight
// rows (absent columns are zero rows).  out[r][j].
template <int R>
[[gnu::always_inline]] inline void DotTile(const int8_t* x, const int8_t* const* w, int64_t k,
                                           const int8_t* prefetch_base, int32_t (*out)[kGroup]) {
  __m512i acc[R][kGroup];
  __m512i sum[kGroup];
  for (int j = 0; j < kGroup; ++j) {
    sum[j] = _mm512_setzero_si512();
    for (int r = 0; r < R; ++r) acc[r][j] = _mm512_setzero_si512();
  }
  const __m512i ones = _mm512_set1_epi8(1);
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t i = 0; i < k; i += 64) {
    const __mmask64 tail = TailMask(k - i);
    __m512i wv[kGroup];
    for (int j = 0; j < kGroup; ++j) {
      if (prefetch_base != nullptr) _mm_prefetch(prefetch_base + j * k + i, _MM_HINT_T0);
      wv[j] = w[j] != nullptr ? _mm512_maskz_loadu_epi8(tail, w[j] + i) : _mm512_setzero_si512();
      sum[j] = _mm512_dpbusd_epi32(sum[j], ones, wv[j]);
    }
    for (int r = 0; r < R; ++r) {
      // Tail lanes load 0 and become 128, against zero weights.
      const __m512i a = _mm512_xor_si512(_mm512_maskz_loadu_epi8(tail, x + r * k + i), bias);
      for (int j = 0; j < kGroup; ++j) acc[r][j] = _mm512_dpbusd_epi32(acc[r][j], a, wv[j]);
    }
  }
  for (int j = 0; j < kGroup; ++j) {
    const int32_t offset = 128 * _mm512_reduce_add_epi32(sum[j]);
    for (int r = 0; r < R; ++r) out[r][j] = _mm512_reduce_add_epi32(acc[r][j]) - offset;
  }
}

}  // namespace

void Int8GemmAvx512Vnni(const Int8GemmArgs& a, int64_t row_begin, int64_t row_end,
                        int64_t col_begin, int64_t col_end) {
  const int64_t k = a.w.in;
  for (int64_t n = col_begin; n < col_end; n += kGroup) {
    const int cols = static_cast<int>(col_end - n < kGroup ? col_end - n : kGroup);
    const int8_t* w[kGroup] = {nullptr, nullptr, nullptr, nullptr};
    for (int j = 0; j < cols; ++j) w[j] = a.w.codes + (n + j) * k;
    // Prefetch the next group while streaming this one (first row tile only).
    const bool has_next = n + kGroup + kGroup <= a.w.out;
    const int8_t* next = has_next ? a.w.codes + (n + kGroup) * k : nullptr;
    for (int64_t r = row_begin; r < row_end; r += kRows) {
      int32_t acc[kRows][kGroup];
      const int8_t* x = a.x + r * k;
      const int8_t* pf = r == row_begin ? next : nullptr;
      switch (row_end - r) {
        case 1:
          DotTile<1>(x, w, k, pf, acc);
          break;
        case 2:
          DotTile<2>(x, w, k, pf, acc);
          break;
        case 3:
          DotTile<3>(x, w, k, pf, acc);
          break;
        default:
          DotTile<kRows>(x, w, k, pf, acc);
          break;
      }
      const int64_t rows = row_end - r < kRows ? row_end - r : kRows;
      for (int64_t i = 0; i < rows; ++i) {
        const float sa = a.xs[r + i];
        for (int j = 0; j < cols; ++j) {
          const float v = (static_cast<float>(acc[i][j]) * sa) * a.w.scales[n + j];
          a.y[(r + i) * a.w.out + n + j].bits = ToBf16Bits(v);
        }
      }
    }
  }
}

}  // namespace dsv4::kernels::cpu
