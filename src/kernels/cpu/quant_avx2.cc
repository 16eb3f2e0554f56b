// AVX2 activation quantization and QAT: the AVX-512 algorithms
// (quant_avx512.cc) on 8 lanes.
#include <immintrin.h>

#include "kernels/cpu/quant_cpu.h"
#include "kernels/ref/quant_ref.h"

namespace dsv4::kernels::cpu {
namespace {

[[gnu::always_inline]] inline __m256 LoadBf16x8(const bf16* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// Bit-exact twin of ref::E4M3FromF32 for |v| <= 448 (see quant_avx512.cc).
[[gnu::always_inline]] inline __m256i EncodeE4M3(__m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(bits, 24), _mm256_set1_epi32(0x80));
  const __m256i mag = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(mag, 20), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(mag, _mm256_set1_epi32(0x7ffff)), lsb);
  const __m256i normal =
      _mm256_sub_epi32(_mm256_srli_epi32(rounded, 20), _mm256_set1_epi32(120 << 3));
  const __m256i sub =
      _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_castsi256_ps(mag), _mm256_set1_ps(512.0f)));
  const __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x3c800000), mag);  // mag < 2^-6
  return _mm256_or_si256(_mm256_blendv_epi8(normal, sub, is_sub), sign);
}

[[gnu::always_inline]] inline __m256 AbsMax8(const bf16* x, int64_t n) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 amax = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8)
    amax = _mm256_max_ps(amax, _mm256_and_ps(LoadBf16x8(x + i), abs_mask));
  return amax;
}

[[gnu::always_inline]] inline float HorizontalMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// E4M3ToF32(E4M3FromF32(v)) for |v| <= 448 (see RoundE4M3 in quant_avx512.cc).
[[gnu::always_inline]] inline __m256 RoundE4M3(__m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i sign = _mm256_and_si256(bits, _mm256_set1_epi32(static_cast<int32_t>(0x80000000u)));
  const __m256i mag = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(mag, 20), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(mag, _mm256_set1_epi32(0x7ffff)), lsb);
  const __m256i normal =
      _mm256_and_si256(rounded, _mm256_set1_epi32(static_cast<int32_t>(0xfff00000u)));
  const __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtps_epi32(_mm256_mul_ps(
                                       _mm256_castsi256_ps(mag), _mm256_set1_ps(512.0f)))),
                                   _mm256_set1_ps(1.0f / 512.0f));
  const __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x3c800000), mag);  // mag < 2^-6
  const __m256i r = _mm256_blendv_epi8(normal, _mm256_castps_si256(sub), is_sub);
  return _mm256_castsi256_ps(_mm256_or_si256(r, sign));
}

// E2M1ToF32(E2M1FromF32(v)) for |v| <= 6.
[[gnu::always_inline]] inline __m256 RoundE2M1(__m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i sign = _mm256_and_si256(bits, _mm256_set1_epi32(static_cast<int32_t>(0x80000000u)));
  const __m256i mag = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(mag, 22), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(mag, _mm256_set1_epi32(0x1fffff)), lsb);
  const __m256i normal =
      _mm256_and_si256(rounded, _mm256_set1_epi32(static_cast<int32_t>(0xffc00000u)));
  const __m256 fmag = _mm256_castsi256_ps(mag);
  const __m256 sub = _mm256_mul_ps(
      _mm256_cvtepi32_ps(_mm256_cvtps_epi32(_mm256_add_ps(fmag, fmag))), _mm256_set1_ps(0.5f));
  const __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x3f800000), mag);  // mag < 1
  const __m256i r = _mm256_blendv_epi8(normal, _mm256_castps_si256(sub), is_sub);
  return _mm256_castsi256_ps(_mm256_or_si256(r, sign));
}

// F32ToBf16 on 8 lanes (round to nearest even, NaN stays a quiet NaN).
[[gnu::always_inline]] inline void StoreBf16x8(bf16* p, __m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  r = _mm256_blendv_epi8(r, quiet, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
}

// In-place quantize-dequantize of one block of n (multiple of 8) values:
// bf16(round(clamp(x/s, ±qmax))·s).
template <typename Scale, typename Round>
[[gnu::always_inline]] inline void QatBlock(bf16* x, int64_t n, float qmax, Scale scale_of,
                                            Round round) {
  const float s = scale_of(HorizontalMax(AbsMax8(x, n)));
  const __m256 inv = _mm256_set1_ps(1.0f / s);  // exact: s is a power of two
  const __m256 vs = _mm256_set1_ps(s);
  const __m256 hi = _mm256_set1_ps(qmax);
  const __m256 lo = _mm256_set1_ps(-qmax);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 q = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(LoadBf16x8(x + i), inv), lo), hi);
    StoreBf16x8(x + i, _mm256_mul_ps(round(q), vs));
  }
}

void QuantizeBlock(const bf16* x, int64_t block, uint8_t* codes, float* scale) {
  const float s = ref::Fp8BlockScale(HorizontalMax(AbsMax8(x, block)));
  const __m256 inv = _mm256_set1_ps(1.0f / s);  // exact: s is a power of two
  const __m256 hi = _mm256_set1_ps(448.0f);
  const __m256 lo = _mm256_set1_ps(-448.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t i = 0; i < block; i += 32) {
    __m256i c[4];
    for (int j = 0; j < 4; ++j) {
      const __m256 q = _mm256_mul_ps(LoadBf16x8(x + i + 8 * j), inv);
      c[j] = EncodeE4M3(_mm256_min_ps(_mm256_max_ps(q, lo), hi));
    }
    // packus works per 128-bit lane: the dwords come out as
    // [c0 lo, c1 lo, c2 lo, c3 lo | c0 hi, ...]; the permute restores order.
    const __m256i w01 = _mm256_packus_epi32(c[0], c[1]);
    const __m256i w23 = _mm256_packus_epi32(c[2], c[3]);
    const __m256i b = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(w01, w23), order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + i), b);
  }
  *scale = s;
}

}  // namespace

void ActQuantFp8Avx2(const bf16* x, int64_t rows, int64_t cols, int64_t block, uint8_t* codes,
                     float* scales) {
  const int64_t num_blocks = cols / block;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < num_blocks; ++b) {
      QuantizeBlock(x + r * cols + b * block, block, codes + r * cols + b * block,
                    scales + r * num_blocks + b);
    }
  }
}

void KvQatFp8Avx2(bf16* x, int64_t rows, int64_t cols, int64_t nope) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nope; b += 64) {
      QatBlock(x + r * cols + b, 64, 448.0f, ref::Fp8BlockScale,
               [](__m256 q) { return RoundE4M3(q); });
    }
  }
}

void Fp4QatAvx2(bf16* x, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows * cols; i += 32) {
    QatBlock(x + i, 32, 6.0f, ref::Fp4BlockScale, [](__m256 q) { return RoundE2M1(q); });
  }
}

}  // namespace dsv4::kernels::cpu
