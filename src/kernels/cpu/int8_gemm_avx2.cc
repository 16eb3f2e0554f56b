// AVX2 kernel of int8_gemm_cpu.h.
//
// vpmaddubsw multiplies unsigned by signed bytes and adds adjacent pairs into
// INT16: |w| * (sign(w) * a) = w * a (|-128| = 128 fits the unsigned operand;
// activations lie in [-127, 127], so vpsignb cannot overflow).  A pair is at
// most 2 * 128 * 127 = 32,512, so the INT16 saturation never triggers.  vpmaddwd against ones
// widens to INT32.  Columns go in groups of 4 sharing each activation vector; the K tail (< 32) is
// added in scalar code, exactly like the vector part (INT32 sums are order-free).
#include <immintrin.h>

#include "kernels/cpu/int8_gemm_cpu.h"
#include "kernels/ref/int8_gemm_ref.h"

namespace dsv4::kernels::cpu {
namespace {

constexpr int64_t kGroup = 4;

int32_t HorizontalSum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

void DotGroup(const int8_t* x, const int8_t* const* w, int cols, int64_t k,
              const int8_t* prefetch_base, int64_t ld, int32_t* out) {
  __m256i acc[kGroup] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                         _mm256_setzero_si256()};
  const __m256i ones = _mm256_set1_epi16(1);
  const int64_t k32 = k - k % 32;
  for (int64_t i = 0; i < k32; i += 32) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    for (int j = 0; j < kGroup; ++j) {
      if (j >= cols) break;
      if (prefetch_base != nullptr) _mm_prefetch(prefetch_base + j * ld + i, _MM_HINT_T0);
      const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[j] + i));
      const __m256i p16 = _mm256_maddubs_epi16(_mm256_abs_epi8(wv), _mm256_sign_epi8(a, wv));
      acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(p16, ones));
    }
  }
  for (int j = 0; j < cols; ++j) {
    out[j] = HorizontalSum(acc[j]) + ref::Int8Dot(x + k32, w[j] + k32, k - k32);
  }
}

}  // namespace

void Int8GemmAvx2(const Int8GemmArgs& a, int64_t row_begin, int64_t row_end, int64_t col_begin,
                  int64_t col_end) {
  const int64_t k = a.w.in;
  for (int64_t n = col_begin; n < col_end; n += kGroup) {
    const int cols = static_cast<int>(col_end - n < kGroup ? col_end - n : kGroup);
    const int8_t* w[kGroup];
    for (int j = 0; j < cols; ++j) w[j] = a.w.codes + (n + j) * k;
    const bool has_next = n + kGroup + kGroup <= a.w.out;
    const int8_t* next = has_next ? a.w.codes + (n + kGroup) * k : nullptr;
    for (int64_t r = row_begin; r < row_end; ++r) {
      int32_t acc[kGroup];
      DotGroup(a.x + r * k, w, cols, k, r == row_begin ? next : nullptr, k, acc);
      const float sa = a.xs[r];
      for (int j = 0; j < cols; ++j) {
        a.y[r * a.w.out + n + j] = F32ToBf16((static_cast<float>(acc[j]) * sa) * a.w.scales[n + j]);
      }
    }
  }
}

}  // namespace dsv4::kernels::cpu
