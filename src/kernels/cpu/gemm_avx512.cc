// AVX-512 instantiation of the GEMM kernel families (gemm_simd-inl.h): 16
// FP32 lanes, 16-column panels.  Compiled with AVX-512 flags; gemm_driver.cc reaches
// it only through kGemmKernelsAvx512 when ActiveIsa() == kAvx512.  Layout and
// numerics: docs/kernels.md.
#include "kernels/cpu/gemm_avx512_traits-inl.h"
#include "kernels/cpu/gemm_fp4_outer-inl.h"
#include "kernels/cpu/gemm_simd-inl.h"

namespace dsv4::kernels::cpu {
namespace {

// AVX-512 CPUs without AVX512-VNNI: each vpdpbusd as vpmaddubsw (pairs of
// products, at most 2·24·128 in magnitude: never saturates) + vpmaddwd.
struct GemmAvx512NoVnni : GemmAvx512 {
  [[gnu::always_inline]] static I DotU8S8(I acc, I u, I s) {
    return _mm512_add_epi32(acc,
                            _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
  }
  [[gnu::always_inline]] static I DotU8S8At(I acc, I u, const uint8_t* p) {
    return DotU8S8(acc, u, BroadcastI(p));
  }
};

constexpr GemmKernels Avx512Table() {
  GemmKernels k = GemmKernelTable<GemmAvx512>();
  k.fp4 = &Fp4GemmTile<GemmAvx512>;
  k.fp4_without_vnni = &Fp4GemmTile<GemmAvx512NoVnni>;
  k.fp4_vbmi = &Fp4GemmPanelsAvx512Vbmi;
  k.fp8_bf16dot = &Fp8DotGemmPanelsAvx512;
  k.fp8_dot_activations = &Fp8DotActivationsAvx512Vbmi;
  k.fp4_bf16dot = &Fp4DotGemmPanelsAvx512;
  k.fp4_dot_activations = &Fp4DotActivationsAvx512Vbmi;
  k.fp4_records = &BuildFp4RecordsAvx512;
  return k;
}

}  // namespace

constinit const GemmKernels kGemmKernelsAvx512 = Avx512Table();

}  // namespace dsv4::kernels::cpu
