#include "kernels/gemm.h"

#include "kernels/ref/gemm_ref.h"

namespace dsv4::kernels {

void Fp8Gemm(const uint8_t* x_codes, const float* x_scales, int64_t m, const Fp8Weight& w,
             bf16* y, ThreadPool* pool) {
  ref::Fp8Gemm(x_codes, x_scales, m, w, y, pool);
}

void Fp4Gemm(const uint8_t* x_codes, const float* x_scales, int64_t m, const Fp4Weight& w,
             bf16* y, ThreadPool* pool) {
  ref::Fp4Gemm(x_codes, x_scales, m, w, y, pool);
}

void GemmBf16(const bf16* x, int64_t ldx, int64_t m, int64_t k, const bf16* w, int64_t n,
              bf16* y, int64_t ldy, ThreadPool* pool) {
  ref::GemmBf16(x, ldx, m, k, w, n, y, ldy, pool);
}

void GemmBf16F32(const bf16* x, int64_t m, int64_t k, const bf16* w, int64_t n, float* y,
                 ThreadPool* pool) {
  ref::GemmBf16F32(x, m, k, w, n, y, pool);
}

void GemmBf16xF32(const bf16* x, int64_t m, int64_t k, const float* w, int64_t n, float* y,
                  ThreadPool* pool) {
  ref::GemmBf16xF32(x, m, k, w, n, y, pool);
}

}  // namespace dsv4::kernels
