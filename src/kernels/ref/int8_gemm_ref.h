// Scalar references of kernels/int8_gemm.h: plain loops, the oracles for the
// differential tests.  `pool` is accepted for signature parity and ignored.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"
#include "kernels/int8_gemm.h"
#include "tensor/numeric.h"

namespace dsv4::kernels::ref {

void ActQuantInt8PerToken(const bf16* x, int64_t m, int64_t k, int8_t* codes, float* scales);
void Int8Gemm(const int8_t* x_codes, const float* x_scales, int64_t m, const Int8Weight& w, bf16* y,
              ThreadPool* pool);

// The per-output exact INT32 dot product (shared by the SIMD tails).
int32_t Int8Dot(const int8_t* a, const int8_t* b, int64_t k);

}  // namespace dsv4::kernels::ref
