// The FP4 GEMM's activation records (gemm_cpu.h, Fp4GemmArgs) with AVX-512:
// the scalar builder's integers (gemm.cc, BuildFp4RecordsScalar), 16 codes
// per vector instead of one, for the records every FP4 GEMM call builds
// before its dispatch (a decode step's down projections: 7 rows of 2,048
// codes; a prefill's: tokens x top-k rows).  Compiled with AVX-512 flags.
#include <cstring>

#include "kernels/cpu/avx512_intrinsics.h"
#include "kernels/cpu/gemm_cpu.h"

namespace dsv4::kernels::cpu {
namespace {

// 16 e4m3 codes (zero-extended to int32 lanes) -> their values ·2^9 as
// integers: (8 + m) << (e - 1) for exponent e >= 1, m for e = 0, negated
// for a set sign; the NaN codes (0x7f, 0xff) -> 0, their lanes in *nan.
__m512i E4M3Ints(__m512i c, __mmask16* nan) {
  const __m512i seven = _mm512_set1_epi32(7);
  const __m512i m = _mm512_and_si512(c, seven);
  const __m512i e = _mm512_and_si512(_mm512_srli_epi32(c, 3), _mm512_set1_epi32(15));
  const __m512i normal =
      _mm512_sllv_epi32(_mm512_add_epi32(m, _mm512_set1_epi32(8)),
                        _mm512_sub_epi32(e, _mm512_set1_epi32(1)));  // e = 0: count 2^32-1 -> 0
  const __mmask16 subnormal = _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512());
  __m512i mag = _mm512_mask_mov_epi32(normal, subnormal, m);
  *nan = _mm512_cmpeq_epi32_mask(_mm512_and_si512(c, _mm512_set1_epi32(0x7f)),
                                 _mm512_set1_epi32(0x7f));
  mag = _mm512_maskz_mov_epi32(static_cast<__mmask16>(~*nan), mag);
  const __mmask16 negative = _mm512_test_epi32_mask(c, _mm512_set1_epi32(0x80));
  return _mm512_mask_sub_epi32(mag, negative, _mm512_setzero_si512(), mag);
}

// The low byte of every lane of v, 16 bytes at p.
void StoreLowBytes(int8_t* p, __m512i v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(v));
}

// The three planes of 16 values a = p0 + 2^8·p1 + 2^16·p2 (p0, p1 signed
// bytes) at record positions at..at + 15: p0 is a's low byte, r1 = (a - p0)
// >> 8 exactly, p1 r1's low byte and p2 = (r1 - p1) >> 8.
void StorePlanes(int8_t* planes, int64_t at, __m512i a) {
  const __m512i p0 = _mm512_srai_epi32(_mm512_slli_epi32(a, 24), 24);
  const __m512i r1 = _mm512_srai_epi32(_mm512_sub_epi32(a, p0), 8);
  const __m512i p1 = _mm512_srai_epi32(_mm512_slli_epi32(r1, 24), 24);
  StoreLowBytes(planes + at, a);
  StoreLowBytes(planes + 128 + at, r1);
  StoreLowBytes(planes + 256 + at, _mm512_srai_epi32(_mm512_sub_epi32(r1, p1), 8));
}

// One record from a block's 128 codes: 32-blocks j = 0..3 as two vectors of
// their even and their odd elements (the record's plane order: a block's 64
// even elements, then its 64 odd ones).
void BuildRecord(const uint8_t* codes, uint8_t* rec) {
  const __m512i even_at =
      _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd_at = _mm512_add_epi32(even_at, _mm512_set1_epi32(1));
  __m512i even[4], odd[4];
  __m512i low_bits = _mm512_setzero_si512();
  __mmask16 nan = 0;
  for (int j = 0; j < 4; ++j) {
    __mmask16 n0, n1;
    const __m512i a0 = E4M3Ints(
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + 32 * j))),
        &n0);
    const __m512i a1 = E4M3Ints(_mm512_cvtepu8_epi32(_mm_loadu_si128(
                                    reinterpret_cast<const __m128i*>(codes + 32 * j + 16))),
                                &n1);
    nan |= n0 | n1;
    even[j] = _mm512_permutex2var_epi32(a0, even_at, a1);
    odd[j] = _mm512_permutex2var_epi32(a0, odd_at, a1);
    low_bits = _mm512_or_si512(low_bits, _mm512_or_si512(a0, a1));
  }
  // Every a a multiple of 8: the planes of a/8 (exact arithmetic shifts).
  const bool two_planes = (_mm512_reduce_or_epi32(low_bits) & 7) == 0;
  const int shift = two_planes ? 3 : 0;
  auto* planes = reinterpret_cast<int8_t*>(rec);
  int32_t offset[4];
  for (int j = 0; j < 4; ++j) {
    const __m512i even_a = _mm512_srai_epi32(even[j], shift);
    const __m512i odd_a = _mm512_srai_epi32(odd[j], shift);
    StorePlanes(planes, 16 * j, even_a);
    StorePlanes(planes, 64 + 16 * j, odd_a);
    offset[j] = 12 * _mm512_reduce_add_epi32(_mm512_add_epi32(even_a, odd_a));
  }
  const int32_t nan_flag = nan != 0 ? 1 : 0;
  const int32_t plane_count = two_planes ? 2 : 3;
  const float unit = two_planes ? 0x1p-7f : 0x1p-10f;
  std::memcpy(rec + kFp4OffsetAt, offset, sizeof offset);
  std::memcpy(rec + kFp4NanAt, &nan_flag, sizeof nan_flag);
  std::memcpy(rec + kFp4PlanesAt, &plane_count, sizeof plane_count);
  std::memcpy(rec + kFp4UnitAt, &unit, sizeof unit);
}

}  // namespace

void BuildFp4RecordsAvx512(const uint8_t* codes, int64_t in, uint8_t* rec) {
  for (int64_t kb = 0; kb < in / 128; ++kb) {
    BuildRecord(codes + kb * 128, rec + kb * kFp4RecordBytes);
  }
}

}  // namespace dsv4::kernels::cpu
