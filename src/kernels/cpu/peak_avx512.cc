// AVX-512 peak-rate loops (kernels/peak.h): FP32 FMA, vpdpbusd (VNNI; on
// CPUs without it vpmaddubsw + vpmaddwd, as the FP4 kernel's
// GemmAvx512NoVnni) and vdpbf16ps.  Compiled with AVX-512 flags; peak.cc
// reaches it only when ActiveIsa() == kAvx512 and checks VNNI and BF16.
#include "kernels/cpu/avx512_intrinsics.h"
#include "kernels/cpu/peak_cpu.h"
#include "kernels/cpu/peak_simd-inl.h"

namespace dsv4::kernels::cpu {
namespace {

double SumF32(__m512 acc) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, acc);
  double sum = 0;
  for (float v : lanes) sum += v;
  return sum;
}

double SumU32(__m512i acc) {
  alignas(64) uint32_t lanes[16];
  _mm512_store_si512(lanes, acc);
  double sum = 0;
  for (uint32_t v : lanes) sum += static_cast<double>(v);
  return sum;
}

// 16 lanes of acc += 1 x 1.
struct Fp32FmaAvx512 {
  using Acc = __m512;
  static constexpr int64_t kMultiplyAddsPerStep = 16;
  __m512 one = _mm512_set1_ps(1.0f);
  Fp32FmaAvx512() { Opaque(one); }
  static Acc Zero() { return _mm512_setzero_ps(); }
  [[gnu::always_inline]] Acc Step(Acc acc) const { return _mm512_fmadd_ps(one, one, acc); }
  static double Sum(Acc acc) { return SumF32(acc); }
};

// 16 INT32 lanes of acc += Σ of 4 byte products 1 x 1.
struct Int8DotAvx512 {
  using Acc = __m512i;
  static constexpr int64_t kMultiplyAddsPerStep = 64;
  __m512i u = _mm512_set1_epi8(1);
  __m512i s = _mm512_set1_epi8(1);
  Int8DotAvx512() {
    Opaque(u);
    Opaque(s);
  }
  static Acc Zero() { return _mm512_setzero_si512(); }
  [[gnu::always_inline]] Acc Step(Acc acc) const { return _mm512_dpbusd_epi32(acc, u, s); }
  static double Sum(Acc acc) { return SumU32(acc); }
};

// The same sums without VNNI.
struct Int8DotAvx512NoVnni {
  using Acc = __m512i;
  static constexpr int64_t kMultiplyAddsPerStep = 64;
  __m512i u = _mm512_set1_epi8(1);
  __m512i s = _mm512_set1_epi8(1);
  __m512i ones16 = _mm512_set1_epi16(1);
  Int8DotAvx512NoVnni() {
    Opaque(s);
    Opaque(ones16);
  }
  static Acc Zero() { return _mm512_setzero_si512(); }
  [[gnu::always_inline]] Acc Step(Acc acc) const {
    __m512i x = u;
    Opaque(x);  // a fresh product at every step (see Opaque)
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(x, s), ones16));
  }
  static double Sum(Acc acc) { return SumU32(acc); }
};

// 16 FP32 lanes of acc += 1 x 1 + 1 x 1 (BF16 pairs).
struct Bf16DotAvx512 {
  using Acc = __m512;
  static constexpr int64_t kMultiplyAddsPerStep = 32;
  __m512bh one = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3f80));  // BF16 1.0
  Bf16DotAvx512() { Opaque(one); }
  static Acc Zero() { return _mm512_setzero_ps(); }
  [[gnu::always_inline]] Acc Step(Acc acc) const { return _mm512_dpbf16_ps(acc, one, one); }
  static double Sum(Acc acc) { return SumF32(acc); }
};

}  // namespace

constinit const PeakLoops kPeakLoopsAvx512 = {
    MakePeakLoop<Fp32FmaAvx512, kPeakChainsAvx512>("vfmadd231ps zmm"),
    MakePeakLoop<Int8DotAvx512, kPeakChainsAvx512>("vpdpbusd zmm"),
    MakePeakLoop<Int8DotAvx512NoVnni, kPeakChainsAvx512>("vpmaddubsw+vpmaddwd+vpaddd zmm"),
    MakePeakLoop<Bf16DotAvx512, kPeakChainsAvx512>("vdpbf16ps zmm"),
};

}  // namespace dsv4::kernels::cpu
