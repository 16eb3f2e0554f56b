// AVX2 peak-rate loops (kernels/peak.h): FP32 FMA and the vpmaddubsw +
// vpmaddwd byte dot products the AVX2 FP4 and W8A8 kernels use; no BF16 dot
// products below AVX512-BF16.  Built with the baseline x86-64-v3 flags.
#include <immintrin.h>

#include "kernels/cpu/peak_cpu.h"
#include "kernels/cpu/peak_simd-inl.h"

namespace dsv4::kernels::cpu {
namespace {

// 8 lanes of acc += 1 x 1.
struct Fp32FmaAvx2 {
  using Acc = __m256;
  static constexpr int64_t kMultiplyAddsPerStep = 8;
  __m256 one = _mm256_set1_ps(1.0f);
  Fp32FmaAvx2() { Opaque(one); }
  static Acc Zero() { return _mm256_setzero_ps(); }
  [[gnu::always_inline]] Acc Step(Acc acc) const { return _mm256_fmadd_ps(one, one, acc); }
  static double Sum(Acc acc) {
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, acc);
    double sum = 0;
    for (float v : lanes) sum += v;
    return sum;
  }
};

// 8 INT32 lanes of acc += Σ of 4 byte products 1 x 1, the way the AVX2 FP4
// kernel forms vpdpbusd's sums (gemm_avx2.cc DotU8S8).
struct Int8DotAvx2 {
  using Acc = __m256i;
  static constexpr int64_t kMultiplyAddsPerStep = 32;
  __m256i u = _mm256_set1_epi8(1);
  __m256i s = _mm256_set1_epi8(1);
  __m256i ones16 = _mm256_set1_epi16(1);
  Int8DotAvx2() {
    Opaque(s);
    Opaque(ones16);
  }
  static Acc Zero() { return _mm256_setzero_si256(); }
  [[gnu::always_inline]] Acc Step(Acc acc) const {
    __m256i x = u;
    Opaque(x);  // a fresh product at every step (see Opaque)
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(x, s), ones16));
  }
  static double Sum(Acc acc) {
    alignas(32) int32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc);
    double sum = 0;
    for (int32_t v : lanes) sum += static_cast<double>(static_cast<uint32_t>(v));
    return sum;
  }
};

}  // namespace

constinit const PeakLoops kPeakLoopsAvx2 = {
    MakePeakLoop<Fp32FmaAvx2, kPeakChainsAvx2>("vfmadd231ps ymm"),
    MakePeakLoop<Int8DotAvx2, kPeakChainsAvx2>("vpmaddubsw+vpmaddwd+vpaddd ymm"),
    MakePeakLoop<Int8DotAvx2, kPeakChainsAvx2>("vpmaddubsw+vpmaddwd+vpaddd ymm"),
    {},
};

}  // namespace dsv4::kernels::cpu
