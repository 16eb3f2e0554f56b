// The AVX-512 kernels that use VBMI byte permutes: FP4 (CPUs with
// AVX512-VBMI and AVX512-VNNI; gemm.cc picks it through
// GemmKernels::fp4_vbmi) and FP8 with BF16 dot products (AVX512-VBMI and
// AVX512-BF16; GemmKernels::fp8_bf16dot).  Their own translation unit
// because only it is compiled with -mavx512vbmi: the other AVX-512 kernels
// must keep running on AVX-512 CPUs without VBMI.
#include "kernels/cpu/gemm_avx512_traits-inl.h"
#include "kernels/cpu/gemm_fp4_outer-inl.h"
#include "kernels/cpu/gemm_fp4dot-inl.h"
#include "kernels/cpu/gemm_fp8dot-inl.h"

namespace dsv4::kernels::cpu {
namespace {

// Decodes the weight nibbles with vpermb, which reads only an index byte's
// low 6 bits: with the 16-entry table repeated 4 times, the bits above a
// nibble need no masking.  Per 64 packed bytes: one shift and two permutes
// instead of a shift, two ANDs and two vpshufb.  Same bytes, same bits.
struct GemmAvx512Vbmi : GemmAvx512 {
  [[gnu::always_inline]] static void Fp4Weights(const uint8_t* packed, I* w) {
    const I table = _mm512_broadcast_i32x4(
        _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    const I v = LoadI(packed);
    w[0] = _mm512_permutexvar_epi8(v, table);
    w[1] = _mm512_permutexvar_epi8(_mm512_srli_epi16(v, 4), table);
  }
};

}  // namespace

void Fp4GemmPanelsAvx512Vbmi(const Fp4GemmArgs& a, const Tile& t) {
  Fp4GemmTile<GemmAvx512Vbmi>(a, t);
}

void Fp8DotGemmPanelsAvx512(const Fp8GemmArgs& a, const Tile& t) { Fp8DotGemm(a).Run(t); }

void Fp4DotGemmPanelsAvx512(const Fp4GemmArgs& a, const Tile& t) { Fp4DotGemm(a).Run(t); }

void Fp4DotActivationsAvx512Vbmi(const uint8_t* codes, const float* scales, int64_t in, int64_t m,
                                 int64_t r, bf16* xh) {
  Fp4DotActivations(codes, scales, in, m, r, xh);
}

void Fp8DotActivationsAvx512Vbmi(const uint8_t* codes, const float* scales, int64_t in, int64_t m,
                                 int64_t r, bf16* xh) {
  Fp8DotActivations(codes, scales, in, m, r, xh);
}

}  // namespace dsv4::kernels::cpu
