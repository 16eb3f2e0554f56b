// AVX-512 VNNI kernel of int8_gemm_cpu.h.
//
// vpdpbusd multiplies unsigned by signed bytes, so the signed weight is split
// into |w| (unsigned; |-128| = 128 still fits) and its sign, which is moved
// onto the activation: |w| * (sign(w) * a) = w * a.  Activation codes lie in
// [-127, 127] (ActQuantInt8PerToken clamps), so negating them cannot
// overflow, and a weight of -128 (which other compressed-tensors producers
// emit) is still exact.  Four products of at most 128 * 127 fit the INT32
// lane with room to spare.  Groups of 4 output
// columns share each activation vector; the next group's weight lines are
// prefetched while the current group is computed (the GEMV is DRAM bound).
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

// Exact dot products of one activation row with `cols` (<= 4) weight rows.
[[gnu::always_inline]] inline void DotGroup(const int8_t* x, const int8_t* const* w, int cols,
                                            int64_t k, const int8_t* prefetch_base, int64_t ld,
                                            int32_t* out) {
  __m512i acc[kGroup] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                         _mm512_setzero_si512()};
  const __m512i zero = _mm512_setzero_si512();
  for (int64_t i = 0; i < k; i += 64) {
    const __mmask64 tail = TailMask(k - i);
    const __m512i a = _mm512_maskz_loadu_epi8(tail, x + i);
    const __m512i a_neg = _mm512_sub_epi8(zero, a);
    for (int j = 0; j < kGroup; ++j) {
      if (j >= cols) break;
      if (prefetch_base != nullptr) _mm_prefetch(prefetch_base + j * ld + i, _MM_HINT_T0);
      const __m512i wv = _mm512_maskz_loadu_epi8(tail, w[j] + i);
      const __m512i a_signed = _mm512_mask_mov_epi8(a, _mm512_movepi8_mask(wv), a_neg);
      acc[j] = _mm512_dpbusd_epi32(acc[j], _mm512_abs_epi8(wv), a_signed);
    }
  }
  for (int j = 0; j < cols; ++j) out[j] = _mm512_reduce_add_epi32(acc[j]);
}

}  // namespace

void Int8GemmAvx512Vnni(const Int8GemmArgs& a, int64_t row_begin, int64_t row_end,
                        int64_t col_begin, int64_t col_end) {
  const int64_t k = a.w.in;
  for (int64_t n = col_begin; n < col_end; n += kGroup) {
    const int cols = static_cast<int>(col_end - n < kGroup ? col_end - n : kGroup);
    const int8_t* w[kGroup];
    for (int j = 0; j < cols; ++j) w[j] = a.w.codes + (n + j) * k;
    // Prefetch the next group while streaming this one (once, on the first row).
    const bool has_next = n + kGroup + kGroup <= a.w.out;
    const int8_t* next = has_next ? a.w.codes + (n + kGroup) * k : nullptr;
    for (int64_t r = row_begin; r < row_end; ++r) {
      int32_t acc[kGroup];
      DotGroup(a.x + r * k, w, cols, k, r == row_begin ? next : nullptr, k, acc);
      const float sa = a.xs[r];
      for (int j = 0; j < cols; ++j) {
        const float v = (static_cast<float>(acc[j]) * sa) * a.w.scales[n + j];
        a.y[r * a.w.out + n + j].bits = ToBf16Bits(v);
      }
    }
  }
}

}  // namespace dsv4::kernels::cpu
