// Scalar references of kernels/gemm.h: straightforward loops in the
// reference's reduction order (sequential K inside each scale block, blocks in
// ascending order).  Oracles for the golden and differential tests; the `pool`
// argument is accepted for signature parity and ignored.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"
#include "kernels/gemm.h"
#include "tensor/numeric.h"

namespace dsv4::kernels::ref {

void Fp8Gemm(const uint8_t* x_codes, const float* x_scales, int64_t m, const Fp8Weight& w, bf16* y,
             ThreadPool* pool);
void Fp4Gemm(const uint8_t* x_codes, const float* x_scales, int64_t m, const Fp4Weight& w, bf16* y,
             ThreadPool* pool);
void GemmBf16(const bf16* x, int64_t ldx, int64_t m, int64_t k, const bf16* w, int64_t n, bf16* y,
              int64_t ldy, ThreadPool* pool);
void GemmBf16Fp8(const bf16* x, int64_t ldx, int64_t m, const Fp8Weight& w, bf16* y, int64_t ldy,
                 ThreadPool* pool);
void GemmBf16F32(const bf16* x, int64_t m, int64_t k, const bf16* w, int64_t n, float* y,
                 ThreadPool* pool);
void GemmBf16xF32(const bf16* x, int64_t m, int64_t k, const float* w, int64_t n, float* y,
                  ThreadPool* pool);

}  // namespace dsv4::kernels::ref
