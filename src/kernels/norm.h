// RMS normalizations (docs/model.md "Block and mHC" and "Attention paths").
#pragma once

#include <cstdint>

#include "tensor/numeric.h"

namespace dsv4::kernels {

// y = bf16(fp32(w) * (x * rsqrt(mean(x^2) + eps))), per row of width dim.
// In place (y == x) is allowed.
void RmsNorm(const bf16* x, int64_t rows, int64_t dim, const bf16* w, float eps, bf16* y);

// Per-head query RMS in place with the reference's five BF16 roundings:
// sq = bf16(q^2); ms = bf16(sum(sq)/dim); ms = bf16(ms + eps); r = bf16(rsqrt(ms)); q = bf16(q*r).
// q [rows, dim] where a row is one (token, head).
void QHeadRms(bf16* q, int64_t rows, int64_t dim, float eps);

}  // namespace dsv4::kernels
